"""Lite topics in the store: a record carrying ``__LITE_TOPIC`` is written once to the CommitLog and
queued twice, in its topic's queue and in queue 0 of its lite topic's LMQ ``%LMQ%$<topic>$<lite>``
(RocketMQ's multi-dispatch; docs/grpc.md, "Lite topics")."""

from __future__ import annotations

import os

from tidalmq.common.record import decode_record
from tidalmq.store.consume_queue_table import LMQ_FILE_SIZE
from tidalmq.store.message_store import GetStatus, PutRequest

from .conftest import rec


def _lite(parent: str, lite: str, body: bytes) -> bytearray:
    return rec(parent, 0, body=body, props={"__LITE_TOPIC": lite})


def _bodies(store, queue: str) -> list[bytes]:  # noqa: ANN001
    res = store.get_message("g", queue, 0, 0, 32)
    if res.status != GetStatus.FOUND:
        return []
    return [decode_record(b).body for b in res.buffers]


def test_lite_records_get_an_lmq_entry_each(make_store) -> None:
    store = make_store()
    bodies = {"a": [b"a0", b"a1", b"a2"], "b": [b"b0"]}
    puts = [PutRequest("P", 0, [_lite("P", "a", b"a0")]), PutRequest("P", 0, [_lite("P", "b", b"b0")]),
            PutRequest("P", 0, [_lite("P", "a", b"a1")]), PutRequest("P", 0, [rec("P", 0, body=b"plain")]),
            PutRequest("P", 0, [_lite("P", "a", b"a2")])]
    results = store.put_messages(puts)
    store.wait_reput(store.max_phy_offset, 5)
    assert store.get_max_offset_in_queue("P", 0) == 5  # the parent queue holds every record
    for lite, want in bodies.items():
        assert store.get_max_offset_in_queue(f"%LMQ%$P${lite}", 0) == len(want)
        assert _bodies(store, f"%LMQ%$P${lite}") == want
    # one CommitLog record per message: the LMQ entry points at the parent's record
    assert store.get_commit_log_offset_in_queue("%LMQ%$P$b", 0, 0) == results[1].wrote_offset
    assert sorted(os.listdir(store.config.consume_queue_path)) == ["%LMQ%$P$a", "%LMQ%$P$b", "P"]
    files = os.listdir(os.path.join(store.config.consume_queue_path, "%LMQ%$P$a", "0"))
    assert files == ["0" * 20]
    assert os.path.getsize(os.path.join(store.config.consume_queue_path, "%LMQ%$P$a", "0", files[0])) == LMQ_FILE_SIZE


def test_illegal_lite_name_is_queued_in_no_lmq(make_store) -> None:
    store = make_store()
    store.put_messages([PutRequest("P", 0, [_lite("P", "../x", b"bad")]),
                        PutRequest("P", 0, [_lite("P", "a$b", b"bad")])])
    store.wait_reput(store.max_phy_offset, 5)
    assert store.get_max_offset_in_queue("P", 0) == 2
    assert sorted(os.listdir(store.config.consume_queue_path)) == ["P"]


def test_system_retry_and_dlq_topics_have_no_lmq(make_store) -> None:
    """A lite message parked in the timer topic, or re-put into a retry or dead-letter topic, keeps its
    __LITE_TOPIC but is queued in no LMQ there."""
    store = make_store()
    topics = ["rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX", "%RETRY%g", "%DLQ%g"]
    store.put_messages([PutRequest(t, 0, [_lite(t, "a", b"x")]) for t in topics])
    store.wait_reput(store.max_phy_offset, 5)
    assert not [d for d in os.listdir(store.config.consume_queue_path) if d.startswith("%LMQ%")]


def test_lmq_survives_restart_and_redispatch(make_store, tmp_path) -> None:
    root = str(tmp_path / "s")
    store = make_store(root=root)
    store.put_messages([PutRequest("P", 0, [_lite("P", "a", b"x%d" % i)]) for i in range(3)])
    store.wait_reput(store.max_phy_offset, 5)
    store.shutdown()
    again = make_store(root=root)
    assert again.get_max_offset_in_queue("%LMQ%$P$a", 0) == 3
    assert again.get_max_offset_in_queue("P", 0) == 3
    again.put_messages([PutRequest("P", 0, [_lite("P", "a", b"x3")])])
    again.wait_reput(again.max_phy_offset, 5)
    assert _bodies(again, "%LMQ%$P$a") == [b"x0", b"x1", b"x2", b"x3"]


def test_lmq_rolls_into_a_second_file_and_reads_back_after_restart(make_store, tmp_path) -> None:
    """An LMQ's files hold 8,192 entries each (LMQ_FILE_SIZE), whatever mappedFileSizeConsumeQueue is."""
    root = str(tmp_path / "roll")
    store = make_store(root=root, mapped_file_size_commit_log=4 * 1024 * 1024)
    n = LMQ_FILE_SIZE // 20 + 10
    for i in range(0, n, 500):
        store.put_messages([PutRequest("P", 0, [_lite("P", "big", b"%d" % j)]) for j in range(i, min(n, i + 500))])
    store.wait_reput(store.max_phy_offset, 10)
    qdir = os.path.join(store.config.consume_queue_path, "%LMQ%$P$big", "0")
    assert sorted(os.listdir(qdir)) == [f"{0:020d}", f"{LMQ_FILE_SIZE:020d}"]
    store.shutdown()
    again = make_store(root=root, mapped_file_size_commit_log=4 * 1024 * 1024)
    assert again.get_max_offset_in_queue("%LMQ%$P$big", 0) == n
    bodies, offset = [], n - 12
    while offset < n:  # a read stops at the end of a ConsumeQueue file, as RocketMQ's does
        res = again.get_message("g", "%LMQ%$P$big", 0, offset, 32)
        bodies += [decode_record(b).body for b in res.buffers]
        offset = res.next_begin_offset
    assert bodies == [b"%d" % j for j in range(n - 12, n)]
