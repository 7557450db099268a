"""Append/read round trips, ConsumeQueue contents, statuses, filters and lookups."""

from __future__ import annotations

import os
import struct
import threading
from typing import Any

import pytest

from tidalmq.common import sysflag as sf
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.common.record import BLANK_MAGIC_CODE, decode_record
from tidalmq.common.taghash import tags_hash_code
from tidalmq.store.consume_queue import CQ_DTYPE
from tidalmq.store.message_store import GetStatus, PutRequest, PutStatus

from .conftest import FakeIndex, put_one, rec


def test_append_read_round_trip_many_files(make_store) -> None:
    store = make_store()
    file_size = store.config.mapped_file_size_commit_log
    results = []
    for i in range(300):
        body = bytes([i % 251]) * (50 + (i * 37) % 700)
        results.extend(store.put_messages([PutRequest("RT", i % 3, [rec("RT", i % 3, body=body, tags=f"t{i % 5}")])]))
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert store.wait_reput(store.max_phy_offset, 5)
    files = sorted(os.listdir(store.config.commit_log_path))
    assert len(files) > 5 and all(len(f) == 20 for f in files)
    for i, r in enumerate(results):
        # a record never spans two files
        assert r.wrote_offset // file_size == (r.wrote_offset + r.wrote_bytes - 1) // file_size
        msg = store.look_message_by_offset(r.wrote_offset)
        assert msg is not None
        assert msg.body == bytes([i % 251]) * (50 + (i * 37) % 700)
        assert msg.queue_offset == r.queue_offset == i // 3
        assert msg.commit_log_offset == r.wrote_offset
        assert msg.store_timestamp == r.store_timestamp
        assert decode_offset_msg_id(r.msg_id)[2] == r.wrote_offset
        raw = store.select_one_message_by_offset(r.wrote_offset)
        assert raw is not None and bytes(raw) == bytes(store.select_one_message_by_offset(r.wrote_offset, r.wrote_bytes))
    # every file but the last ends with a BLANK record right after its last message
    ends: dict[int, int] = {}
    for r in results:
        idx = r.wrote_offset // file_size
        ends[idx] = max(ends.get(idx, 0), r.wrote_offset + r.wrote_bytes - idx * file_size)
    for idx in sorted(ends)[:-1]:
        mf = store.commit_log.mfq.files[idx]
        size, magic = struct.unpack_from(">ii", mf.mm, ends[idx])
        assert magic == BLANK_MAGIC_CODE and size == file_size - ends[idx]
    # ConsumeQueue agrees with the CommitLog
    for q in range(3):
        got = store.get_message("g", "RT", q, 0, 1000, max_total_bytes=10**9)
        assert got.status is GetStatus.FOUND
        offsets = []
        off = 0
        while off < store.get_max_offset_in_queue("RT", q):
            got = store.get_message("g", "RT", q, off, 32)
            assert got.status is GetStatus.FOUND
            for qo, buf in zip(got.queue_offsets, got.buffers, strict=True):
                m = decode_record(buf)
                assert (m.topic, m.queue_id, m.queue_offset) == ("RT", q, qo)
                offsets.append(qo)
            off = got.next_begin_offset
        assert offsets == list(range(100))


def test_batch_request_consecutive_offsets_and_ids(make_store) -> None:
    store = make_store()
    put_one(store, "B", 1)
    res = store.put_messages([PutRequest("B", 1, [rec("B", 1, body=b"%d" % i) for i in range(5)]),
                              PutRequest("B", 2, [rec("B", 2)])])
    assert [r.status for r in res] == [PutStatus.PUT_OK] * 2
    assert res[0].queue_offset == 1 and res[0].msg_num == 5
    ids = res[0].msg_id.split(",")
    assert len(ids) == 5
    assert res[1].queue_offset == 0
    store.wait_reput(store.max_phy_offset, 5)
    got = store.get_message("g", "B", 1, 1, 32)
    assert [decode_record(b).body for b in got.buffers] == [b"%d" % i for i in range(5)]
    assert got.queue_offsets == [1, 2, 3, 4, 5]
    assert [decode_offset_msg_id(i)[2] for i in ids] == [decode_record(b).commit_log_offset for b in got.buffers]


def test_batch_never_spans_files(make_store) -> None:
    store = make_store()
    size = store.config.mapped_file_size_commit_log
    for _ in range(20):
        r = store.put_messages([PutRequest("S", 0, [rec("S", body=b"z" * 900) for _ in range(4)])])[0]
        assert r.status is PutStatus.PUT_OK
        assert r.wrote_offset // size == (r.wrote_offset + r.wrote_bytes - 1) // size


