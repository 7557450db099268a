"""Rescheduling a pending message (RESCHEDULE_MESSAGE; schedule/reschedule.py): earlier, later or now, for
timer messages and delay-level ones, by id or by key, through TidalMQ's Producer and mqadmin. Each message
is delivered once, at its new time, never at the old one: a sentinel due after every old time (same queue;
the timer releases a queue's messages in deliver order) shows nothing else came."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.client.helpers import create_topic
from tests.compat.harness import uniq
from tests.mqadmin.support import run_mqadmin
from tests.support import ModuleTmp, Standalone
from tidalmq.client.admin import Admin
from tidalmq.client.errors import MQBrokerError, MQClientError, ValidationError
from tidalmq.client.message import Message, MessageExt
from tidalmq.client.producer import Producer
from tidalmq.client.pull_consumer import PullConsumer
from tidalmq.remoting.codes import ResponseCode

LEVELS = "1s 3s 6s"
SLACK_MS = 1500  # the services' wake-up on a loaded 2-core machine


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    with Standalone(module_tmp("resched") / "data", {"messageDelayLevel": LEVELS}) as s:
        yield s


def now_ms() -> int:
    return int(time.time() * 1000)


async def receive_until(c: PullConsumer, topic: str, last: bytes, timeout: float = 40.0) -> list[MessageExt]:
    """Every message of the topic's one queue up to and including the one whose body is ``last``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            (mq,) = await c.fetch_queues(topic)
            break
        except MQClientError:  # a broker just restarted registers its topics again within moments
            assert time.monotonic() < deadline, f"no route of {topic} within {timeout}s"
            await asyncio.sleep(0.2)
    got: list[MessageExt] = []
    offset = 0
    while not any(m.body == last for m in got):
        assert time.monotonic() < deadline, f"{[m.body for m in got]} arrived in {timeout}s, not {last!r}"
        r = await c.pull(mq, offset, 32, block_timeout=2.0)
        got += r.messages
        offset = r.next_begin_offset
    return got


def once_each(got: list[MessageExt]) -> dict[bytes, MessageExt]:
    bodies = [m.body for m in got]
    assert len(bodies) == len(set(bodies)), f"delivered twice: {bodies}"
    return {m.body: m for m in got}


def at(m: MessageExt, when: int) -> int:
    """How late ``m`` was stored against ``when``; fails if early."""
    late = m.store_timestamp - when
    assert late >= 0, f"{m.body!r} delivered {-late} ms before {when}"
    assert late < SLACK_MS, f"{m.body!r} delivered {late} ms after {when}"
    return late


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))  # type: ignore[arg-type]


def test_timer_messages_earlier_later_and_now(broker: Standalone) -> None:
    topic = uniq("ReschedTimer")

    async def scenario() -> None:
        await create_topic(broker.namesrv_addr, topic, 1)
        async with Producer(uniq("PID_R"), broker.namesrv_addr) as p, PullConsumer(uniq("CID_R"), broker.namesrv_addr) as c:
            t0 = now_ms()
            early = await p.send(Message(topic, b"earlier", deliver_time_ms=t0 + 6000, keys=["k-earlier"]))
            later = await p.send(Message(topic, b"later", deliver_time_ms=t0 + 2500))
            soon = await p.send(Message(topic, b"now", delay_sec=6))
            r1 = await p.reschedule(topic, early.msg_id, deliver_time_ms=t0 + 1500)
            assert (r1.msg_id, r1.previous_deliver_time_ms, r1.deliver_time_ms) == (early.msg_id, t0 + 6000, t0 + 1500)
            r2 = await p.reschedule(topic, later.msg_id, deliver_time_ms=t0 + 7000)
            asked_now = now_ms()
            r3 = await p.reschedule(topic, soon.msg_id, delay_ms=0)
            assert r3.deliver_time_ms >= asked_now
            await p.send(Message(topic, b"sentinel", deliver_time_ms=t0 + 7500))
            got = once_each(await receive_until(c, topic, b"sentinel"))
            assert set(got) == {b"earlier", b"later", b"now", b"sentinel"}
            at(got[b"earlier"], t0 + 1500)
            at(got[b"later"], r2.deliver_time_ms)  # not at its old time, 2.5 s
            at(got[b"now"], r3.deliver_time_ms)
            m = got[b"earlier"]
            # the same message: its id, keys, topic and queue; what described the move is gone
            assert m.msg_id == early.msg_id and m.properties.get("KEYS") == "k-earlier" and m.queue_id == 0
            assert "RESCHEDULED_FROM" not in m.properties and m.properties["TIMER_DELIVER_MS"] == str(t0 + 1500)

    run(scenario())


def test_delay_level_messages_earlier_later_and_now(broker: Standalone) -> None:
    topic = uniq("ReschedLevel")

    async def scenario() -> None:
        await create_topic(broker.namesrv_addr, topic, 1)
        async with Producer(uniq("PID_R"), broker.namesrv_addr) as p, PullConsumer(uniq("CID_R"), broker.namesrv_addr) as c:
            t0 = now_ms()
            early = await p.send(Message(topic, b"earlier", delay_level=3))  # 6 s
            later = await p.send(Message(topic, b"later", delay_level=2))  # 3 s
            soon = await p.send(Message(topic, b"now", delay_level=3))
            keep = await p.send(Message(topic, b"kept", delay_level=1))  # not moved: its level goes on
            assert keep.ok
            r1 = await p.reschedule(topic, early.msg_id, deliver_time_ms=t0 + 1500)
            assert t0 + 6000 <= r1.previous_deliver_time_ms < t0 + 6000 + SLACK_MS
            r2 = await p.reschedule(topic, later.msg_id, deliver_time_ms=t0 + 7000)
            r3 = await p.reschedule(topic, soon.msg_id, delay_ms=0)
            await p.send(Message(topic, b"sentinel", deliver_time_ms=t0 + 8000))
            got = once_each(await receive_until(c, topic, b"sentinel"))
            assert set(got) == {b"earlier", b"later", b"now", b"kept", b"sentinel"}
            at(got[b"earlier"], t0 + 1500)
            at(got[b"later"], r2.deliver_time_ms)
            at(got[b"now"], r3.deliver_time_ms)
            assert got[b"kept"].store_timestamp - t0 >= 1000
            assert got[b"earlier"].msg_id == early.msg_id and "DELAY" not in got[b"earlier"].properties

    run(scenario())


