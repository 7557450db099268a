"""Normal and abnormal recovery: torn tails, lagging ConsumeQueues, checkpoint-driven rebuilds."""

from __future__ import annotations

import os
import struct
import time
from typing import Any

import numpy as np
import pytest

from tidalmq.common.record import decode_record
from tidalmq.store.consume_queue import CQ_DTYPE
from tidalmq.store.message_store import GetStatus, PutRequest, PutStatus

from .conftest import FakeIndex, after_power_loss, crash, put_one, rec, set_dispatched


def read_queue(store, topic: str, qid: int) -> list:  # noqa: ANN001
    out: list[Any] = []
    off = store.get_min_offset_in_queue(topic, qid)
    while True:
        r = store.get_message("g", topic, qid, off, 32)
        if r.status is not GetStatus.FOUND:
            if r.status is GetStatus.NO_MATCHED_MESSAGE and r.next_begin_offset > off:
                off = r.next_begin_offset
                continue
            return out
        for qo, b in zip(r.queue_offsets, r.buffers, strict=True):
            m = decode_record(b)
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, qo)
            out.append(m)
        off = r.next_begin_offset


def fill(store, n: int, queues: int = 3, size: int = 300) -> list:  # noqa: ANN001
    res = store.put_messages([PutRequest("R", i % queues, [rec("R", i % queues, body=b"%06d" % i + b"." * size)])
                              for i in range(n)])
    assert all(r.status is PutStatus.PUT_OK for r in res)
    assert store.wait_reput(store.max_phy_offset, 5)
    return res


def test_normal_recovery(make_store, tmp_path) -> None:
    store = make_store()
    fill(store, 200)
    end = store.max_phy_offset
    store.shutdown()
    assert not os.path.exists(store.config.abort_path)
    again = make_store()
    assert again.last_exit_ok
    assert again.max_phy_offset == end
    assert [m.body[:6] for m in read_queue(again, "R", 1)] == [b"%06d" % i for i in range(1, 200, 3)]
    r = put_one(again, "R", 1)
    assert r.queue_offset == 67 and r.wrote_offset == end


def test_abnormal_recovery_torn_tail(make_store) -> None:
    store = make_store()
    res = fill(store, 100)
    end = store.max_phy_offset
    crash(store)
    # A torn record at the end: a valid header and part of a body, then garbage.
    torn = bytearray(rec("R", 0, body=b"T" * 500))
    mf_path = os.path.join(store.config.commit_log_path, f"{end - end % store.config.mapped_file_size_commit_log:020d}")
    with open(mf_path, "r+b") as f:
        f.seek(end % store.config.mapped_file_size_commit_log)
        f.write(torn[:200] + os.urandom(100))
    again = make_store()
    assert not again.last_exit_ok
    assert again.max_phy_offset == end
    msgs = [m for q in range(3) for m in read_queue(again, "R", q)]
    assert len(msgs) == 100 and len({m.commit_log_offset for m in msgs}) == 100
    # appends continue exactly at the end of valid data, with the right queue offsets
    r = put_one(again, "R", 0, body=b"after")
    assert r.wrote_offset == end and r.queue_offset == 34
    again.wait_reput(again.max_phy_offset, 5)
    assert read_queue(again, "R", 0)[-1].body == b"after"
    again.shutdown()
    third = make_store()
    assert third.max_phy_offset == r.wrote_offset + r.wrote_bytes
    assert len(read_queue(third, "R", 0)) == 35
    assert res[0].wrote_offset == 0


def _damage_body(store, victim) -> None:  # noqa: ANN001
    fs = store.config.mapped_file_size_commit_log
    path = os.path.join(store.config.commit_log_path, f"{victim.wrote_offset - victim.wrote_offset % fs:020d}")
    with open(path, "r+b") as f:
        f.seek(victim.wrote_offset % fs + victim.wrote_bytes - 40)  # inside the body: CRC breaks
        f.write(b"!!!!")


def test_abnormal_recovery_skips_a_corrupt_body_and_keeps_what_follows(make_store) -> None:
    """A body damaged in the middle of the log: recovery keeps every record after it (RocketMQ would
    truncate there and lose them) and the damaged one is never served; it is logged and counted."""
    store = make_store()
    res = fill(store, 30, queues=1)
    end = store.max_phy_offset
    crash(store)
    _damage_body(store, res[20])
    again = make_store()
    assert again.max_phy_offset == end
    assert [m.queue_offset for m in read_queue(again, "R", 0)] == [*range(20), *range(21, 30)]
    assert again.look_message_by_offset(res[20].wrote_offset) is None
    assert again.runtime_info()["commitLogCorruptRecords"] == "1"
    assert put_one(again, "R", 0).queue_offset == 30