def test_illegal_requests(make_store) -> None:
    store = make_store(max_message_size=2000, mapped_file_size_commit_log=1024 * 1024)
    good = rec("I")
    bad_size = rec("I", body=b"x" * (2000 + 64 * 1024 + 1))  # beyond the body limit plus the record allowance
    corrupt = bytearray(rec("I"))
    corrupt[4:8] = b"\0\0\0\0"
    res = store.put_messages([PutRequest("I", 0, [bad_size]), PutRequest("I", 0, [corrupt]),
                              PutRequest("I", 0, []), PutRequest("I", 0, [good])])
    assert [r.status for r in res] == [PutStatus.MESSAGE_ILLEGAL] * 3 + [PutStatus.PUT_OK]
    assert res[-1].queue_offset == 0
    too_big_for_file = rec("I", body=b"x" * 1000)
    store2_res = store.put_messages([PutRequest("I", 0, [too_big_for_file] * 1100)])  # > one 1 MiB file
    assert store2_res[0].status is PutStatus.MESSAGE_ILLEGAL


def test_get_message_statuses(make_store) -> None:
    store = make_store()
    r = store.get_message("g", "NOPE", 0, 5, 32)
    assert (r.status, r.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)
    for _ in range(10):
        put_one(store, "ST")
    store.wait_reput(store.max_phy_offset, 5)
    r = store.get_message("g", "ST", 0, 10, 32)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 10, 0, 10)
    r = store.get_message("g", "ST", 0, 15, 32)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10)
    r = store.get_message("g", "ST", 0, 3, 4)
    assert (r.status, r.message_count, r.next_begin_offset) == (GetStatus.FOUND, 4, 7)
    assert r.buffer_total_size == sum(len(b) for b in r.buffers)
    assert all(isinstance(b, memoryview) for b in r.buffers)
    r = store.get_message("g", "ST", 0, 0, 32, max_total_bytes=1)  # at least one message always
    assert r.message_count == 1


def test_get_message_transfer_limits(make_store) -> None:
    store = make_store(max_transfer_count_on_message_in_memory=5)
    store.put_messages([PutRequest("L", 0, [rec("L")]) for _ in range(20)])
    store.wait_reput(store.max_phy_offset, 5)
    r = store.get_message("g", "L", 0, 0, 32)
    assert (r.message_count, r.next_begin_offset) == (5, 5)


def test_unfiltered_pulls_walk_the_queue_a_full_batch_at_a_time(make_store) -> None:
    """At the default caps (32 messages) each pull returns a full batch and the next offset after it; a pull
    asking for no message still gets one (RocketMQ's "at least one")."""
    store = make_store()
    store.put_messages([PutRequest("W", 0, [rec("W")]) for _ in range(100)])
    store.wait_reput(store.max_phy_offset, 5)
    batches, off = [], 0
    while off < 100:
        r = store.get_message("g", "W", 0, off, 64)
        batches.append((r.queue_offsets[0], r.message_count, r.next_begin_offset))
        off = r.next_begin_offset
    assert batches == [(0, 32, 32), (32, 32, 64), (64, 32, 96), (96, 4, 100)]
    r = store.get_message("g", "W", 0, 10, 0)
    assert (r.status, r.queue_offsets, r.next_begin_offset) == (GetStatus.FOUND, [10], 11)


RAISED_CAPS = {"max_transfer_count_on_message_in_memory": 1024, "mapped_file_size_consume_queue": 20 * 1024}


def _accept_all(_tag: int, _view: memoryview) -> bool:  # a filter: the pull then reads one record at a time
    return True


@pytest.mark.parametrize("file_size", [16 * 1024, 1 << 20], ids=["files-of-16KiB", "one-file"])
def test_a_large_pull_read_at_once_is_the_pull_read_one_by_one(make_store, file_size: int) -> None:
    """With the caps raised, an unfiltered pull of 200 (its records read at once) returns the same records,
    queue offsets and next offset as the same pull read one record at a time, also across CommitLog files
    (16 KiB ones hold ~100 of these records)."""
    store = make_store(mapped_file_size_commit_log=file_size, **RAISED_CAPS)
    store.put_messages([PutRequest("W", 0, [rec("W", keys=f"k{i}", body=b"b%03d" % i)]) for i in range(300)])
    store.wait_reput(store.max_phy_offset, 5)
    for off in (0, 57, 250):
        at_once = store.get_message("g", "W", 0, off, 200)
        one_by_one = store.get_message("g", "W", 0, off, 200, filter=_accept_all)
        assert at_once.status is GetStatus.FOUND
        assert at_once.queue_offsets == one_by_one.queue_offsets == list(range(off, min(300, off + 200)))
        assert [bytes(b) for b in at_once.buffers] == [bytes(b) for b in one_by_one.buffers]
        assert [decode_record(b).body for b in at_once.buffers] == [b"b%03d" % i for i in at_once.queue_offsets]
        assert at_once.next_begin_offset == one_by_one.next_begin_offset == min(300, off + 200)


