"""The timer service in a process of its own (timerProcessEnable, docs/multicore.md): the channel codec, the
read-only store follower, and the process split end to end — SIGKILL of the child, SIGKILL of the broker, due
messages delivered while a burst of sends runs."""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.broker.rawclient import pull_cmd, runtime_info, send_cmd, wait_max_offset
from tests.schedule.test_timer_broker import batch_cmd, decode_all
from tests.support import Standalone, wait_for
from tidalmq.broker.config import BrokerConfig
from tidalmq.broker.schedule import timer_process
from tidalmq.broker.schedule.child import EarlyChild, child_config, spawn, start_early
from tidalmq.broker.schedule.timer_process import STATE_PAUSE_S, TimerProcess
from tidalmq.client.send_request import busy_backoff
from tidalmq.common import message as mc
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import decode_record, encode_record
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.transport import RemotingClient
from tidalmq.schedule.channel import (
    ChannelError,
    FrameReader,
    Kind,
    decode_json,
    decode_puts,
    decode_records,
    decode_statuses,
    encode_puts,
    encode_records,
    encode_statuses,
    frame,
    json_frame,
)
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.follower import StoreFollower
from tidalmq.store.message_store import AppendResult, DefaultMessageStore, PutRequest, PutStatus, QueueRange

QUEUES = 4
SETTINGS = {"timerPrecisionMs": "10", "mappedFileSizeCommitLog": str(16 * 1024 * 1024)}


# ---------------------------------------------------------------- the channel codec (no sockets)
def test_frames_survive_any_chunking_and_bad_frames_are_refused() -> None:
    reqs = [PutRequest("A", 1, [bytearray(b"r1"), bytearray(b"")]), PutRequest("Bé", 3, [bytearray(b"x" * 70000)])]
    stream = (frame(Kind.PUT, encode_puts(reqs)) + json_frame(Kind.QUERY, {"k": 1})
              + frame(Kind.RECORDS, encode_records([b"ab", memoryview(b"cde")])) + frame(Kind.STOP))
    reader, got = FrameReader(), []
    for i in range(0, len(stream), 7):  # arbitrary cuts, a frame header cut in two included
        got += reader.feed(stream[i : i + 7])
    assert [k for k, _ in got] == [Kind.PUT, Kind.QUERY, Kind.RECORDS, Kind.STOP]
    back = decode_puts(got[0][1])
    assert [(r.topic, r.queue_id, r.records) for r in back] == [(r.topic, r.queue_id, r.records) for r in reqs]
    assert decode_records(got[2][1]) == [b"ab", b"cde"]
    statuses = [PutStatus.PUT_OK, PutStatus.SERVICE_NOT_AVAILABLE]
    assert decode_statuses(encode_statuses(statuses)) == statuses
    with pytest.raises(ChannelError):
        FrameReader().feed(b"\x00\x00\x00\x00\x63")  # unknown kind
    with pytest.raises(ChannelError):
        decode_puts(encode_puts(reqs)[:-1])  # truncated
    with pytest.raises(ChannelError):
        decode_statuses(b"\x63")


# ---------------------------------------------------------------- the follower
class Upstream:
    def put_messages(self, requests: Sequence[PutRequest]) -> list[AppendResult]:
        raise AssertionError("not used here")

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[bytes]:
        return []

    def wait_reput(self, timeout: float) -> bool:
        return True


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    cfg = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1024 * 1024,
                             mapped_file_size_consume_queue=20 * 50)
    s = DefaultMessageStore(cfg)
    assert s.load()
    yield s
    s.shutdown()