@pytest.mark.parametrize("same_boot", [True, False], ids=["process-crash", "after-a-power-loss"])
def test_abnormal_recovery_truncates_a_torn_last_record(make_store, same_boot: bool) -> None:  # noqa: ANN001
    """A CRC failure in the last record before unreadable bytes is a torn write: truncated there, as
    RocketMQ's recovery does. (A process dies before the reput reads a torn record: its last round ended
    at the victim.)"""
    store = make_store()
    res = fill(store, 30, queues=1)
    crash(store)
    victim = res[-1]
    _damage_body(store, victim)
    if same_boot:
        set_dispatched(store, victim.wrote_offset)
    else:
        after_power_loss(store)
    again = make_store()
    assert again.max_phy_offset == victim.wrote_offset
    assert [m.queue_offset for m in read_queue(again, "R", 0)] == list(range(29))
    assert put_one(again, "R", 0).queue_offset == 29


def test_abnormal_recovery_rebuilds_lagging_consume_queue(make_store, clock) -> None:
    store = make_store()
    first = fill(store, 60)
    clock.now += 10_000
    first += fill(store, 30)
    store.shutdown()  # clean: checkpoint now covers the first batches
    clock.now += 60_000
    store = make_store()
    second = fill(store, 60)
    crash(store)
    after_power_loss(store)
    # Lose the ConsumeQueue tail (as if its pages never reached the disk): zero the last 15 entries of q0.
    qdir = os.path.join(store.config.consume_queue_path, "R", "0")
    names = sorted(os.listdir(qdir))
    per_file = store.config.mapped_file_size_consume_queue // 20
    for qo in range(35, 50):
        path = os.path.join(qdir, f"{(qo // per_file) * per_file * 20:020d}")
        with open(path, "r+b") as f:
            f.seek((qo % per_file) * 20)
            f.write(bytes(20))
    # and delete queue 2 altogether
    for n in os.listdir(os.path.join(store.config.consume_queue_path, "R", "2")):
        os.unlink(os.path.join(store.config.consume_queue_path, "R", "2", n))
    assert names
    again = make_store()
    all_res = first + second
    for q in range(3):
        msgs = read_queue(again, "R", q)
        expect = [r.wrote_offset for i, r in enumerate(all_res) if i % 3 == q]
        got = [m.commit_log_offset for m in msgs]
        if q == 2:
            # queue 2's older entries were before the checkpoint: only the part after it is rebuilt
            assert got == expect[len(expect) - len(got):]
            # rebuilt from the checkpoint's file on, not from the start of the CommitLog
            assert 20 <= len(got) < len(expect)
        else:
            assert got == expect
    assert put_one(again, "R", 0).queue_offset == 50


def test_abnormal_recovery_drops_dirty_consume_queue_entries(make_store) -> None:
    """ConsumeQueue entries pointing past the recovered CommitLog end are removed."""
    store = make_store()
    fill(store, 30, queues=1)
    end = store.max_phy_offset
    crash(store)
    qpath = os.path.join(store.config.consume_queue_path, "R", "0", f"{0:020d}")
    with open(qpath, "r+b") as f:
        f.seek(30 * 20)
        bogus = np.zeros(2, CQ_DTYPE)
        bogus["offset"] = [end, end + 300]
        bogus["size"] = 300
        f.write(bogus.tobytes())
    again = make_store()
    assert again.get_max_offset_in_queue("R", 0) == 30
    assert len(read_queue(again, "R", 0)) == 30


def test_normal_recovery_with_lagging_consume_queue(make_store) -> None:
    """Even after a clean exit the reput point is taken from the ConsumeQueues, so records they miss
    (e.g. a store abandoned before dispatch) are dispatched at load."""
    store = make_store(start=False)
    store.put_messages([PutRequest("N", 0, [rec("N")]) for _ in range(10)])
    store.commit_log.flush(0)
    store._shutdown = True
    store._close()  # no dispatch happened, no abort file (never started)
    again = make_store()
    assert again.get_max_offset_in_queue("N", 0) == 10
    assert len(read_queue(again, "N", 0)) == 10


def test_empty_commit_log_destroys_queues(make_store) -> None:
    store = make_store()
    fill(store, 5)
    store.shutdown()
    for n in os.listdir(store.config.commit_log_path):
        os.unlink(os.path.join(store.config.commit_log_path, n))
    again = make_store()
    assert again.topics_and_queues() == {}
    assert put_one(again, "R", 0).queue_offset == 0