def test_a_large_pull_skips_a_record_whose_crc_fails(make_store) -> None:
    """A byte of one record's properties changed in the mapping: a pull of 200 read at once is refused by
    its CRC check, read one by one, and returns every other record; the bad one is marked and never served."""
    store = make_store(mapped_file_size_commit_log=1 << 20, **RAISED_CAPS)
    store.put_messages([PutRequest("W", 0, [rec("W", keys=f"k{i:03d}")]) for i in range(200)])
    store.wait_reput(store.max_phy_offset, 5)
    first = store.get_message("g", "W", 0, 0, 200)
    victim = first.buffers[120]
    at = bytes(victim).index(b"k120") + 3
    victim[at] ^= 0x01  # k120 -> k121: the properties stay well formed, only the record CRC sees it
    del first, victim
    again = store.get_message("g", "W", 0, 0, 200)
    assert again.queue_offsets == [i for i in range(200) if i != 120]
    assert store.commit_log.corrupt_records == 1
    alone = store.get_message("g", "W", 0, 120, 1)  # the bad record alone: nothing, and the offset after it
    assert (alone.queue_offsets, alone.next_begin_offset) == ([], 121)


def test_tag_filtering(make_store) -> None:
    store = make_store()
    for i in range(30):
        put_one(store, "TAG", tags="A" if i % 3 == 0 else "B")
    for _ in range(10):
        put_one(store, "TAG", tags="C")
    store.wait_reput(store.max_phy_offset, 5)
    a = tags_hash_code("A")
    r = store.get_message("g", "TAG", 0, 0, 32, tag_codes={a})
    assert r.status is GetStatus.FOUND
    assert r.queue_offsets == list(range(0, 30, 3))
    assert all(decode_record(b).tags == "A" for b in r.buffers)
    assert r.next_begin_offset == 40  # walked past the non-matching tail
    r = store.get_message("g", "TAG", 0, 30, 32, tag_codes={a})
    assert (r.status, r.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 40)
    # commit-log level filter sees the raw record
    r = store.get_message("g", "TAG", 0, 0, 32, filter=lambda code, raw: decode_record(raw).tags == "C")
    assert r.queue_offsets == list(range(30, 40))
    assert r.filter_message_count == 30


def test_consume_queue_files_and_layout(make_store) -> None:
    store = make_store()
    results = store.put_messages([PutRequest("CQ", 7, [rec("CQ", 7, tags="x")]) for _ in range(150)])
    store.wait_reput(store.max_phy_offset, 5)
    qdir = os.path.join(store.config.consume_queue_path, "CQ", "7")
    names = sorted(os.listdir(qdir))
    assert names == [f"{i * 1280:020d}" for i in range(3)]  # 64 entries a file
    import numpy as np

    raw = b"".join(open(os.path.join(qdir, n), "rb").read() for n in names)
    arr = np.frombuffer(raw, CQ_DTYPE)[:150]
    assert arr["offset"].tolist() == [r.wrote_offset for r in results]
    assert arr["size"].tolist() == [r.wrote_bytes for r in results]
    assert set(arr["tag"].tolist()) == {tags_hash_code("x")}
    assert store.topics_and_queues() == {"CQ": [7]}
    assert store.get_commit_log_offset_in_queue("CQ", 7, 149) == results[149].wrote_offset


def test_offsets_and_times(make_store, clock) -> None:
    store = make_store()
    base = clock.now
    for i in range(20):
        clock.now = base + i * 1000
        put_one(store, "TM")
    store.wait_reput(store.max_phy_offset, 5)
    assert store.get_min_offset_in_queue("TM", 0) == 0
    assert store.get_max_offset_in_queue("TM", 0) == 20
    assert store.get_earliest_message_time("TM", 0) == base
    assert store.get_message_store_timestamp("TM", 0, 7) == base + 7000
    assert store.get_message_store_timestamp("TM", 0, 70) == -1
    assert store.get_offset_in_queue_by_time("TM", 0, base - 5) == 0
    assert store.get_offset_in_queue_by_time("TM", 0, base + 7000) == 7
    assert store.get_offset_in_queue_by_time("TM", 0, base + 6500) == 7
    assert store.get_offset_in_queue_by_time("TM", 0, base + 10**7) == 20
    assert store.get_offset_in_queue_by_time("NONE", 0, base) == 0


def test_transactions_and_schedule_topic(make_store, clock) -> None:
    store = make_store()
    prepared = rec("TX", sysflag=sf.TRANSACTION_PREPARED_TYPE, keys="half")
    res = store.put_messages([PutRequest("TX", 0, [prepared]), PutRequest("TX", 0, [rec("TX")])])
    assert res[0].queue_offset == 0 and res[1].queue_offset == 0
    sched = rec("SCHEDULE_TOPIC_XXXX", 2, props={"DELAY": "3"})  # level 3 = 10 s
    r = store.put_messages([PutRequest("SCHEDULE_TOPIC_XXXX", 2, [sched])])[0]
    store.wait_reput(store.max_phy_offset, 5)
    assert store.get_max_offset_in_queue("TX", 0) == 1  # the half message has no ConsumeQueue entry
    got = store.get_message("g", "TX", 0, 0, 32)
    assert got.buffers[0].tobytes() == store.select_one_message_by_offset(res[1].wrote_offset).tobytes()
    cq = store.find_consume_queue("SCHEDULE_TOPIC_XXXX", 2)
    assert cq is not None and cq.entry(0)[2] == r.store_timestamp + 10_000
    # prepared messages are still indexed
    assert store.index_service.query_offsets("TX", "half", 10, 0, 2**62) == [res[0].wrote_offset]


