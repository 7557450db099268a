"""Idempotent produce (``duplicationEnable``, broker/dedup.py): a send whose UNIQ_KEY is in the window is
answered with the original's result and not stored again; the window is bounded and survives a restart."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from tests.broker.rawclient import run, send_cmd, wait_max_offset
from tests.store.conftest import FakeClock, FakeIndex, put_one, small_config
from tests.support import Standalone
from tidalmq.broker.dedup import SNAPSHOT_FILE, DuplicationWindow, window_key
from tidalmq.broker.dedup_index import KeyIndex, key_hash
from tidalmq.client.message import Message, MessageQueue
from tidalmq.client.producer import Producer
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient
from tidalmq.store.message_store import DefaultMessageStore

SMALL = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024), "duplicationEnable": "true"}


def key(i: int) -> str:
    return f"{i:032X}"


async def max_offset(c: RemotingClient, addr: str, topic: str, queue_id: int = 0) -> int:
    r = await c.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={
        "topic": topic, "queueId": str(queue_id)}), 5)
    return int(r.ext_fields["offset"])


async def send(c: RemotingClient, addr: str, topic: str, uniq: str, body: bytes = b"x") -> RemotingCommand:
    r = await c.invoke(addr, send_cmd(topic, body, props={"UNIQ_KEY": uniq}), 5)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


def answer(r: RemotingCommand) -> tuple[str, str, str]:
    return r.ext_fields["msgId"], r.ext_fields["queueId"], r.ext_fields["queueOffset"]


@pytest.fixture
def dedup_broker(tmp_path: Path):
    with Standalone(tmp_path / "data", SMALL) as s:
        yield s


def test_duplicate_answered_with_original_result_and_not_stored(dedup_broker: Standalone) -> None:
    addr = dedup_broker.broker_addr

    async def scenario() -> None:
        c = RemotingClient()
        try:
            first = await send(c, addr, "Dedup", key(1), b"one")
            await send(c, addr, "Dedup", key(2), b"two")
            again = await send(c, addr, "Dedup", key(1), b"one")
            assert answer(again) == answer(first)
            await wait_max_offset(c, addr, "Dedup", 0, 2)
            assert await max_offset(c, addr, "Dedup") == 2
            # A retry topic keeps the original's UNIQ_KEY by design: never deduplicated; nor is a message
            # forwarded to another topic (the window is per topic).
            for other in ("%RETRY%G", "DedupForward"):
                r = await c.invoke(addr, send_cmd(other, b"one", props={"UNIQ_KEY": key(1)}), 5)
                assert r.code == ResponseCode.SUCCESS and r.ext_fields["msgId"] != first.ext_fields["msgId"]
        finally:
            await c.close()

    run(scenario())


def test_batch_duplicates_whole_and_partial(dedup_broker: Standalone) -> None:
    async def scenario() -> None:
        async with Producer("DedupPG", dedup_broker.namesrv_addr) as p:
            mq = MessageQueue("DedupBatch", (await p.fetch_publish_queues("DedupBatch"))[0].broker_name, 0)

            def batch(ids: range) -> list[Message]:
                return [Message("DedupBatch", f"m{i}", properties={"UNIQ_KEY": key(i)}) for i in ids]

            first = await p.send_batch(batch(range(0, 4)), queue=mq)
            again = await p.send_batch(batch(range(0, 4)), queue=mq)
            assert (again.offset_msg_id, again.queue_offset) == (first.offset_msg_id, first.queue_offset)
            mixed = await p.send_batch(batch(range(2, 7)), queue=mq)  # 2, 3 stored before; 4, 5, 6 new
            assert mixed.queue_offset == 4
        c = RemotingClient()
        try:
            await wait_max_offset(c, dedup_broker.broker_addr, "DedupBatch", 0, 7)
            assert await max_offset(c, dedup_broker.broker_addr, "DedupBatch") == 7
        finally:
            await c.close()

    run(scenario())


def test_window_is_bounded_by_size(tmp_path: Path) -> None:
    """The window holds at least its newest ``duplicationWindowSize`` keys and drops older ones a segment at
    a time (a segment is a quarter of a small window: one key here; 1/64 of a large one)."""
    with Standalone(tmp_path / "data", {**SMALL, "duplicationWindowSize": "3"}) as s:
        async def scenario() -> None:
            c = RemotingClient()
            try:
                first = await send(c, s.broker_addr, "DedupBound", key(1))
                assert answer(await send(c, s.broker_addr, "DedupBound", key(1))) == answer(first)
                for i in range(2, 4):
                    await send(c, s.broker_addr, "DedupBound", key(i))
                assert answer(await send(c, s.broker_addr, "DedupBound", key(1))) == answer(first)
                await send(c, s.broker_addr, "DedupBound", key(4))  # three newer keys push key 1 out
                late = await send(c, s.broker_addr, "DedupBound", key(1))
                assert late.ext_fields["queueOffset"] == "4"
            finally:
                await c.close()

        run(scenario())


def test_key_index_bounds_and_lookup() -> None:
    now = [1_000_000.0]
    idx = KeyIndex(window_size=8, window_ms=60_000, clock=lambda: now[0])  # segments of 2 keys
    ts = int(now[0] * 1000)
    for i in range(10):
        idx.add(key_hash(key(i)), 100 * i, ts)
        idx.evict()
    assert idx.segment_size == 2 and 8 <= len(idx) <= 8 + 2
    assert idx.lookup([key_hash(key(9)), key_hash(key(2)), key_hash("absent")]) == [900, 200, None]
    assert idx.lookup([key_hash(key(0)), key_hash(key(1))]) == [None, None]  # past the bound
    now[0] += 61  # and by age: every key older than the window's seconds goes
    idx.evict()
    assert len(idx) == 0 and idx.lookup([key_hash(key(9)), key_hash(key(2))]) == [None, None]


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_window_survives_restart(tmp_path: Path, how: str) -> None:
    """SIGKILL before any snapshot (rebuilt from the CommitLog tail), or a stop after one (snapshot +
    replay of what came after it)."""
    s = Standalone(tmp_path / "data", {**SMALL, "duplicationSnapshotIntervalSeconds": "1"})
    answers: dict[int, tuple[str, str, str]] = {}

    async def before() -> None:
        c = RemotingClient()
        try:
            answers[1] = answer(await send(c, s.broker_addr, "DedupRestart", key(1)))
            if how == "stop":  # past the snapshot interval: the next send writes a snapshot
                snap = tmp_path / "data" / "store" / "config" / SNAPSHOT_FILE
                deadline = asyncio.get_running_loop().time() + 15
                i = 2
                while not snap.exists():  # a send settled past the interval writes one (off the loop)
                    assert asyncio.get_running_loop().time() < deadline, "no snapshot was written"
                    answers[i] = answer(await send(c, s.broker_addr, "DedupRestart", key(i)))
                    i += 1
                    await asyncio.sleep(0.05)
            answers[1000] = answer(await send(c, s.broker_addr, "DedupRestart", key(1000)))  # after the snapshot
        finally:
            await c.close()

    async def after() -> None:
        c = RemotingClient()
        try:
            n = await max_offset(c, s.broker_addr, "DedupRestart")
            for i, original in answers.items():
                assert answer(await send(c, s.broker_addr, "DedupRestart", key(i))) == original
            assert await max_offset(c, s.broker_addr, "DedupRestart") == n == len(answers)
        finally:
            await c.close()

    with s:
        run(before())
        s.kill() if how == "kill" else s.stop()
        s.start()
        run(after())


def test_window_drops_keys_older_than_its_seconds(tmp_path: Path) -> None:
    clock = FakeClock()
    store = DefaultMessageStore(small_config(str(tmp_path / "store")), clock=clock, index_service=FakeIndex())
    assert store.load()
    store.start()
    try:
        put_one(store, "Aged", uniq=key(1))
        w = DuplicationWindow(store, str(tmp_path), window_seconds=60, window_size=100,
                              clock=lambda: clock.now / 1000)
        w.ensure_loaded()
        assert window_key("Aged", key(1)) in w
        clock.now += 61_000
        w._evict()
        assert window_key("Aged", key(1)) not in w
    finally:
        store.shutdown()


def test_idempotent_producer_rides_out_a_restart_and_stores_once(dedup_broker: Standalone) -> None:
    """``Producer(idempotent=True)``: a send made while the broker is down is retried on its queue until
    the broker is back; sending the same message again returns the original's result."""
    async def scenario() -> None:
        async with Producer("IdemPG", dedup_broker.namesrv_addr, idempotent=True, send_timeout=30) as p:
            assert (await p.send(Message("Idem", "a"))).ok  # the route is known from here on
            dedup_broker.kill()
            msg = Message("Idem", "b")
            pending = asyncio.ensure_future(p.send(msg))
            await asyncio.get_running_loop().run_in_executor(None, dedup_broker.start)
            res = await asyncio.wait_for(pending, 30)
            assert res.ok
            again = await p.send(msg)  # the same UNIQ_KEY: answered from the window
            assert (again.offset_msg_id, again.message_queue, again.queue_offset) == \
                (res.offset_msg_id, res.message_queue, res.queue_offset)
        c = RemotingClient()
        try:
            total = 0
            for q in range(8):
                total += await max_offset(c, dedup_broker.broker_addr, "Idem", q)
            assert total == 2
        finally:
            await c.close()

    run(scenario(), timeout=90)