def test_abnormal_recovery_redispatches_only_what_the_checkpoint_does_not_cover(make_store, clock) -> None:
    """One CommitLog file holds everything (RocketMQ would re-dispatch all of it); re-dispatch starts at the
    first record stored at or after the checkpoint's minimum timestamp (its time - 3 s)."""
    one_file = 1 << 20

    def put(n: int, tag: str) -> list:  # noqa: ANN001
        res = store.put_messages([PutRequest("R", i % 3, [rec("R", i % 3, body=b"." * 200, keys=f"{tag}{i}")])
                                  for i in range(n)])
        assert store.wait_reput(store.max_phy_offset, 5)
        return [r.wrote_offset for r in res]

    store = make_store(mapped_file_size_commit_log=one_file)
    old = put(30, "old")
    clock.now += 10_000
    recent = put(30, "recent")  # stored at the checkpoint's time: within its 3 s margin
    deadline = time.monotonic() + 5
    while store.commit_log.flushed_store_timestamp != clock.now and time.monotonic() < deadline:
        time.sleep(0.01)  # the flush service's next round
    store.flush_consume_queues(0)  # the thorough flush that advances the checkpoint
    clock.now += 10_000
    after = put(30, "after")
    crash(store)
    after_power_loss(store)
    # The ConsumeQueue tail past the checkpoint never reached the disk.
    qpath = os.path.join(store.config.consume_queue_path, "R", "0", f"{0:020d}")
    with open(qpath, "r+b") as f:
        f.seek(20 * 20)
        f.write(bytes(10 * 20))
    index = FakeIndex()
    again = make_store(mapped_file_size_commit_log=one_file, index=index)
    assert {off for _, off, _ in index.entries} == set(recent + after)
    every = old + recent + after
    for q in range(3):
        assert [m.commit_log_offset for m in read_queue(again, "R", q)] == every[q::3]


@pytest.mark.parametrize("same_boot", [True, False], ids=["process-crash", "after-a-reboot"])
def test_restart_after_a_process_crash_redispatches_only_what_was_not_queued(make_store, same_boot: bool) -> None:  # noqa: ANN001
    """The abort file names the boot it was written in. A crash recovered in that same boot was a process
    crash: the page cache kept every queue and index entry, so re-dispatch starts at the first record missing
    from its ConsumeQueue (here the last 5 of queue 0, as if the reput round under way had not written them),
    not at the checkpoint (after a reboot, as after a power loss: everything since the checkpoint)."""
    index = FakeIndex()  # shared by both lives of the store: the index kept in the page cache
    store = make_store(index=index)
    res = store.put_messages([PutRequest("R", i % 3, [rec("R", i % 3, uniq=f"U{i}")]) for i in range(60)])
    assert store.wait_reput(store.max_phy_offset, 5) and len(index.entries) == 60
    crash(store)
    qdir = os.path.join(store.config.consume_queue_path, "R", "0")
    (name,) = os.listdir(qdir)
    with open(os.path.join(qdir, name), "r+b") as f:
        f.seek(15 * 20)
        f.write(bytes(5 * 20))  # queue 0's entries 15..19: the records res[45], res[48] ... res[57]
    if same_boot:
        set_dispatched(store, res[45].wrote_offset)  # the round from res[45] on was under way
    else:
        after_power_loss(store)
    indexed = len(index.entries)
    again = make_store(index=index)
    for q in range(3):
        assert [m.commit_log_offset for m in read_queue(again, "R", q)] == \
               [r.wrote_offset for i, r in enumerate(res) if i % 3 == q]
    redispatched = len(index.entries) - indexed
    assert redispatched == (60 - 45 if same_boot else 60)


@pytest.mark.parametrize("marker", ["round-end", "mid-record", "unknown"])
def test_a_process_crash_is_walked_from_where_the_last_reput_round_ended(make_store, caplog, marker: str) -> None:  # noqa: ANN001
    """The checkpoint's dispatchedPhyOffset (written after every reput round, kept by the page cache) is
    where recovery after a process crash starts its walk, so its cost does not grow with what was written
    since the checkpoint's timestamps. An offset that is not a record's start (or none) falls back to the
    walk from the checkpoint's file, with the same outcome."""
    index = FakeIndex()
    store = make_store(index=index)
    res = store.put_messages([PutRequest("R", i % 3, [rec("R", i % 3, uniq=f"U{i}")]) for i in range(60)])
    assert store.wait_reput(store.max_phy_offset, 5) and len(index.entries) == 60
    crash(store)
    with open(store.config.checkpoint_path, "rb") as f:
        f.seek(40)
        assert struct.unpack(">q", f.read(8))[0] == store.max_phy_offset  # what the live store wrote
    qdir = os.path.join(store.config.consume_queue_path, "R", "0")
    (name,) = os.listdir(qdir)
    with open(os.path.join(qdir, name), "r+b") as f:
        f.seek(15 * 20)
        f.write(bytes(5 * 20))  # the round from res[45] on had not written queue 0's part
    offset = {"round-end": res[45].wrote_offset, "mid-record": res[45].wrote_offset + 7, "unknown": 0}[marker]
    set_dispatched(store, offset)
    indexed = len(index.entries)
    caplog.set_level("INFO", "tidalmq.store")
    again = make_store(index=index)
    for q in range(3):
        assert [m.commit_log_offset for m in read_queue(again, "R", q)] == \
               [r.wrote_offset for i, r in enumerate(res) if i % 3 == q]
    assert len(index.entries) - indexed == 15
    walked = [r.getMessage() for r in caplog.records if "walking from" in r.getMessage()]
    assert walked == ([f"recovery after a process crash: walking from {offset}, where the last reput round ended"]
                      if marker == "round-end" else
                      ["recovery after a process crash: walking from 0, the checkpoint's file"])