def test_query_message_dedup_and_verification(make_store) -> None:
    idx = FakeIndex(duplicate=True)
    store = make_store(index=idx)
    r1 = put_one(store, "Q", keys="k1 k2", uniq="U1")
    put_one(store, "Q", keys="other")
    r3 = put_one(store, "Q", keys="k1")
    store.wait_reput(store.max_phy_offset, 5)
    got = store.query_message("Q", "k1", 32, 0, 2**62)
    assert [decode_record(b).commit_log_offset for b in got] == [r1.wrote_offset, r3.wrote_offset]
    assert len(store.query_message("Q", "U1", 32, 0, 2**62)) == 1
    assert store.query_message("Q", "k2", 32, 0, 2**62)[0].tobytes() == store.select_one_message_by_offset(
        r1.wrote_offset).tobytes()
    # an index hit whose record does not carry the key (hash collision) is dropped
    idx.entries.append(("Q#ghost", r3.wrote_offset, r3.store_timestamp))
    assert store.query_message("Q", "ghost", 32, 0, 2**62) == []
    assert store.query_message("Other", "k1", 32, 0, 2**62) == []


def test_arrival_listener_batched(make_store) -> None:
    store = make_store(start=False)
    calls: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda arrivals: calls.extend((t, q, m) for (t, q), m in arrivals.items()))
    store.put_messages([PutRequest("AL", q % 2, [rec("AL", q % 2)]) for q in range(10)])
    assert store.wait_reput(store.max_phy_offset, 5)
    assert sorted(calls) == [("AL", 0, 5), ("AL", 1, 5)]


def test_arrival_listener_from_thread(make_store) -> None:
    store = make_store()
    seen = threading.Event()
    store.add_arrival_listener(lambda arrivals: seen.set() if arrivals.get(("AL2", 0)) == 3 else None)
    store.put_messages([PutRequest("AL2", 0, [rec("AL2") for _ in range(3)])])
    assert seen.wait(5)


def test_delete_topics_and_runtime_info(make_store) -> None:
    store = make_store()
    put_one(store, "D1")
    put_one(store, "D2", 3)
    store.wait_reput(store.max_phy_offset, 5)
    assert store.topics_and_queues() == {"D1": [0], "D2": [3]}
    store.delete_topics(["D1"])
    assert store.topics_and_queues() == {"D2": [3]}
    assert not os.path.exists(os.path.join(store.config.consume_queue_path, "D1"))
    assert store.get_message("g", "D1", 0, 0, 32).status is GetStatus.NO_MESSAGE_IN_QUEUE
    r = put_one(store, "D1")
    assert r.queue_offset == 0
    info = store.runtime_info()
    assert info["commitLogMaxOffset"] == str(store.max_phy_offset)
    assert all(isinstance(v, str) for v in info.values())


def test_put_before_load_and_after_shutdown(tmp_path, make_store) -> None:
    store = make_store()
    store.shutdown()
    assert put_one(store, "X").status is PutStatus.SERVICE_NOT_AVAILABLE


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_request_flush(make_store, mode: str) -> None:
    store = make_store(flush_disk_type=mode)
    done: list[bool] = []
    ev = threading.Event()

    def cb(ok: bool) -> None:
        done.append(ok)
        if len(done) == 40:
            ev.set()

    def worker() -> None:
        for _ in range(10):
            r = put_one(store, "F")
            store.request_flush(r.wrote_offset + r.wrote_bytes, cb)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert ev.wait(10)
    assert done == [True] * 40
    if mode == "SYNC_FLUSH":
        assert store.commit_log.flushed_where >= store.max_phy_offset


def test_sync_flush_timeout(make_store, monkeypatch) -> None:
    store = make_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=50)
    slow = threading.Event()
    real = store.commit_log.mfq.flush

    def slow_flush(least_pages: int = 0) -> bool:
        slow.wait(0.3)
        return real(least_pages)

    monkeypatch.setattr(store.commit_log.mfq, "flush", slow_flush)
    got: list[bool] = []
    ev = threading.Event()
    r = put_one(store, "F")
    def flushed(ok: bool) -> None:
        got.append(ok)
        ev.set()
    store.request_flush(r.wrote_offset + r.wrote_bytes, flushed)
    assert ev.wait(5)
    assert got == [False]