def test_timer_cancel_is_not_taken_for_a_duplicate(dedup_broker: Standalone) -> None:
    """A cancel carries its target's UNIQ_KEY (and is parked in the same timer topic): it is stored."""
    import time

    async def scenario() -> None:
        async with Producer("DedupTimerPG", dedup_broker.namesrv_addr) as p:
            scheduled = await p.send(Message("DedupTimer", "later", deliver_time_ms=int(time.time() * 1000) + 60_000))
            cancel = await p.cancel_scheduled(scheduled)
            assert cancel.ok and cancel.offset_msg_id != scheduled.offset_msg_id
            again = await p.send(Message("DedupTimer", "later", properties={"UNIQ_KEY": scheduled.msg_id},
                                         deliver_time_ms=scheduled.deliver_time_ms), queue=scheduled.message_queue)
            assert again.offset_msg_id == scheduled.offset_msg_id  # the scheduled send itself still is one

    run(scenario())


def test_a_window_forgotten_at_promotion_is_rebuilt_with_what_was_replicated(tmp_path: Path) -> None:
    """A replica loads its window if a send reaches it while a slave; what replication appends after that is
    not in it. Promotion (BrokerController.become_master) forgets the window, and the next put rebuilds it
    from the CommitLog, the replicated records included."""
    clock = FakeClock()
    store = DefaultMessageStore(small_config(str(tmp_path / "store")), clock=clock, index_service=FakeIndex())
    assert store.load()
    store.start()
    try:
        w = DuplicationWindow(store, str(tmp_path), window_seconds=60, window_size=100,
                              clock=lambda: clock.now / 1000)
        w.ensure_loaded()  # as a slave: nothing stored yet
        put_one(store, "Replicated", uniq=key(1))  # what the HA client appends
        assert window_key("Replicated", key(1)) not in w
        w.forget()
        w.ensure_loaded()
        assert window_key("Replicated", key(1)) in w
    finally:
        store.shutdown()