def test_follower_reads_only_what_the_broker_published(store: DefaultMessageStore) -> None:
    def rec(i: int) -> bytearray:
        props = {mc.REAL_TOPIC: "T", mc.REAL_QID: "0", mc.UNIQ_KEY: f"U{i}", mc.TIMER_OUT_MS: str(1000 + i)}
        return encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"b%d" % i, properties=props, born_timestamp=1,
                             born_port=1, store_port=10911)

    for i in range(120):  # 120 entries over three 50-entry ConsumeQueue files
        assert store.put_messages([PutRequest(TIMER_TOPIC, 0, [rec(i)])])[0].status == PutStatus.PUT_OK
    assert store.wait_reput(store.max_phy_offset, 10)
    cfg = store.config
    f = StoreFollower(cfg.commit_log_path, cfg.mapped_file_size_commit_log, cfg.consume_queue_path,
                      cfg.mapped_file_size_consume_queue, Upstream())
    try:
        assert not f.has_queue(TIMER_TOPIC, 0) and len(f.read_queue(TIMER_TOPIC, 0, 0, 10)) == 0
        e100 = store.read_queue(TIMER_TOPIC, 0, 100, 1)
        # Published: 100 entries, and the CommitLog up to the end of the 100th record.
        f.publish({(TIMER_TOPIC, 0): QueueRange(0, 100)}, 0, int(e100.commit_log_offsets[0]), True)
        got, off = [], 0
        while True:
            q = f.read_queue(TIMER_TOPIC, 0, off, 32)
            if len(q) == 0:
                break
            assert q.next_offset - q.start == len(q) <= 32 and (q.start // 50) == ((q.next_offset - 1) // 50)
            got += q.rows()
            off = q.next_offset
        assert got == store.read_queue(TIMER_TOPIC, 0, 0, 50).rows() + store.read_queue(TIMER_TOPIC, 0, 50, 50).rows()
        phys, size, tag = got[99]
        m = f.look_message_by_offset(phys, size)
        assert m is not None and m.body == b"b99" and tag == 1099 and m.properties[mc.UNIQ_KEY] == "U99"
        assert f.select_one_message_by_offset(int(e100.commit_log_offsets[0])) is None  # not published
        assert f.queue_offset_at_or_after(TIMER_TOPIC, 0, phys) == 99
        assert f.queue_offset_at_or_after(TIMER_TOPIC, 0, phys + 1) == 100
        f.publish({(TIMER_TOPIC, 0): QueueRange(0, 120)}, 0, store.max_phy_offset, True)
        q = f.read_queue(TIMER_TOPIC, 0, 100, 50)
        assert len(q) == 20
        view = f.select_one_message_by_offset(int(q.commit_log_offsets[-1]))
        assert view is not None and decode_record(view).body == b"b119"
    finally:
        f.close()


# ---------------------------------------------------------------- the split, end to end
async def send_timer(c: RemotingClient, addr: str, topic: str, deliver: list[int], *, batch: int = 1) -> list[str]:
    """Sends timer messages, the i-th due at ``deliver[i]``, on queue i % QUEUES (bodies "deliver:uniq"), one a
    request or, with ``batch`` > 1, that many of a queue in a SEND_BATCH_MESSAGE; returns their UNIQ_KEYs. A send
    answered SYSTEM_BUSY (not stored: it waited longer than waitTimeMillsInSendQueue on a loaded machine) is
    sent again after the client's back-off, as a producer does."""
    sem = asyncio.Semaphore(64 if batch == 1 else QUEUES)  # a batch a queue: none waits long behind the others
    uniqs = [uuid.uuid4().hex.upper() for _ in deliver]

    async def send(q: int, idx: list[int]) -> None:
        items = [(f"{deliver[i]}:{uniqs[i]}".encode(), {"TIMER_DELIVER_MS": str(deliver[i]), "UNIQ_KEY": uniqs[i]})
                 for i in idx]
        cmd = batch_cmd(topic, items, queue_id=q) if batch > 1 else send_cmd(topic, items[0][0], queue_id=q,
                                                                             props=items[0][1])
        deadline = time.monotonic() + 15
        for attempt in itertools.count(1):
            async with sem:
                r = await c.invoke(addr, cmd, 15)
            if r.code != ResponseCode.SYSTEM_BUSY or time.monotonic() > deadline:
                break
            await asyncio.sleep(busy_backoff(attempt))
        assert r.code == ResponseCode.SUCCESS, r.remark

    step = QUEUES * batch
    await asyncio.gather(*(send(q, list(range(start + q, min(start + step, len(deliver)), QUEUES)))
                           for start in range(0, len(deliver), step) for q in range(QUEUES)
                           if start + q < len(deliver)))
    return uniqs


async def delivered(c: RemotingClient, addr: str, topic: str) -> list:
    out = []
    for q in range(QUEUES):
        off = 0
        while True:
            r = await c.invoke(addr, pull_cmd(topic, q, off, max_nums=32), 5)
            if r.code != ResponseCode.SUCCESS:
                break
            msgs = decode_all(r.body_bytes())
            out += msgs
            off += len(msgs)
    return out


def now_ms() -> int:
    return int(time.time() * 1000)


def exited(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (the container's init may not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def child_pid(c: RemotingClient, addr: str, other_than: int = -1, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while True:
        info = await runtime_info(c, addr)
        pid = int(info.get("timer.processPid", "-1"))
        if pid > 0 and pid != other_than:
            return pid
        assert time.monotonic() < deadline, f"no schedule process: {info.get('timer.processPid')}"
        await asyncio.sleep(0.05)


def check_all_once(msgs: list, uniqs: list[str]) -> None:
    got = Counter(m.properties.get("UNIQ_KEY") for m in msgs)
    missing = [u for u in uniqs if u not in got]
    assert not missing, f"{len(missing)} of {len(uniqs)} acknowledged timer messages lost"
    early = [m for m in msgs if m.store_timestamp < int(m.body.split(b":")[0])]
    assert not early, f"{len(early)} delivered early"


def test_sigkill_of_the_child_mid_delivery_loses_nothing(tmp_path: Path) -> None:
    with Standalone(tmp_path / "data", SETTINGS) as s:
        addr = s.broker_addr

        async def scenario() -> None:
            c = RemotingClient()
            try:
                pid = await child_pid(c, addr)
                due = now_ms() + 1500
                # 10 a ms, in batches: sent in a fraction of the 1.5 s even on a loaded machine, so that they are
                # parked before they fall due and the kill comes while they are delivered (sent one a request,
                # 4,000 took up to 3 s on a loaded machine: the last ones were due on arrival, stored at once)
                uniqs = await send_timer(c, addr, "ProcKill", [due + i // 10 for i in range(4000)], batch=100)
                sent = now_ms()
                # Deliveries under way: 100 of them stored, the rest due within 0.4 s. Watched through a queue's
                # max offset, one small request a look (pulling every copy each time, the kill came after the
                # last delivery on a loaded machine).
                await wait_max_offset(c, addr, "ProcKill", 0, 100 // QUEUES, timeout=20)
                os.kill(pid, 9)
                # The broker answers sends while its schedule process is down and restarting.
                r = await c.invoke(addr, send_cmd("ProcPlain", b"meanwhile"), 5)
                assert r.code == ResponseCode.SUCCESS
                new = await child_pid(c, addr, other_than=pid)
                assert exited(pid) and new != pid
                deadline = time.monotonic() + 30
                while len(msgs := await delivered(c, addr, "ProcKill")) < len(uniqs):
                    assert time.monotonic() < deadline, f"{len(msgs)} of {len(uniqs)} delivered after the restart"
                    await asyncio.sleep(0.1)
                check_all_once(msgs, uniqs)
                # The timer's copies (those with TIMER_DEQUEUE_MS) in deliver order, across the kill: the batches in
                # flight at the kill kept their order. A message whose time had passed when it arrived was not
                # parked but stored at once, as RocketMQ does, maybe ahead of earlier ones the timer had not
                # released yet (docs/scheduled-delivery.md, "Order"): outside this order, on time all the same.
                timed = [m for m in msgs if mc.TIMER_DEQUEUE_MS in m.properties]
                unparked = [m for m in msgs if mc.TIMER_DEQUEUE_MS not in m.properties]
                assert all(int(m.body.split(b":")[0]) <= sent for m in unparked), "acknowledged before due, not parked"
                for q in range(QUEUES):
                    deliver = [int(m.body.split(b":")[0]) for m in timed if m.queue_id == q]
                    assert deliver == sorted(deliver), f"queue {q} out of deliver order"
                info = await runtime_info(c, addr)
                assert int(info["timer.processRestarts"]) >= 1
                dups = len(msgs) - len(set(uniqs))
                assert dups <= int(info["timer.redelivered"]), "unreported duplicates"
            finally:
                await c.close()

        asyncio.run(asyncio.wait_for(scenario(), 90))


def test_sigkill_of_the_broker_ends_the_child_and_a_restart_delivers_all(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "data", SETTINGS)
    s.start()
    try:
        async def before() -> tuple[int, list[str]]:
            c = RemotingClient()
            try:
                pid = await child_pid(c, s.broker_addr)
                uniqs = await send_timer(c, s.broker_addr, "ProcBrokerKill", [now_ms() + 1500 + i for i in range(500)])
                return pid, uniqs
            finally:
                await c.close()

        pid, uniqs = asyncio.run(asyncio.wait_for(before(), 60))
        s.kill()
        wait_for(lambda: exited(pid), 10, what="the schedule process to exit with its broker")
        s.start()

        async def after() -> None:
            c = RemotingClient()
            try:
                deadline = time.monotonic() + 30
                while len(msgs := await delivered(c, s.broker_addr, "ProcBrokerKill")) < len(uniqs):
                    assert time.monotonic() < deadline, f"{len(msgs)} of {len(uniqs)} delivered after the restart"
                    await asyncio.sleep(0.1)
                check_all_once(msgs, uniqs)
            finally:
                await c.close()

        asyncio.run(asyncio.wait_for(after(), 60))
    finally:
        s.stop()


def test_due_messages_are_delivered_while_a_send_burst_runs(tmp_path: Path) -> None:
    """Deliveries do not wait for a burst of client sends to end: the first of 200 messages due one second
    into a burst of plain sends arrive in their topic before the burst is over."""
    with Standalone(tmp_path / "data", SETTINGS) as s:
        addr = s.broker_addr

        async def scenario() -> None:
            c = RemotingClient()
            try:
                await child_pid(c, addr)
                due = now_ms() + 1000
                await send_timer(c, addr, "ProcDue", [due] * 200)
                sem = asyncio.Semaphore(128)
                t_end = now_ms() + 4000  # the burst runs at least 3 s past the due time

                async def lane() -> None:
                    while now_ms() < t_end:
                        async with sem:
                            r = await c.invoke(addr, send_cmd("ProcBurst", b"x" * 256), 15)
                        assert r.code == ResponseCode.SUCCESS

                await asyncio.gather(*(lane() for _ in range(64)))
                burst_over = now_ms()
                msgs = await delivered(c, addr, "ProcDue")
                assert msgs, "nothing delivered"
                first = min(m.store_timestamp for m in msgs)
                assert due <= first < burst_over, f"first delivery {first - due} ms after due, burst over at +{burst_over - due}"
            finally:
                await c.close()

        asyncio.run(asyncio.wait_for(scenario(), 60))


# ---------------------------------------------------------------- start-up before the store is loaded
def _timer_store(root: Path) -> tuple[DefaultMessageStore, MessageStoreConfig]:
    cfg = MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1024 * 1024,
                             mapped_file_size_consume_queue=20 * 50, timer_precision_ms=10)
    return DefaultMessageStore(cfg), cfg


@pytest.mark.parametrize("early", [False, True], ids=["prestarted", "started-early"])
def test_prestarted_child_waits_for_the_store_then_delivers(tmp_path: Path, early: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """prestart() starts the schedule process before the broker's store is loaded (its start-up overlaps
    a recovery); it serves nothing and reads nothing until start(), then delivers what fell due. A child
    the command started before it imported the broker (start_early) is the one adopted."""
    store, cfg = _timer_store(tmp_path / "store")
    child = start_early(BrokerConfig(), cfg) if early else None
    spawned: list[socket.socket] = []

    def spawn_and_keep(config: dict[str, Any]) -> tuple[subprocess.Popen[bytes], socket.socket]:
        proc, sock = spawn(config)
        spawned.append(sock)
        return proc, sock

    monkeypatch.setattr(timer_process, "spawn", spawn_and_keep)
    timer = TimerProcess(store, cfg, early=child)
    try:
        timer.prestart()
        pid = wait_for(lambda: timer.pid, 10, what="the schedule process to be started")
        if child is not None:
            assert pid == child.proc.pid
        # The child's first VIEW, pushed once it has loaded its files, waits in the socket unread: loaded,
        # and still not served (it must wait for the store).
        sock = child.sock if child is not None else spawned[0]
        assert select.select([sock], [], [], 20)[0], "the schedule process did not load its files in 20 s"
        assert timer.pid == pid and timer.snapshot(ask_fresh=False)["processReady"] == "false"
        assert store.load()
        due = now_ms() + 300
        props = {mc.REAL_TOPIC: "Pre", mc.REAL_QID: "2", mc.UNIQ_KEY: "U1", mc.TIMER_OUT_MS: str(due)}
        rec = encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"pre", properties=props, born_timestamp=1,
                            born_port=1, store_port=10911)
        assert store.put_messages([PutRequest(TIMER_TOPIC, 0, [rec])])[0].status == PutStatus.PUT_OK
        store.add_arrival_listener(timer.on_arrival)
        store.start()
        timer.start()
        wait_for(lambda: len(store.read_queue("Pre", 2, 0, 1)), 20, what="the delivery")
        view = store.select_one_message_by_offset(int(store.read_queue("Pre", 2, 0, 1).commit_log_offsets[0]))
        assert view is not None
        copy = decode_record(view)
        assert copy.body == b"pre" and copy.store_timestamp >= due
        assert timer.pid == pid  # the same child: it was not restarted
    finally:
        timer.shutdown()
        store.shutdown()


def test_broker_stopped_before_its_store_started_ends_the_prestarted_child(tmp_path: Path) -> None:
    store, cfg = _timer_store(tmp_path / "store")
    timer = TimerProcess(store, cfg)
    timer.prestart()
    pid = wait_for(lambda: timer.pid, 10, what="the schedule process to be started")
    t0 = time.monotonic()
    timer.shutdown()
    assert exited(pid) and time.monotonic() - t0 < 10


def test_child_started_early_with_another_config_is_ended(tmp_path: Path) -> None:
    """A child started early for other settings is not adopted: it is ended and another one started."""
    store, cfg = _timer_store(tmp_path / "store")
    other = child_config(cfg) | {"precisionMs": 1000}
    proc, sock = spawn(other)
    timer = TimerProcess(store, cfg, early=EarlyChild(proc, sock, other))
    try:
        wait_for(lambda: proc.poll() is not None, 10, what="the early child to end")
        timer.prestart()
        pid = wait_for(lambda: timer.pid, 10, what="the schedule process to be started")
        assert pid != proc.pid
    finally:
        timer.shutdown()
        store.shutdown()


def test_broker_stopped_before_prestart_ends_the_early_child(tmp_path: Path) -> None:
    store, cfg = _timer_store(tmp_path / "store")
    child = start_early(BrokerConfig(), cfg)
    assert child is not None
    timer = TimerProcess(store, cfg, early=child)
    timer.shutdown()
    assert exited(child.proc.pid)


def test_no_early_child_where_the_broker_starts_none(tmp_path: Path) -> None:
    _store, cfg = _timer_store(tmp_path / "store")
    assert start_early(BrokerConfig(broker_role="SLAVE", broker_id=1), cfg) is None
    assert start_early(BrokerConfig(enable_controller_mode=True), cfg) is None
    cfg.timer_process_enable = False
    assert start_early(BrokerConfig(), cfg) is None


def test_a_burst_of_arrivals_is_told_to_the_child_in_few_states_the_last_one_current(tmp_path: Path) -> None:
    """Arrivals in the timer topic back to back (a burst of timer sends, the broker dispatching after each
    group commit) reach the schedule process as at most one STATE frame per STATE_PAUSE_S, not one each,
    and the last one names the CommitLog's end and the timer queue after the last arrival: nothing
    written is left untold."""
    store, cfg = _timer_store(tmp_path / "store")
    assert store.load()
    store.start()
    timer = TimerProcess(store, cfg)
    states: list[dict[str, object]] = []
    reader = FrameReader()

    def sent(data: bytes) -> None:
        states.extend(decode_json(payload) for kind, payload in reader.feed(data) if kind == Kind.STATE)

    timer._send = sent  # type: ignore[method-assign]  # the publisher alone, no child
    publisher = threading.Thread(target=timer._publish_loop, daemon=True)
    publisher.start()
    try:
        arrivals = 200
        began = time.monotonic()
        for i in range(arrivals):
            rec = encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"%d" % i, born_timestamp=1, born_port=1,
                                store_port=10911, properties={mc.REAL_TOPIC: "T", mc.REAL_QID: "0",
                                                              mc.TIMER_OUT_MS: str(now_ms() + 60_000)})
            assert store.put_messages([PutRequest(TIMER_TOPIC, 0, [rec])])[0].status == PutStatus.PUT_OK
            store.dispatch()  # as the broker's loop does after a group commit; then the reput tells arrivals
            timer.on_arrival({(TIMER_TOPIC, 0): 1})
            time.sleep(0.0002)  # paced: the publisher gets the interpreter between two arrivals
        told = time.monotonic() - began
        end = store.max_phy_offset
        told_all = [[TIMER_TOPIC, 0, 0, arrivals]]
        # A STATE built between a put and its dispatch names the new end with the queue one short; the next
        # one, a pause later, names both: wait for that one.
        wait_for(lambda: states and states[-1]["maxPhy"] == end and states[-1]["queues"] == told_all, 10,
                 what="a STATE naming the last write and the last arrival")
        assert len(states) <= told / STATE_PAUSE_S + 2, (len(states), told)
    finally:
        timer._stopping.set()
        timer._state_wanted.set()
        publisher.join(10)
        store.shutdown()


def _put_timer_record(store: DefaultMessageStore, i: int) -> None:
    rec = encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"%d" % i, born_timestamp=1, born_port=1,
                        store_port=10911, properties={mc.REAL_TOPIC: "T", mc.REAL_QID: "0",
                                                      mc.TIMER_OUT_MS: str(now_ms() + 60_000)})
    assert store.put_messages([PutRequest(TIMER_TOPIC, 0, [rec])])[0].status == PutStatus.PUT_OK
    store.dispatch()


def test_a_delivery_is_in_its_queue_once_its_put_is_answered_without_the_reput_thread(tmp_path: Path) -> None:
    """The thread that serves the child's PUT dispatches what it stored: the delivered copy is in its
    queue when the request is done, with no reput thread running (it is not on a delivery's path)."""
    store, cfg = _timer_store(tmp_path / "store")
    assert store.load()  # not started: no reput thread
    timer = TimerProcess(store, cfg)
    ours, childs = socket.socketpair()
    timer._sock = ours
    try:
        assert not store.dispatch_running
        recs = [encode_record(topic="Due", queue_id=1, body=b"d%d" % i, properties={}, born_timestamp=1, born_port=1,
                              store_port=10911) for i in range(3)]
        timer._handle(Kind.PUT, encode_puts([PutRequest("Due", 1, recs)]))
        kind, payload = next(iter(FrameReader().feed(childs.recv(1 << 16))))
        assert kind == Kind.PUT_RESULT and decode_statuses(payload) == [PutStatus.PUT_OK]
        got = store.read_queue("Due", 1, 0, 10)
        assert len(got) == 3
        bodies = [decode_record(store.select_one_message_by_offset(int(o))).body  # type: ignore[arg-type]
                  for o in got.commit_log_offsets]
        assert bodies == [b"d0", b"d1", b"d2"]
    finally:
        ours.close()
        childs.close()
        store.shutdown()


def test_a_dispatch_that_fails_after_a_put_neither_ends_the_child_nor_floods_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The put is answered as stored, the serving thread goes on (a request that raises would restart the
    child), one line says what failed, and what was stored is dispatched once dispatching works again."""
    store, cfg = _timer_store(tmp_path / "store")
    assert store.load()
    timer = TimerProcess(store, cfg)
    ours, childs = socket.socketpair()
    timer._sock = ours

    def broken(*, wait: bool = True) -> None:
        raise RuntimeError("dispatch broke")

    try:
        monkeypatch.setattr(store, "dispatch", broken)
        for i in range(3):
            rec = encode_record(topic="Due", queue_id=0, body=b"d%d" % i, properties={}, born_timestamp=1,
                                born_port=1, store_port=10911)
            with caplog.at_level("WARNING", logger="tidalmq.broker.schedule.timer_process"):
                timer._handle(Kind.PUT, encode_puts([PutRequest("Due", 0, [rec])]))
            kind, payload = next(iter(FrameReader().feed(childs.recv(1 << 16))))
            assert kind == Kind.PUT_RESULT and decode_statuses(payload) == [PutStatus.PUT_OK]
        lines = [r.getMessage() for r in caplog.records if "dispatch after a schedule process put" in r.getMessage()]
        assert len(lines) == 1 and "RuntimeError: dispatch broke" in lines[0]
        assert not timer._refusing
        monkeypatch.undo()
        store.dispatch()  # as the reput thread's next round does
        assert len(store.read_queue("Due", 0, 0, 10)) == 3
    finally:
        ours.close()
        childs.close()
        store.shutdown()


def test_arrivals_are_told_to_the_child_from_the_event_loop_in_few_whole_states(tmp_path: Path) -> None:
    """With the broker's event loop attached, arrivals dispatched on the loop and on another thread (the
    reput's) reach the child with no publisher thread running: at most one STATE per STATE_PAUSE_S, the
    last naming the CommitLog's end and the timer queue after the last arrival."""
    store, cfg = _timer_store(tmp_path / "store")
    assert store.load()
    store.start()
    timer = TimerProcess(store, cfg)  # not started: the publisher thread does not run
    ours, childs = socket.socketpair()
    timer._sock = ours
    states: list[dict[str, object]] = []

    def read() -> None:
        reader = FrameReader()
        while data := childs.recv(1 << 16):
            states.extend(decode_json(payload) for kind, payload in reader.feed(data) if kind == Kind.STATE)

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    arrivals = 200

    def dispatched_elsewhere(i: int) -> None:  # as by the reput thread
        _put_timer_record(store, i)
        timer.on_arrival({(TIMER_TOPIC, 0): 1})

    async def burst() -> float:
        timer.attach_loop(asyncio.get_running_loop())
        began = time.monotonic()
        for i in range(arrivals):
            if i % 4:
                _put_timer_record(store, i)
                timer.on_arrival({(TIMER_TOPIC, 0): 1})  # dispatched on the loop
            else:
                await asyncio.to_thread(dispatched_elsewhere, i)
            await asyncio.sleep(0.0002)
        told = time.monotonic() - began
        end = store.max_phy_offset
        deadline = time.monotonic() + 10
        told_all = [[TIMER_TOPIC, 0, 0, arrivals]]
        while not (states and states[-1]["maxPhy"] == end and states[-1]["queues"] == told_all):
            assert time.monotonic() < deadline, "no STATE named the last write and the last arrival"
            await asyncio.sleep(0.01)
        return told

    try:
        told = asyncio.run(burst())
        assert 2 <= len(states) <= told / STATE_PAUSE_S + 2, (len(states), told)
        assert not timer._state_wanted.is_set()  # nothing was left to the publisher thread
    finally:
        ours.close()
        reading.join(10)
        childs.close()
        store.shutdown()


def test_a_child_that_reads_nothing_never_blocks_the_event_loop_and_its_frames_stay_whole(tmp_path: Path) -> None:
    """The loop's STATE never waits for room in the child's socket: when the child stops reading, the
    loop goes on (the publisher thread is asked instead, and completes a frame the loop began first),
    and once the child reads again it gets whole frames, the last one current."""
    store, cfg = _timer_store(tmp_path / "store")
    assert store.load()
    store.start()
    timer = TimerProcess(store, cfg)
    ours, childs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    timer._sock = ours
    # Larger than the socket holds: the loop's send of it stops part way, and the rest must go first.
    filler = frame(Kind.VIEW_WANTED, b"x" * 300_000)

    async def stuck() -> tuple[float, int]:
        timer.attach_loop(asyncio.get_running_loop())
        began = time.monotonic()
        sent = 0
        while timer._send_without_waiting(filler):
            sent += 1
            assert sent < 100, "the socket never filled"
        for i in range(50):  # arrivals while the child reads nothing: each STATE is left to the publisher
            _put_timer_record(store, i)
            timer.on_arrival({(TIMER_TOPIC, 0): 1})
            await asyncio.sleep(STATE_PAUSE_S * 1.5)
        return time.monotonic() - began, sent

    try:
        took, fillers = asyncio.run(stuck())
        assert took < 5, took  # 50 pauses of 3 ms: the loop never waited for the socket
        assert timer._state_wanted.is_set()
        publisher = threading.Thread(target=timer._publish_loop, daemon=True)
        publisher.start()
        reader = FrameReader()
        frames: list[tuple[Kind, bytes]] = []
        end = store.max_phy_offset
        childs.settimeout(10)
        deadline = time.monotonic() + 10
        told_all = [[TIMER_TOPIC, 0, 0, 50]]
        while not any(k == Kind.STATE and (st := decode_json(p))["maxPhy"] == end and st["queues"] == told_all
                      for k, p in frames[-1:]):
            assert time.monotonic() < deadline, f"no whole STATE naming the last write: {[k for k, _ in frames]}"
            frames += reader.feed(childs.recv(1 << 16))  # a torn frame raises ChannelError or stays unread
        assert [k for k, _ in frames[:fillers + 1]] == [Kind.VIEW_WANTED] * (fillers + 1)  # the one begun too
        assert all(p == filler[5:] for _, p in frames[:fillers + 1])
        assert all(k == Kind.STATE for k, _ in frames[fillers + 1:])
    finally:
        timer._stopping.set()
        timer._state_wanted.set()
        ours.close()
        childs.close()
        store.shutdown()