def _batch(topic: str, queue_id: int, bodies: list[bytes], props: list[dict[str, str]],
           sysflag: int = 0, born_host: bytes = bytes([10, 0, 0, 7])):  # noqa: ANN202
    """A SEND_BATCH_MESSAGE body encoded by the broker's batch encoder."""
    from tidalmq.common.message import encode_properties
    from tidalmq.common.record_batch import encode_batch_records

    items = []
    for i, (body, p) in enumerate(zip(bodies, props, strict=True)):
        pb = encode_properties(p).encode()
        items.append(struct.pack(">iiiii", 20 + len(body) + 2 + len(pb), 0, 0, i, len(body)) + body
                     + struct.pack(">h", len(pb)) + pb)
    return encode_batch_records(b"".join(items), topic=topic, queue_id=queue_id, sysflag=sysflag, born_timestamp=7,
                                born_host=born_host, born_port=99, store_host=bytes([127, 0, 0, 1]),
                                store_port=10911)


@pytest.mark.parametrize("packed", [False, True], ids=["pieces", "packed"])
@pytest.mark.parametrize("born_host", [bytes([10, 0, 0, 7]), bytes(range(16))], ids=["ipv4", "ipv6"])
def test_encoded_batch_is_patched_dispatched_and_indexed(make_store, clock, born_host, packed, monkeypatch) -> None:
    from tidalmq.common import record_batch

    monkeypatch.setattr(record_batch, "_PACKED_MIN", 1 if packed else 1 << 30)  # one matrix of records, or pieces
    idx = FakeIndex()
    store = make_store(index=idx)
    put_one(store, "EB", 2)
    n = 6
    batch = _batch("EB", 2, [b"body-%d" % i for i in range(n)],
                   [{"UNIQ_KEY": f"U{i}", "TAGS": f"t{i % 2}", "KEYS": f"k{i} shared"} for i in range(n)],
                   born_host=born_host)
    assert (batch.packed is not None) == packed
    res = store.put_messages([PutRequest("EB", 2, batch), PutRequest("EB", 3, [rec("EB", 3)])])
    assert [r.status for r in res] == [PutStatus.PUT_OK] * 2
    assert (res[0].queue_offset, res[0].msg_num, res[0].wrote_bytes) == (1, n, sum(map(len, batch.pieces)))
    assert store.wait_reput(store.max_phy_offset, 5)
    got = store.get_message("g", "EB", 2, 1, 32)
    msgs = [decode_record(b, check_crc=True) for b in got.buffers]
    assert [m.body for m in msgs] == [b"body-%d" % i for i in range(n)]
    assert [m.queue_offset for m in msgs] == got.queue_offsets == list(range(1, n + 1))
    assert [m.flag for m in msgs] == list(range(n))
    assert all(m.store_timestamp == clock.now and m.born_host[1] == 99 for m in msgs)
    ids = res[0].msg_id.split(",")
    assert [decode_offset_msg_id(i)[2] for i in ids] == [m.commit_log_offset for m in msgs]
    assert msgs[0].commit_log_offset == res[0].wrote_offset
    # tag hash codes in the ConsumeQueue, keys and UNIQ_KEY in the index
    cq = store.find_consume_queue("EB", 2)
    assert [cq.entry(i)[2] for i in range(1, n + 1)] == [tags_hash_code(f"t{i % 2}") for i in range(n)]
    assert [o for k, o, _ in idx.entries if k == "EB#U3"] == [msgs[3].commit_log_offset]
    assert len([o for k, o, _ in idx.entries if k == "EB#shared"]) == n
    assert store.get_max_offset_in_queue("EB", 3) == 1