def test_by_key_twice_then_cancelled_and_the_refusals(broker: Standalone) -> None:
    topic = uniq("ReschedKey")

    async def scenario() -> None:
        await create_topic(broker.namesrv_addr, topic, 1)
        async with Producer(uniq("PID_R"), broker.namesrv_addr) as p, PullConsumer(uniq("CID_R"), broker.namesrv_addr) as c:
            t0 = now_ms()
            one = await p.send(Message(topic, b"one", deliver_time_ms=t0 + 30_000, keys=["order-1"]))
            for body in (b"two", b"three"):
                await p.send(Message(topic, body, deliver_time_ms=t0 + 30_000, keys=["shared"]))
            r = await p.reschedule(topic, key="order-1", deliver_time_ms=t0 + 20_000)
            assert r.msg_id == one.msg_id
            r = await p.reschedule(topic, one.msg_id, deliver_time_ms=t0 + 25_000)  # the copy moved again
            assert r.previous_deliver_time_ms == t0 + 20_000
            async with _admin(broker) as admin:
                await admin.cancel_scheduled(topic, one.msg_id)  # cancels where it waits now

                async def counted() -> int:  # the timer's view is published about once a second
                    for _ in range(100):
                        info = await admin.broker_runtime_info(broker.broker_addr)
                        if int(info.get("timer.reschedules", "0")) >= 2:
                            return int(info.get("timer.reschedulesTooLate", "-1"))
                        await asyncio.sleep(0.1)
                    raise AssertionError(f"timer.reschedules: {info.get('timer.reschedules')}")

                assert await counted() == 0

            async def refused(code: int, text: str, *args: object, **kw: object) -> None:
                with pytest.raises(MQBrokerError) as e:
                    await p.reschedule(topic, *args, **kw)  # type: ignore[arg-type]
                assert e.value.code == code and text in str(e.value.remark), e.value.remark

            await refused(ResponseCode.QUERY_NOT_FOUND, "is cancelled", one.msg_id, delay_ms=0)
            await refused(ResponseCode.QUERY_NOT_FOUND, "no scheduled message", "0" * 32, delay_ms=0)
            await refused(ResponseCode.MESSAGE_ILLEGAL, "names 2 scheduled messages", key="shared", delay_ms=0)
            await refused(ResponseCode.MESSAGE_ILLEGAL, "beyond the max delay", key="order-1", delay_ms=500 * 86_400_000)
            plain = await p.send(Message(topic, b"plain"))
            await refused(ResponseCode.QUERY_NOT_FOUND, "was already delivered", plain.msg_id, delay_ms=0)
            with pytest.raises(ValidationError):
                await p.reschedule(topic, deliver_time_ms=t0)
            with pytest.raises(ValidationError):
                await p.reschedule(topic, one.msg_id)
            got = await receive_until(c, topic, b"plain")
            assert [m.body for m in got] == [b"plain"]

    run(scenario())


def _admin(s: Standalone) -> Admin:
    return Admin(s.namesrv_addr)


def test_mqadmin_reschedule_msg(broker: Standalone) -> None:
    topic = uniq("ReschedTool")
    sent: list[tuple[str, int]] = []

    async def send() -> None:
        await create_topic(broker.namesrv_addr, topic, 1)
        async with Producer(uniq("PID_R"), broker.namesrv_addr) as p:
            t0 = now_ms()
            r = await p.send(Message(topic, b"tool", deliver_time_ms=t0 + 60_000))
            sent.append((r.msg_id, t0))

    run(send())
    (msg_id, t0), = sent
    out = run_mqadmin(broker.namesrv_addr, "rescheduleMsg", "-t", topic, "-i", msg_id, "-s", "0")
    assert out.returncode == 0, out.stderr
    head, _, times = out.stdout.strip().partition(": ")
    assert head.startswith(f"reschedule {topic} {msg_id} on "), out.stdout
    old, new = (int(x) for x in times.split(" -> "))
    assert old == t0 + 60_000 and new <= now_ms()
    again = run_mqadmin(broker.namesrv_addr, "rescheduleMsg", "-t", topic, "-i", msg_id, "-s", "5")
    assert again.returncode == 1 and f"CODE: {ResponseCode.QUERY_NOT_FOUND} " in again.stderr, again.stderr
    bad = run_mqadmin(broker.namesrv_addr, "rescheduleMsg", "-t", topic, "-s", "5")
    assert bad.returncode != 0 and "one of them" in bad.stderr, bad.stderr

    async def arrived() -> None:
        async with PullConsumer(uniq("CID_R"), broker.namesrv_addr) as c:
            (m,) = await receive_until(c, topic, b"tool")
            assert m.msg_id == msg_id and m.store_timestamp - t0 < 60_000 - SLACK_MS

    run(arrived())
