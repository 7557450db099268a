"""Pop consumption over remoting against a real ``tidalmq standalone``: pop and ack, redelivery after
the invisible time (through the revive topic and the timer), change of invisible time, the DLQ,
checkpoints across a restart, FIFO pops, long polling, and refused input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from tests.client.helpers import create_topic, uniq
from tests.support import Standalone
from tidalmq.client import Admin, Message, MessageExt, MQBrokerError, PopConsumer, Producer
from tidalmq.client import sync as sync_client
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.timeout(90)


def run(coro_fn: Callable[[], Awaitable[None]], timeout: float = 60) -> None:
    async def go() -> None:
        await asyncio.wait_for(coro_fn(), timeout)

    asyncio.run(go())


async def send(ns: str, topic: str, bodies: list[bytes], **kw: object) -> None:
    async with Producer(uniq("PG"), ns) as p:
        for b in bodies:
            r = await p.send(Message(topic, b, **kw))  # type: ignore[arg-type]
            assert r.ok


async def receive_until(c: PopConsumer, topic: str, n: int, timeout: float, max_nums: int = 32,
                        **kw: object) -> list[MessageExt]:
    """Pop until ``n`` messages came (long polling each time), or fail after ``timeout`` seconds."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(got)} of {n} messages popped in {timeout}s"
        got += await c.receive(topic, max_nums, block_timeout=min(left, 2.0), **kw)  # type: ignore[arg-type]
    return got


def test_pop_then_ack_consumes_once(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopAck")

    async def body() -> None:
        await create_topic(ns, topic, 2)
        await send(ns, topic, [f"m{i}".encode() for i in range(6)], tags="T", keys=["k"])
        async with PopConsumer(uniq("CG"), ns) as c:
            got = await receive_until(c, topic, 6, 15, invisible_time=1.0)
            assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(6)]
            assert all(m.topic == topic and m.tags == "T" and m.properties.get("POP_CK") for m in got)
            assert all(m.reconsume_times == 0 for m in got)
            for m in got:
                await c.ack(m)
            # Acked: nothing comes back after the invisible time (1 s) plus the revive's margin (0.5 s).
            assert await c.receive(topic, 32, invisible_time=1.0, block_timeout=2.5) == []

    run(body)