@pytest.mark.parametrize("packed", [False, True], ids=["pieces", "packed"])
def test_encoded_batch_rolls_to_next_file_and_survives_recovery(make_store, tmp_path, packed, monkeypatch) -> None:
    from tidalmq.common import record_batch

    monkeypatch.setattr(record_batch, "_PACKED_MIN", 1 if packed else 1 << 30)
    store = make_store()
    size = store.config.mapped_file_size_commit_log
    results = [store.put_messages([PutRequest("ER", 0, _batch("ER", 0, [b"%d" % k * 700] * 4, [{"UNIQ_KEY": f"{k}"}] * 4))])[0]
               for k in range(12)]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert all(r.wrote_offset // size == (r.wrote_offset + r.wrote_bytes - 1) // size for r in results)
    assert len({r.wrote_offset // size for r in results}) >= 3
    assert store.wait_reput(store.max_phy_offset, 5)
    root = store.config.store_path_root_dir
    store.shutdown()
    os.unlink(os.path.join(root, "consumequeue", "ER", "0", os.listdir(os.path.join(root, "consumequeue", "ER", "0"))[-1]))
    open(os.path.join(root, "abort"), "wb").close()  # as after a crash: rebuild what the queue lost
    again = make_store(root=root)
    assert again.get_max_offset_in_queue("ER", 0) == 48
    got: list[Any] = []
    off = 0
    while off < 48:
        r = again.get_message("g", "ER", 0, off, 32)
        got.extend(decode_record(b).body for b in r.buffers)
        off = r.next_begin_offset
    assert got == [b"%d" % k * 700 for k in range(12) for _ in range(4)]


@pytest.mark.parametrize("packed", [False, True], ids=["pieces", "packed"])
def test_tampered_encoded_batch_is_refused_and_nothing_written(make_store, packed, monkeypatch) -> None:
    from tidalmq.common import record_batch

    monkeypatch.setattr(record_batch, "_PACKED_MIN", 1 if packed else 1 << 30)
    store = make_store()
    batch = _batch("ET", 0, [b"a", b"b"], [{}, {}])
    batch.sizes[0] += 1  # a size that is not the record's TOTALSIZE
    before = store.max_phy_offset
    r = store.put_messages([PutRequest("ET", 0, batch)])[0]
    assert r.status is PutStatus.MESSAGE_ILLEGAL and store.max_phy_offset == before
    other = _batch("ET", 0, [b"a", b"b"], [{}, {}])
    other.heads["magic"][1] ^= 0xFF  # the second record's MAGICCODE
    assert store.put_messages([PutRequest("ET", 0, other)])[0].status is PutStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == before


def test_dispatch_reads_only_the_properties_it_needs(make_store) -> None:
    store = make_store()
    raw = rec("DP", props={"TAGS": "first"})
    # a repeated name (the last wins, as in Java's properties map) and a value that is not UTF-8
    props = b"TAGS\x01first\x02X\x01\xff\xfe\x02TAGS\x01second\x02KEYS\x01\xc3\x28 ok\x02"
    body_end = len(raw) - 2 - len(b"TAGS\x01first\x02")
    tampered = bytearray(raw[:body_end]) + struct.pack(">H", len(props)) + props
    struct.pack_into(">i", tampered, 0, len(tampered))
    assert store.put_messages([PutRequest("DP", 0, [tampered])])[0].status is PutStatus.PUT_OK
    put_one(store, "DP", tags="after")
    assert store.wait_reput(store.max_phy_offset, 5)  # the odd record does not stall dispatch
    cq = store.find_consume_queue("DP", 0)
    assert cq.entry(0)[2] == tags_hash_code("second") and cq.entry(1)[2] == tags_hash_code("after")


def test_pwrite_all_resumes_short_writes(tmp_path, monkeypatch) -> None:
    from tidalmq.store import mapped_file

    real = os.pwritev
    calls = []

    def short(fd, bufs, offset):  # noqa: ANN001, ANN202 - writes at most 5 bytes a call
        calls.append(len(bufs))
        data = b"".join(bytes(b) for b in bufs)[:5]
        return real(fd, [data], offset)

    monkeypatch.setattr(mapped_file, "_IOV_MAX", 3)
    monkeypatch.setattr(mapped_file.os, "pwritev", short)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        bufs = [b"abc", bytearray(b"defgh"), memoryview(b"ijklmnop")[2:], b"", b"qrstuvwxyz"]
        mapped_file.pwrite_all(fd, bufs, 4, sum(map(len, bufs)))
    finally:
        os.close(fd)
    assert path.read_bytes() == b"\0" * 4 + b"abcdefghklmnopqrstuvwxyz"
    assert max(calls) <= 3


def test_pwrite_all_rewrites_a_run_one_of_whose_calls_was_short(tmp_path, monkeypatch) -> None:
    """The calls of a long run are made without counting each one's bytes: one short call in the middle
    (its successors written at the wrong offsets) shows in the total, and the run is written again whole."""
    from tidalmq.store import mapped_file

    real = os.pwritev
    calls = []

    def second_short(fd, bufs, offset):  # noqa: ANN001, ANN202 - the second call writes 3 bytes only
        calls.append(offset)
        if len(calls) == 2:
            return real(fd, [b"".join(bytes(b) for b in bufs)[:3]], offset)
        return real(fd, bufs, offset)

    monkeypatch.setattr(mapped_file, "_IOV_MAX", 2)
    monkeypatch.setattr(mapped_file.os, "pwritev", second_short)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        bufs = [b"ab", b"cde", b"fghi", b"jk", b"lmnop", b"q"]
        mapped_file.pwrite_all(fd, bufs, 2, sum(map(len, bufs)))
    finally:
        os.close(fd)
    assert path.read_bytes() == b"\0" * 2 + b"abcdefghijklmnopq"
    assert calls[2] == 2 + 5 + 3  # the third call of the first pass went where the short one stopped
    assert len(calls) > 3  # and the run was written again


@pytest.mark.parametrize("small", [True, False], ids=["batch-of-small-records", "large-singles"])
def test_a_run_is_written_head_last_and_reads_back(make_store, monkeypatch, small) -> None:
    """A run of records is written from its 9th byte on, then its first 8 (TOTALSIZE, MAGICCODE) last, so
    a crash in between leaves nothing a scan takes for a record: a batch's small pieces joined into one
    buffer, large records passed as they are. Both read back as what was put."""
    from tidalmq.store import commit_log

    calls: list[tuple[int, int, int]] = []
    real = commit_log.pwrite_all

    def recording(fd, buffers, offset, nbytes):  # noqa: ANN001, ANN202
        calls.append((offset, nbytes, len(buffers)))
        real(fd, buffers, offset, nbytes)

    monkeypatch.setattr(commit_log, "pwrite_all", recording)
    store = make_store(mapped_file_size_commit_log=1 << 20)
    if small:
        bodies = [b"b%d" % i for i in range(20)]
        req = PutRequest("RW", 0, _batch("RW", 0, bodies, [{"UNIQ_KEY": f"R{i}"} for i in range(20)]))
    else:
        bodies = [bytes([65 + i]) * 4096 for i in range(3)]
        req = PutRequest("RW", 0, [rec("RW", 0, body=b) for b in bodies])
    res = store.put_messages([req])[0]
    assert res.status == PutStatus.PUT_OK
    start, end = res.wrote_offset, res.wrote_offset + res.wrote_bytes
    assert [(o, n) for o, n, _ in calls] == [(start + 8, end - start - 8), (start, 8)]
    assert calls[0][2] == (1 if small else 3)  # joined, or a buffer a record
    assert store.wait_reput(store.max_phy_offset, 5)
    got = store.get_message("g", "RW", 0, 0, 64)
    assert [decode_record(b, check_crc=True).body for b in got.buffers] == bodies


def test_dispatch_columns_built_at_append_equal_a_read_back(make_store) -> None:
    store = make_store(start=False)
    props = [{"UNIQ_KEY": f"P{i}", "TAGS": f"t{i % 3}", **({"KEYS": f"k{i} x"} if i % 2 else {})} for i in range(5)]
    store.put_messages([PutRequest("PR", 0, _batch("PR", 0, [b"a%d" % i for i in range(5)], props)),
                        PutRequest("PR", 1, [rec("PR", 1, tags="single", keys="s")]),
                        PutRequest("PR2", 3, _batch("PR2", 3, [b"b", b"c"], [{"TAGS": "x"}, {}]))])
    store.put_messages([PutRequest("PR", 0, _batch("PR", 0, [b"d"], [{"UNIQ_KEY": "last"}]))])
    cl = store.commit_log
    assert len(cl.scan._preread) == 3  # the batches; the single record is read back
    from_append, end, stalled = cl.read_dispatch_requests(0, 1 << 30)
    assert not cl.scan._preread and not stalled and end == store.max_phy_offset
    read_back, end2, _ = cl.read_dispatch_requests(0, 1 << 30)
    assert end2 == end and len(read_back) == 9
    assert from_append.rows() == read_back.rows()


@pytest.mark.parametrize("props", [
    [{"UNIQ_KEY": f"U{i}", "TAGS": f"t{i % 2}", "KEYS": f"k{i} x"} for i in range(6)],
    [{"KEYS": "a b", "TAGS": "", "WAIT": "true", "UNIQ_KEY": "é"} for _ in range(4)],
    [{"__LITE_TOPIC": f"lite{i}", "UNIQ_KEY": f"L{i}"} for i in range(3)],
    [{"DELAY": "3", "TAGS": "d"} for _ in range(3)],  # a tag code that depends on the topic: read record by record
    [{"WAIT": "false"} for _ in range(2)],
], ids=["tags-keys-uniq", "empty-tag", "lite", "delay", "none-dispatched"])
def test_dispatch_columns_of_a_batch_sharing_one_layout_equal_a_read_back(make_store, props) -> None:
    """A batch whose messages share one property layout is dispatched from its columns
    (CommitLogScan._layout_columns): the ConsumeQueue and index fields are those a read back finds."""
    store = make_store(start=False)
    batch = _batch("PL", 0, [b"m%d" % i for i in range(len(props))], props)
    assert batch.layout is not None and batch.found is None
    store.put_messages([PutRequest("PL", 0, batch)])
    cl = store.commit_log
    from_append, end, _ = cl.read_dispatch_requests(0, 1 << 30)
    read_back, end2, _ = cl.read_dispatch_requests(0, 1 << 30)
    assert end2 == end and len(read_back) == len(props)
    assert from_append.rows() == read_back.rows()


@pytest.mark.parametrize("few", [0, 1000], ids=["column-wise", "one-by-one"])
def test_scan_reads_dispatch_fields_and_stops_at_faults(make_store, monkeypatch, few) -> None:
    """scan_records (numpy for many records, RecordView for a few) over IPv4/IPv6 hosts and both magics:
    the dispatch fields of every record; a body CRC failure in the middle reported but not fatal, one in
    the last record before garbage a torn end; a record lying about its own offset stops the scan."""
    from tidalmq.common.record import MESSAGE_MAGIC_CODE_V2, encode_record
    from tidalmq.store import commit_log_scan as clm

    store = make_store(start=False, mapped_file_size_commit_log=64 * 1024)
    v6 = bytes(range(16))
    recs = [rec("SA", 0, tags="a", uniq="u0"), rec("SA", 1, keys="k1 k2", props={"X": "y"}),
            encode_record(topic="SB", queue_id=2, body=b"six", properties={"TAGS": "b"}, born_host=v6, store_host=v6,
                          store_port=10911),
            rec("SA", 0, body=b""), rec("SCHEDULE_TOPIC_XXXX", 1, props={"DELAY": "2", "TAGS": "t"}),
            encode_record(topic="SA", queue_id=3, body=b"v2", properties={"UNIQ_KEY": "v2"},
                          magic=MESSAGE_MAGIC_CODE_V2)]
    put = store.put_messages([PutRequest("X", i, [r]) for i, r in enumerate(recs)])
    cl = store.commit_log
    mf = cl.mfq.files[0]
    monkeypatch.setattr(clm, "SCAN_FEW", few)
    got = cl.scan.scan_records(mf, 0, mf.wrote_position)
    assert (got.end, got.verdict, got.crc_failed) == (mf.wrote_position, clm.END, ())
    ts = got.last_store_timestamp
    assert ts == put[0].store_timestamp
    assert [(r.topic, r.queue_id, r.commit_log_offset, r.msg_size, r.keys, r.uniq_key, r.store_timestamp)
            for r in got.batch.rows()] == [
        ("SA", 0, put[0].wrote_offset, len(recs[0]), None, "u0", ts),
        ("SA", 1, put[1].wrote_offset, len(recs[1]), "k1 k2", None, ts),
        ("SB", 2, put[2].wrote_offset, len(recs[2]), None, None, ts),
        ("SA", 0, put[3].wrote_offset, len(recs[3]), None, None, ts),
        ("SCHEDULE_TOPIC_XXXX", 1, put[4].wrote_offset, len(recs[4]), None, None, ts),
        ("SA", 3, put[5].wrote_offset, len(recs[5]), None, "v2", ts)]
    codes = [r.tags_code for r in got.batch.rows()]
    assert codes[0] == cl.scan.tags_code_of(b"a") and codes[2] == cl.scan.tags_code_of(b"b") and codes[1] == 0
    assert codes[4] == ts + 5000  # SCHEDULE_TOPIC_XXXX: the deliver time of level 2 (5 s)
    # a flipped body byte in the middle: every record kept, the damaged one reported
    second, last = put[1].wrote_offset, put[5].wrote_offset
    mf.mm[second + 88] ^= 0xFF  # the first byte of its body (IPv4 hosts)
    crc = cl.scan.scan_records(mf, 0, mf.wrote_position, check_crc=True)
    assert (len(crc.batch), crc.verdict, crc.crc_failed) == (6, clm.END, (second,))
    # in the last record, followed by unwritten bytes: a torn write, the scan ends before it
    mf.mm[last + 88] ^= 0xFF  # its body (b"v2")
    torn = cl.scan.scan_records(mf, 0, mf.file_size, check_crc=True)
    assert (len(torn.batch), torn.verdict, torn.end, torn.crc_failed) == (5, clm.INVALID, last, (second,))
    struct.pack_into(">q", mf.mm, put[2].wrote_offset + 28, 12345)
    lying = cl.scan.scan_records(mf, 0, mf.wrote_position)
    assert (len(lying.batch), lying.verdict) == (2, clm.INVALID)


@pytest.mark.parametrize("few", [0, 1000], ids=["column-wise", "one-by-one"])
def test_scan_of_a_short_ipv6_flagged_record_at_the_end_of_a_file(make_store, monkeypatch, few) -> None:
    """Garbage that claims IPv6 hosts in a record too short for them, in the last bytes of a file: the
    scan must call it INVALID, not read past the record (or the mapping)."""
    from tidalmq.common.record import MESSAGE_MAGIC_CODE
    from tidalmq.store import commit_log_scan as clm

    store = make_store(start=False, mapped_file_size_commit_log=64 * 1024)
    put_one(store, "SV")
    cl = store.commit_log
    mf = cl.mfq.files[0]
    size = 91  # the smallest record the scan accepts; IPv6 hosts alone need 112 bytes before the body
    pos = mf.file_size - size
    flags = sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG
    struct.pack_into(">iiiiiqqiq", mf.mm, pos, size, MESSAGE_MAGIC_CODE, 0, 0, 0, 0, mf.file_from_offset + pos, flags, 0)
    monkeypatch.setattr(clm, "SCAN_FEW", few)
    scan = cl.scan.scan_records(mf, pos, mf.file_size)
    assert (len(scan.batch), scan.verdict, scan.end) == (0, clm.INVALID, pos)