def test_timer_batch_stored_as_two_puts_is_answered_once_and_stored_once(dedup_broker: Standalone) -> None:
    """A batch of timer messages, one of them due already (stored at once in its topic, the other parked):
    sent twice, the second is answered with the first's ids, message for message, and nothing is stored
    again."""
    from tests.schedule.test_timer_broker import batch_cmd

    addr = dedup_broker.broker_addr

    async def scenario() -> None:
        c = RemotingClient()
        try:
            now = int(time.time() * 1000)
            items = [(b"later", {"UNIQ_KEY": key(20), "TIMER_DELIVER_MS": str(now + 600_000)}),
                     (b"due", {"UNIQ_KEY": key(21), "TIMER_DELIVER_MS": str(now - 1000)})]
            timer_before = await max_offset(c, addr, "rmq_sys_wheel_timer")
            first = await c.invoke(addr, batch_cmd("DedupTimer", items), 5)
            assert first.code == ResponseCode.SUCCESS, first.remark
            again = await c.invoke(addr, batch_cmd("DedupTimer", items), 5)
            assert again.code == ResponseCode.SUCCESS, again.remark
            assert again.ext_fields["msgId"] == first.ext_fields["msgId"]
            assert len(set(first.ext_fields["msgId"].split(","))) == 2
            # markers sent after it: once they are dispatched, a second copy would be too
            await send(c, addr, "DedupTimer", key(22))
            marker = await c.invoke(addr, batch_cmd("DedupTimerMarker", [
                (b"m", {"UNIQ_KEY": key(23), "TIMER_DELIVER_MS": str(now + 600_000)})]), 5)
            assert marker.code == ResponseCode.SUCCESS, marker.remark
            await wait_max_offset(c, addr, "DedupTimer", 0, 2)
            await wait_max_offset(c, addr, "rmq_sys_wheel_timer", 0, timer_before + 2)
            assert await max_offset(c, addr, "DedupTimer") == 2
            assert await max_offset(c, addr, "rmq_sys_wheel_timer") == timer_before + 2
        finally:
            await c.close()

    run(scenario())