def test_batch_ack_consumes_once(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopBatchAck")

    async def body() -> None:
        await create_topic(ns, topic, 2)
        await send(ns, topic, [f"b{i}".encode() for i in range(40)])
        async with PopConsumer(uniq("CG"), ns) as c:
            got = await receive_until(c, topic, 40, 15, invisible_time=1.5)
            keep = got[:-1]  # all but one acked in BATCH_ACK_MESSAGE requests
            await c.ack_many(keep)
            back = await receive_until(c, topic, 1, 15, invisible_time=30.0)
            assert [m.body for m in back] == [got[-1].body] and back[0].reconsume_times == 1
            assert await c.receive(topic, 32, invisible_time=1.0, block_timeout=2.5) == []

    run(body)


def test_sync_facade_pops_and_acks(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopSync")
    asyncio.run(create_topic(ns, topic, 1))
    with sync_client.Producer(uniq("PG"), ns) as p:
        p.send(Message(topic, b"blocking"))
    with sync_client.PopConsumer(uniq("CG"), ns) as c:
        [m] = c.receive(topic, 4, 30.0, block_timeout=10.0)
        assert m.body == b"blocking"
        c.ack(m)
        assert c.receive(topic, 4, 30.0) == []


def test_unacked_message_comes_back_with_reconsume_times(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopRevive")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        await send(ns, topic, [b"again", b"acked"])
        group = uniq("CG")
        async with PopConsumer(group, ns) as c:
            first = await receive_until(c, topic, 2, 15, invisible_time=1.0)
            popped_at = time.time()
            await c.ack(next(m for m in first if m.body == b"acked"))
            again = await receive_until(c, topic, 1, 15, invisible_time=1.0)
            assert time.time() - popped_at >= 0.9  # not before its invisible time
            [m] = again
            assert m.body == b"again" and m.reconsume_times == 1
            assert m.topic == topic  # shown under its topic, read from the group's pop retry topic
            assert m.properties["RETRY_TOPIC"] == topic and int(m.properties["1ST_POP_TIME"]) > 0
            await c.ack(m)  # an ack of a retried message (handle of the retry topic) holds too
            assert await c.receive(topic, 32, invisible_time=1.0, block_timeout=3.0) == []

    run(body)


def test_change_invisible_time_postpones(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopChange")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        await send(ns, topic, [b"later"])
        async with PopConsumer(uniq("CG"), ns) as c:
            [m] = await receive_until(c, topic, 1, 15, invisible_time=1.0)
            old = m.properties["POP_CK"]
            start = time.monotonic()
            new = await c.change_invisible(m, 4.0)
            assert new != old
            # Not back at the first invisible time (1 s), only after the new one (4 s).
            [again] = await receive_until(c, topic, 1, 15, invisible_time=5.0)
            assert time.monotonic() - start >= 3.9
            assert again.body == b"later" and again.reconsume_times == 1

    run(body)


def test_change_invisible_then_ack_with_new_handle(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopChangeAck")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        await send(ns, topic, [b"x"])
        async with PopConsumer(uniq("CG"), ns) as c:
            [m] = await receive_until(c, topic, 1, 15, invisible_time=1.0)
            await c.change_invisible(m, 1.5)
            await c.ack(m)  # with the new handle
            assert await c.receive(topic, 32, invisible_time=1.0, block_timeout=3.0) == []

    run(body)


def test_dead_letter_after_max_attempts(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopDlq")
    group = uniq("CG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        async with Admin(ns) as admin:
            await admin.create_group(group, retry_max_times=2)
        await send(ns, topic, [b"poison"])
        async with PopConsumer(group, ns) as c:
            times = []
            for _ in range(3):  # the first delivery and two retries, never acked
                [m] = await receive_until(c, topic, 1, 15, invisible_time=1.0)
                times.append(m.reconsume_times)
            assert times == [0, 1, 2]
            assert await c.receive(topic, 32, invisible_time=1.0, block_timeout=3.0) == []
        async with Admin(ns) as admin:
            deadline = time.monotonic() + 10
            while not (msgs := await admin.dead_letters(group)) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            [d] = msgs
            assert d.body == b"poison" and d.properties["DLQ_ORIGIN_TOPIC"] == topic and d.reconsume_times == 3
            info = await admin.broker_runtime_info(shared_standalone.broker_addr)
            assert int(info["pop.deadLettered"]) >= 1 and int(info["pop.revived"]) >= 2

    run(body)


def test_restart_keeps_checkpoints(standalone: Standalone) -> None:
    ns = standalone.namesrv_addr
    topic = uniq("PopRestart")
    group = uniq("CG")

    async def before() -> None:
        await create_topic(ns, topic, 1)
        await send(ns, topic, [b"survivor"])
        async with PopConsumer(group, ns) as c:
            [m] = await receive_until(c, topic, 1, 15, invisible_time=3.0)
            assert m.body == b"survivor"

    run(before)
    standalone.stop()
    standalone.start()

    async def after() -> None:
        async with PopConsumer(group, ns) as c:
            [m] = await receive_until(c, topic, 1, 20, invisible_time=5.0)
            assert m.body == b"survivor" and m.reconsume_times == 1
            await c.ack(m)
            assert await c.receive(topic, 32, invisible_time=1.0, block_timeout=3.0) == []

    run(after)


def test_fifo_next_of_a_queue_waits_for_the_ack(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopFifo")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        await send(ns, topic, [b"g1", b"g2", b"g3"])
        async with PopConsumer(uniq("CG"), ns) as c:
            [m1] = await receive_until(c, topic, 1, 15, invisible_time=1.5, order=True, max_nums=1)
            assert m1.body == b"g1"
            # g1 not acked: g2 is not popped, by this consumer or another one of the group.
            assert await c.receive(topic, 1, invisible_time=5.0, order=True) == []
            # Its time over, g1 comes again (attempt 2), still before g2.
            [again] = await receive_until(c, topic, 1, 15, invisible_time=5.0, order=True, max_nums=1)
            assert again.body == b"g1" and again.reconsume_times == 1
            await c.ack(again)
            [m2] = await receive_until(c, topic, 1, 15, invisible_time=5.0, order=True, max_nums=1)
            assert m2.body == b"g2" and m2.reconsume_times == 0
            await c.ack(m2)
            [m3] = await receive_until(c, topic, 1, 15, invisible_time=5.0, order=True, max_nums=1)
            assert m3.body == b"g3"

    run(body)


def test_fifo_dead_letter_after_max_attempts_then_the_queue_moves_on(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopFifoDlq")
    group = uniq("CG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        async with Admin(ns) as admin:
            await admin.create_group(group, retry_max_times=1)
        await send(ns, topic, [b"poison", b"next"])
        async with PopConsumer(group, ns) as c:
            attempts = []
            for _ in range(2):  # the first delivery and one retry, never acked
                [m] = await receive_until(c, topic, 1, 15, max_nums=1, invisible_time=1.0, order=True)
                assert m.body == b"poison"
                attempts.append(m.reconsume_times)
            assert attempts == [0, 1]
            [m] = await receive_until(c, topic, 1, 15, max_nums=1, invisible_time=5.0, order=True)
            assert m.body == b"next"
        async with Admin(ns) as admin:
            [d] = await admin.dead_letters(group)
            assert d.body == b"poison" and d.properties["DLQ_ORIGIN_TOPIC"] == topic

    run(body)


def test_long_polling_wakes_on_arrival(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopPoll")

    async def body() -> None:
        await create_topic(ns, topic, 2)
        async with PopConsumer(uniq("CG"), ns) as c:
            assert not await c.has_message(topic)
            waiting = asyncio.ensure_future(c.receive(topic, 32, invisible_time=5.0, block_timeout=20.0))
            notified = asyncio.ensure_future(c.has_message(topic, block_timeout=20.0))
            await asyncio.sleep(0.3)  # let both reach the broker (a late one finds the message at once)
            start = time.monotonic()
            await send(ns, topic, [b"wake"])
            got = await asyncio.wait_for(waiting, 10)
            assert [m.body for m in got] == [b"wake"]
            assert await asyncio.wait_for(notified, 10)
            assert time.monotonic() - start < 5  # woken by the arrival, not by the 20 s poll time

    run(body)


def raw(addr: str, code: int, ext: dict[str, str]) -> RemotingCommand:
    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, RemotingCommand(code=code, ext_fields=ext), 10)
        finally:
            await client.close()

    return asyncio.run(go())


def test_bad_input_refused(shared_standalone: Standalone) -> None:
    addr = shared_standalone.broker_addr
    topic = uniq("PopBad")
    asyncio.run(create_topic(shared_standalone.namesrv_addr, topic, 1))
    pop = {"consumerGroup": "CG", "topic": topic, "queueId": "-1", "maxMsgNums": "4", "invisibleTime": "1000",
           "pollTime": "0", "bornTime": "0", "initMode": "0"}
    # Names are checked where the request enters: a traversal group never reaches the store.
    r = raw(addr, RC.POP_MESSAGE, {**pop, "consumerGroup": "../../etc"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (r.remark or "")
    r = raw(addr, RC.ACK_MESSAGE, {"consumerGroup": "CG", "topic": "../x", "queueId": "0", "extraInfo": "0",
                                   "offset": "0"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in (r.remark or "")
    r = raw(addr, RC.POP_MESSAGE, {k: v for k, v in pop.items() if k != "invisibleTime"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "invisibleTime" in (r.remark or "")
    r = raw(addr, RC.POP_MESSAGE, {**pop, "topic": uniq("NoSuchTopic")})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = raw(addr, RC.POP_MESSAGE, {**pop, "maxMsgNums": "33"})
    assert r.code == ResponseCode.INVALID_PARAMETER
    r = raw(addr, RC.POP_MESSAGE, {**pop, "invisibleTime": "0"})
    assert r.code == ResponseCode.INVALID_PARAMETER
    r = raw(addr, RC.POP_MESSAGE, {**pop, "queueId": "7"})
    assert r.code == ResponseCode.INVALID_PARAMETER
    r = raw(addr, RC.POP_MESSAGE, pop)
    assert r.code == ResponseCode.POLLING_TIMEOUT
    r = raw(addr, RC.ACK_MESSAGE, {"consumerGroup": "CG", "topic": topic, "queueId": "0", "extraInfo": "garbage",
                                   "offset": "0"})
    assert r.code == ResponseCode.INVALID_PARAMETER and "extraInfo" in (r.remark or "")
    # A handle for an offset the queue never had.
    r = raw(addr, RC.ACK_MESSAGE, {"consumerGroup": "CG", "topic": topic, "queueId": "0",
                                   "extraInfo": "0 1 1000 0 0 broker-a 0 5", "offset": "5"})
    assert r.code == ResponseCode.NO_MESSAGE
    r = raw(addr, RC.CHANGE_MESSAGE_INVISIBLETIME, {"consumerGroup": "CG", "topic": topic, "queueId": "0",
                                                    "extraInfo": "0 1 1000 0 9 broker-a 0 0", "offset": "0",
                                                    "invisibleTime": "1000"})
    assert r.code == ResponseCode.INVALID_PARAMETER


def test_consumers_of_a_group_get_disjoint_messages(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("PopShare")

    async def body() -> None:
        await create_topic(ns, topic, 4)
        bodies = [f"s{i}".encode() for i in range(40)]
        await send(ns, topic, bodies)
        group = uniq("CG")
        async with PopConsumer(group, ns) as a, PopConsumer(group, ns) as b:
            got: list[MessageExt] = []
            deadline = time.monotonic() + 15
            while len(got) < len(bodies) and time.monotonic() < deadline:
                ra, rb = await asyncio.gather(a.receive(topic, 8, invisible_time=30.0),
                                              b.receive(topic, 8, invisible_time=30.0))
                got += ra + rb
            assert sorted(m.body for m in got) == sorted(bodies)  # each once, none twice

    run(body)


@pytest.mark.slow
def test_crash_keeps_unacked_messages(standalone: Standalone) -> None:
    """SIGKILL right after a pop: the message still comes back (the pop offset may be older than the
    pop after a crash, so it may come back twice: at least once, never lost)."""
    ns = standalone.namesrv_addr
    topic = uniq("PopCrash")
    group = uniq("CG")

    async def before() -> None:
        await create_topic(ns, topic, 1)
        await send(ns, topic, [b"survivor"])
        async with PopConsumer(group, ns) as c:
            [m] = await receive_until(c, topic, 1, 15, invisible_time=2.0)

    run(before)
    standalone.kill()
    standalone.start()

    async def after() -> None:
        async with PopConsumer(group, ns) as c:
            [m] = await receive_until(c, topic, 1, 20, max_nums=1, invisible_time=30.0)
            assert m.body == b"survivor"

    run(after)


def test_clients_cannot_send_into_the_revive_topic(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr

    async def body() -> None:
        async with Admin(ns) as admin:
            revive = [t for t in await admin.topic_list() if t.startswith("rmq_sys_REVIVE_LOG_")]
        assert revive, "the broker registers its revive topic"
        async with Producer(uniq("PG"), ns) as p:
            with pytest.raises(MQBrokerError) as e:
                await p.send(Message(revive[0], b'{"so":0,"pt":0,"it":1,"q":0,"t":"Secret","c":"G","d":[0]}',
                                     tags="ck"))
            assert e.value.code == ResponseCode.NO_PERMISSION

    run(body)
