"""The broker's event loop never waits on the timer's or the store's threads: a cancel whose target is not
yet indexed, and GET_BROKER_RUNTIME_INFO while the timer thread holds its lock (in-process broker)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tidalmq.broker.schedule.services as schedule_services
from tests.broker.rawclient import runtime_info, send_cmd
from tidalmq.broker.broker_controller import BrokerController
from tidalmq.broker.config import BrokerConfig
from tidalmq.common import message as mc
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import encode_record
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.transport import RemotingClient
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.message_store import PutRequest, PutStatus

TOPIC = "TimerLoop"
MAX_LAG_S = 0.1  # a loop that waited on a thread would show the whole wait here


@pytest.fixture
def inproc(tmp_path: Path) -> Iterator[tuple[asyncio.AbstractEventLoop, BrokerController]]:
    sc = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=4 * 1024 * 1024,
                            timer_precision_ms=10, timer_process_enable=False)  # the timer thread's lock is held below
    bc = BrokerConfig(broker_name="loop-broker", listen_port=0, namesrv_addr="")  # a free loopback port
    loop = asyncio.new_event_loop()
    broker = BrokerController(bc, sc, host="127.0.0.1")
    loop.run_until_complete(asyncio.wait_for(broker.start(), 30))
    try:
        yield loop, broker
    finally:
        loop.run_until_complete(asyncio.wait_for(broker.stop(), 30))
        loop.close()


async def worst_lag(duration: float) -> float:
    """Run on the loop for ``duration`` s; the longest the loop made a 5 ms timer wait beyond its time."""
    worst, end = 0.0, time.monotonic() + duration
    while time.monotonic() < end:
        t = time.monotonic()
        await asyncio.sleep(0.005)
        worst = max(worst, time.monotonic() - t - 0.005)
    return worst


def timer_record(uniq: str, deliver_ms: int) -> bytearray:
    """A timer message as the send path parks it (what TimerRewrite makes of TIMER_DELIVER_MS)."""
    props = {mc.REAL_TOPIC: TOPIC, mc.REAL_QID: "0", mc.UNIQ_KEY: uniq, mc.TIMER_OUT_MS: str(deliver_ms)}
    return encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"target", properties=props, born_timestamp=1,
                         born_port=1, store_port=10911)


def test_cancel_of_a_target_not_yet_indexed_does_not_block_the_loop(inproc, monkeypatch) -> None:  # noqa: ANN001
    loop, broker = inproc
    # Longer than the test holds dispatch back: the cancel must find its target once indexed, not time out.
    monkeypatch.setattr(schedule_services, "CANCEL_INDEX_WAIT_S", 10.0)
    store = broker.store
    addr = f"127.0.0.1:{broker.server.port}"
    uniq = uuid.uuid4().hex.upper()

    async def scenario() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(addr, send_cmd(TOPIC, b"warm-up"), 5)  # creates the topic
            assert r.code == ResponseCode.SUCCESS
            deliver = int(time.time() * 1000) + 60_000
            assert await broker.scheduled.store_face.wait_reput(store.max_phy_offset, 5)
            await asyncio.sleep(0)  # let the warm-up's queued dispatch callback run before dispatch is held
            # Hold dispatch back (reput thread and loop alike): the target is stored but not indexed.
            store.reput._round.acquire()
            try:
                res = store.put_messages([PutRequest(TIMER_TOPIC, 0, [timer_record(uniq, deliver)])],
                                         dispatch_myself=True)[0]
                assert res.status is PutStatus.PUT_OK
                cancel = asyncio.ensure_future(c.invoke(addr, send_cmd(TOPIC, b"x", props={
                    mc.TIMER_DEL_UNIQKEY: f"{TOPIC}+{uniq}"}), 15))
                lag = await worst_lag(0.4)
                assert not cancel.done(), "the cancel did not wait for its target to be indexed"
                # Meanwhile the loop serves others: another connection's request is answered.
                other = RemotingClient()
                try:
                    info = await asyncio.wait_for(runtime_info(other, addr), 2)
                    assert "commitLogMaxOffset" in info
                finally:
                    await other.close()
            finally:
                store.reput._round.release()
            assert lag < MAX_LAG_S, f"the loop stalled {lag:.3f} s during the cancel's lookup"
            await loop.run_in_executor(None, store.dispatch)
            r = await asyncio.wait_for(cancel, 15)
            assert r.code == ResponseCode.SUCCESS, r.remark  # found pending, the cancel is stored
            r = await c.invoke(addr, send_cmd(TOPIC, b"x", props={mc.TIMER_DEL_UNIQKEY: f"{TOPIC}+{uniq}"}), 15)
            assert r.code == ResponseCode.QUERY_NOT_FOUND and "already cancelled" in (r.remark or "")
        finally:
            await c.close()

    loop.run_until_complete(asyncio.wait_for(scenario(), 60))


def test_runtime_info_answers_while_the_timer_thread_holds_its_lock(inproc) -> None:  # noqa: ANN001
    loop, broker = inproc
    timer = broker.scheduled.timer
    assert timer is not None
    addr = f"127.0.0.1:{broker.server.port}"
    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        # As the timer thread does through a put, an fsync and a sleep.
        with timer._lock:
            held.set()
            release.wait(10)
        done.set()

    async def scenario() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(addr, send_cmd(TOPIC, b"later", props={
                mc.TIMER_DELAY_SEC: "600", mc.UNIQ_KEY: uuid.uuid4().hex.upper()}), 5)
            assert r.code == ResponseCode.SUCCESS
            deadline = time.monotonic() + 10
            while (await runtime_info(c, addr)).get(f"timer.pending.topic.{TOPIC}") != "1":
                assert time.monotonic() < deadline, "the timer never published the pending message"
                await asyncio.sleep(0.05)
            threading.Thread(target=hold, daemon=True).start()
            assert await loop.run_in_executor(None, held.wait, 10)
            t = time.monotonic()
            info = await asyncio.wait_for(runtime_info(c, addr), 5)
            took = time.monotonic() - t
            assert not done.is_set()  # the lock was held all along
            assert took < 1.0, f"runtime info took {took:.2f} s"
            assert info["timer.enabled"] == "true" and info[f"timer.pending.topic.{TOPIC}"] == "1"
            assert int(info["timer.pending"]) >= 1 and "timer.viewAgeMs" in info
        finally:
            release.set()
            await c.close()

    loop.run_until_complete(asyncio.wait_for(scenario(), 60))