def test_replay_without_a_snapshot_starts_on_a_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """No duplication.json (a first start with dedup, a crash before any snapshot): the replay of the
    CommitLog's tail starts where a CommitLog file starts, not a fixed byte count before the end, which
    falls inside a record (issue #45: 0 keys rebuilt, 'undecodable record')."""
    import tidalmq.broker.dedup as dedup

    monkeypatch.setattr(dedup, "_REBUILD_BYTES", 1000)  # inside the last 16 KiB file, mid-record
    clock = FakeClock()
    store = DefaultMessageStore(small_config(str(tmp_path / "store")), clock=clock, index_service=FakeIndex())
    assert store.load()
    store.start()
    try:
        for i in range(200):  # more than one 16 KiB file
            put_one(store, "Tail", uniq=key(i))
        first, end = store.commit_log_range()
        assert end > 16 * 1024 and end % (16 * 1024) > 1000
        w = DuplicationWindow(store, str(tmp_path / "config"), window_seconds=3600, window_size=1000,
                              clock=lambda: clock.now / 1000)
        with caplog.at_level("ERROR"):
            w.ensure_loaded()
        assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
        file_start = end - end % (16 * 1024)
        kept = [i for i in range(200) if window_key("Tail", key(i)) in w]
        assert kept and kept == list(range(kept[0], 200)) and len(w.index) == len(kept)
        # every record of the last file, not just the last 1000 bytes' worth
        assert w.original(window_key("Tail", key(kept[0]))).phys >= file_start > end - 1000 - 16 * 1024  # type: ignore[union-attr]
        assert (tmp_path / "config" / SNAPSHOT_FILE).exists()  # written at load: a crash now finds it
    finally:
        store.shutdown()


def test_window_of_segments_is_saved_at_shutdown_and_loaded(tmp_path: Path) -> None:
    """Segments are saved as files; a stop writes the snapshot, so a restart loads them and replays only
    what is newer (here: nothing), and answers every key from before the stop."""
    settings = {**SMALL, "duplicationWindowSize": "40", "duplicationSnapshotIntervalSeconds": "3600"}
    s = Standalone(tmp_path / "data", settings)
    answers: dict[int, tuple[str, str, str]] = {}

    async def scenario(first: bool) -> None:
        c = RemotingClient()
        try:
            for i in range(30):
                r = answer(await send(c, s.broker_addr, "DedupSeg", key(i)))
                if first:
                    answers[i] = r
                else:
                    assert r == answers[i]
            assert await max_offset(c, s.broker_addr, "DedupSeg") == 30
        finally:
            await c.close()

    with s:
        run(scenario(True))
        s.stop()
        config = tmp_path / "data" / "store" / "config"
        snap = json.loads((config / SNAPSHOT_FILE).read_text())
        assert len(snap["segments"]) == 2, snap  # 3 segments of 10 keys; the newest is rebuilt by the replay
        assert sorted(p.name for p in (config / "duplication").iterdir()) == sorted(snap["segments"])
        s.start()
        run(scenario(False))


def test_hash_table_agrees_with_a_dict_through_inserts_deletes_and_rebuilds() -> None:
    import numpy as np

    from tidalmq.broker.dedup_index import HashTable

    rng = np.random.default_rng(7)
    table, model = HashTable(), dict[int, int]()
    batches = []
    for step in range(40):  # from 4,096 slots to several rebuilds; hashes 0 and 1 included
        hs = rng.integers(0, 2**64, 700, dtype=np.uint64)
        if step == 3:
            hs[:2] = [0, 1]
        ps = rng.integers(0, 2**40, 700, dtype=np.int64)
        table.insert(hs, ps)
        model.update(zip(hs.tolist(), ps.tolist(), strict=True))
        batches.append((hs, ps))
        if step % 3 == 2:  # the oldest batch goes, as an evicted segment
            old_h, old_p = batches.pop(0)
            table.delete(old_h, old_p)
            for h in old_h.tolist():
                model.pop(h, None)
    probe = np.concatenate([np.array(list(model), np.uint64), rng.integers(0, 2**64, 2000, dtype=np.uint64)])
    found, phys = table.lookup(probe)
    assert found.tolist() == [h in model for h in probe.tolist()]
    assert [int(p) for p, f in zip(phys, found, strict=True) if f] == [model[h] for h in probe.tolist() if h in model]
    assert table.live == len(model) and table.live + table.gone <= 0.65 * len(table.keys)
