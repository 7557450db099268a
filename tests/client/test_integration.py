"""Our client against a real ``tidalmq standalone``: every send mode, push consumers (clustering,
broadcasting, orderly, retries), the pull consumer's explicit offsets, admin, and shutdown behaviour."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.client.helpers import create_topic, send_sentinels, uniq, wait_until
from tests.support import Standalone
from tidalmq.client import (
    Admin,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendResult,
    select_by_hash,
)
from tidalmq.client import sync as sync_client
from tidalmq.client.message import now_ms

pytestmark = pytest.mark.timeout(60)


def run(coro_fn: Callable[[], Awaitable[None]], timeout: float = 45) -> None:
    async def go() -> None:
        await asyncio.wait_for(coro_fn(), timeout)

    asyncio.run(go())


def test_send_modes_and_fidelity(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("SendModes")

    async def body() -> None:
        await create_topic(ns, topic, 4)
        callback_results: list[tuple[SendResult | None, BaseException | None]] = []
        async with Producer(uniq("PG"), ns) as p:
            sent: dict[str, bytes] = {}
            r = await p.send(Message(topic, b"sync", tags="TagA", keys=["k1", "k2"], properties={"color": "red"}))
            sent[r.msg_id] = b"sync"
            assert r.ok and r.offset_msg_id and r.queue_offset >= 0
            fut = p.send_async(Message(topic, b"async-await", tags="TagB"))
            r = await fut
            sent[r.msg_id] = b"async-await"
            done = asyncio.Event()

            def cb(res: SendResult | None, err: BaseException | None) -> None:
                callback_results.append((res, err))
                done.set()

            p.send_async(Message(topic, b"async-callback"), cb)
            await asyncio.wait_for(done.wait(), 10)
            res, err = callback_results[0]
            assert err is None and res is not None and res.ok
            sent[res.msg_id] = b"async-callback"
            ow = Message(topic, b"oneway")
            await p.send_oneway(ow)
            sent[ow.uniq_key or ""] = b"oneway"
            big = bytes(range(256)) * 40  # 10 KiB: compressed on the wire
            r = await p.send(Message(topic, big))
            sent[r.msg_id] = big
            batch = [Message(topic, f"batch-{i}".encode(), keys=f"bk{i}") for i in range(10)]
            r = await p.send_batch(batch)
            assert len(r.msg_id.split(",")) == 10
            for m in batch:
                sent[m.uniq_key or ""] = m.body
            queues = await p.fetch_publish_queues(topic)
            mq = queues[2]
            r = await p.send(Message(topic, b"explicit"), queue=mq)
            assert r.message_queue == mq
            sent[r.msg_id] = b"explicit"
            key_queue = select_by_hash(queues, Message(topic, b""), "order-7")
            for i in range(5):
                r = await p.send_orderly(Message(topic, f"ordered-{i}".encode()), "order-7")
                assert r.message_queue == key_queue
                sent[r.msg_id] = f"ordered-{i}".encode()
        got: dict[str, MessageExt] = {}
        async with PullConsumer(uniq("PullG"), ns) as pc:
            queues = await pc.fetch_queues(topic)
            deadline = time.monotonic() + 10
            while sum([await pc.max_offset(q) for q in queues]) < len(sent) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # the broker's reput makes what was stored visible to pulls
            for q in queues:
                for ext in await pc.pull_range(q, 0, await pc.max_offset(q)):
                    got[ext.msg_id] = ext
        assert {k: m.body for k, m in got.items()} == sent
        first = next(m for m in got.values() if m.body == b"sync")
        assert first.tags == "TagA" and first.keys == ["k1", "k2"] and first.properties["color"] == "red"
        ordered = sorted((m for m in got.values() if m.body.startswith(b"ordered-")), key=lambda m: m.queue_offset)
        assert [m.body for m in ordered] == [f"ordered-{i}".encode() for i in range(5)]

    run(body)


def test_auto_created_topic_via_default_route(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("AutoT")

    async def body() -> None:
        async with Producer(uniq("PG"), ns) as p:
            r = await p.send(Message(topic, b"first"))
            assert r.ok and r.message_queue.queue_id < 4

    run(body)


def test_push_clustering_two_consumers_share_and_commit(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("Cluster"), uniq("CG")
    n = 200

    async def body() -> None:
        await create_topic(ns, topic, 4)
        seen: dict[str, list[str]] = defaultdict(list)

        def make(name: str) -> Callable[[list[MessageExt]], Any]:
            async def on(msgs: list[MessageExt]) -> ConsumeResult:
                for m in msgs:
                    seen[name].append(m.body.decode())
                return ConsumeResult.SUCCESS
            return on

        c1 = PushConsumer(group, ns, listener=make("c1"), consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                          persist_offset_interval=0.2)
        c1.subscribe(topic, "*")
        await c1.start()
        c2 = PushConsumer(group, ns, listener=make("c2"), consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                          persist_offset_interval=0.2)
        c2.subscribe(topic, "*")
        await c2.start()
        # NOTIFY_CONSUMER_IDS_CHANGED makes both rebalance: they split the 4 queues
        def mine(c: PushConsumer) -> set[MessageQueue]:
            return {q for q in c.assigned_queues if q.topic == topic}

        await wait_until(lambda: len(mine(c1)) == 2 and len(mine(c2)) == 2 and not mine(c1) & mine(c2), 10,
                         "queues split")
        async with Producer(uniq("PG"), ns) as p:
            await asyncio.gather(*(p.send(Message(topic, f"m{i}".encode())) for i in range(n)))
        await wait_until(lambda: len(seen["c1"]) + len(seen["c2"]) >= n, 20, "all consumed")
        assert sorted(seen["c1"] + seen["c2"]) == sorted(f"m{i}" for i in range(n))
        assert seen["c1"] and seen["c2"]
        await c1.shutdown()
        await c2.shutdown()
        async with Admin(ns) as admin:
            assert await admin.total_lag(group, topic) == 0
            progress = await admin.consumer_progress(group, topic)
            assert sum(p.consumer_offset for p in progress) == n

    run(body)


def test_push_tag_filter_and_sync_listener(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("Tags"), uniq("CG")

    async def body() -> None:
        await create_topic(ns, topic, 2)
        got: list[MessageExt] = []

        def on(msgs: list[MessageExt]) -> None:  # a plain function: runs in the consumer's thread pool
            got.extend(msgs)

        c = PushConsumer(group, ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic, "TagA || TagC")
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            for i in range(30):
                await p.send(Message(topic, f"{i}".encode(), tags=["TagA", "TagB", "TagC"][i % 3]))
            sentinels = await send_sentinels(p, topic, tags="TagA")
        await wait_until(lambda: sentinels <= {m.body for m in got}, 15, "the sentinels")
        await c.shutdown()
        tagged = [m for m in got if m.body not in sentinels]
        assert len(tagged) == 20 and {m.tags for m in tagged} == {"TagA", "TagC"}

    run(body)


def test_broadcasting_each_consumer_gets_everything(shared_standalone: Standalone, tmp_path: Any) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("Bcast"), uniq("BG")

    async def body() -> None:
        await create_topic(ns, topic, 3)
        seen: dict[str, list[bytes]] = defaultdict(list)
        consumers = []
        for name in ("a", "b"):
            async def on(msgs: list[MessageExt], name: str = name) -> None:
                seen[name] += [m.body for m in msgs]
            c = PushConsumer(group, ns, listener=on, message_model=MessageModel.BROADCASTING,
                             consume_from_where=ConsumeFromWhere.FIRST_OFFSET, offset_store_dir=str(tmp_path))
            c.subscribe(topic)
            await c.start()
            consumers.append(c)
        assert all(len(c.assigned_queues) == 3 for c in consumers)
        async with Producer(uniq("PG"), ns) as p:
            for i in range(30):
                await p.send(Message(topic, f"b{i}".encode()))
        await wait_until(lambda: len(seen["a"]) >= 30 and len(seen["b"]) >= 30, 15, "both consumers")
        for c in consumers:
            await c.shutdown()
        assert sorted(seen["a"]) == sorted(seen["b"]) == sorted(f"b{i}".encode() for i in range(30))
        assert list(tmp_path.rglob("offsets.json"))  # broadcasting offsets stay on the client

    run(body)


def test_orderly_keeps_per_key_order_and_suspends(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("Order"), uniq("OG")

    async def body() -> None:
        await create_topic(ns, topic, 4)
        seen: dict[str, list[int]] = defaultdict(list)
        suspended = set()

        async def on(msgs: list[MessageExt]) -> ConsumeResult:
            m = msgs[0]
            key, seq = m.keys[0], int(m.body)
            if seq == 3 and key not in suspended:  # the first time: suspend the queue a moment
                suspended.add(key)
                return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
            seen[key].append(seq)
            return ConsumeResult.SUCCESS

        c = PushConsumer(group, ns, listener=on, orderly=True, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         suspend_current_queue_time=0.1)
        c.subscribe(topic)
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            for seq in range(10):
                for key in ("k1", "k2", "k3"):
                    await p.send_orderly(Message(topic, str(seq), keys=key), key)
        await wait_until(lambda: all(len(seen[k]) == 10 for k in ("k1", "k2", "k3")), 20, "ordered consumption")
        await c.shutdown()
        for k in ("k1", "k2", "k3"):
            assert seen[k] == list(range(10)), (k, seen[k])
        assert suspended == {"k1", "k2", "k3"}

    run(body)


def test_reconsume_later_comes_back_through_the_retry_topic(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("Retry"), uniq("RG")

    async def body() -> None:
        await create_topic(ns, topic, 2)
        deliveries: list[MessageExt] = []

        async def on(msgs: list[MessageExt]) -> ConsumeResult:
            deliveries.extend(msgs)
            return ConsumeResult.RECONSUME_LATER if msgs[0].reconsume_times == 0 else ConsumeResult.SUCCESS

        c = PushConsumer(group, ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         delay_level_when_next_consume=1)  # 1 s when the broker schedules retries
        c.subscribe(topic)
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            sent = await p.send(Message(topic, b"retry-me", tags="T1", properties={"p": "1"}))
        await wait_until(lambda: len(deliveries) >= 2, 20, "redelivery")
        await c.shutdown()
        first, second = deliveries[:2]
        assert second.reconsume_times == 1 and second.msg_id == sent.msg_id == first.msg_id
        assert second.topic == topic and second.body == b"retry-me" and second.tags == "T1"
        assert second.properties["p"] == "1"
        assert c.stats["sent_back"] + c.stats["sent_back_fallback"] == 1

    run(body)


def test_pull_consumer_offsets_seek_and_commit(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("Pull"), uniq("PullG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        async with Producer(uniq("PG"), ns) as p:
            for i in range(10):
                await p.send(Message(topic, f"p{i}".encode(), tags="even" if i % 2 == 0 else "odd"))
            await asyncio.sleep(0.02)
            mid = now_ms()
            await asyncio.sleep(0.05)
            for i in range(10, 20):
                await p.send(Message(topic, f"p{i}".encode(), tags="even" if i % 2 == 0 else "odd"))
        async with PullConsumer(group, ns) as pc:
            (mq,) = await pc.fetch_queues(topic)
            assert mq == MessageQueue(topic, mq.broker_name, 0)
            assert await pc.min_offset(mq) == 0 and await pc.max_offset(mq) == 20
            msgs = await pc.pull_range(mq, 5, 12)
            assert [m.body for m in msgs] == [f"p{i}".encode() for i in range(5, 12)]
            assert [m.queue_offset for m in msgs] == list(range(5, 12))
            evens = await pc.pull_range(mq, 0, 20, "even")
            assert [m.body for m in evens] == [f"p{i}".encode() for i in range(0, 20, 2)]
            assert await pc.search_offset(mq, mid) in (9, 10)  # the broker's answer is the nearest message
            assert await pc.seek_by_timestamp(mq, mid) == 10
            assert await pc.seek_by_timestamp(mq, 0) == 0 and await pc.seek_by_timestamp(mq, now_ms() + 10**6) == 20
            r = await pc.pull(mq, 20)
            assert r.status == PullStatus.NO_NEW_MSG and r.next_begin_offset == 20
            r = await pc.pull(mq, 500)
            assert r.status == PullStatus.OFFSET_ILLEGAL
            assert await pc.committed(mq) in (None, 0)
            await pc.commit(mq, 12)
            assert await pc.committed(mq) == 12
        async with Admin(ns) as admin:
            (prog,) = await admin.consumer_progress(group, topic)
            assert prog.consumer_offset == 12 and prog.lag == 8

    run(body)


def test_admin_groups_offsets_and_messages(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("AdminT"), uniq("AG")

    async def body() -> None:
        await create_topic(ns, topic, 2)
        async with Producer(uniq("PG"), ns) as p:
            r = await p.send(Message(topic, b"findme", keys="order-1"))
            for i in range(5):
                await p.send(Message(topic, f"x{i}".encode()))
        async with Admin(ns) as admin:
            assert topic in await admin.topic_list()
            assert all(cfg["topicName"] == topic for cfg in (await admin.topic_config(topic)).values())
            await admin.create_group(group, retry_max_times=3)
            assert (await admin.group_list())[group]["retryMaxTimes"] == 3
            found = await admin.query_messages_by_key(topic, "order-1")
            assert [m.body for m in found] == [b"findme"]
            by_offset_id = await admin.view_message(r.offset_msg_id)
            assert by_offset_id.body == b"findme"
            by_uniq = await admin.view_message(r.msg_id, topic=topic)
            assert by_uniq.body == b"findme"
            moved = await admin.reset_offset_by_time(group, topic, 0)
            assert set(moved.values()) == {0}
            assert await admin.total_lag(group, topic) == 6
            mq = MessageQueue(topic, r.message_queue.broker_name, r.message_queue.queue_id)
            await admin.update_offset(group, mq, 1)
            assert await admin.query_offset(group, mq) == 1
            await admin.delete_group(group)
            assert group not in await admin.group_list()

    run(body)


def test_graceful_shutdown_finishes_in_flight_and_commits(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic, group = uniq("Graceful"), uniq("GG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        started, finished = asyncio.Event(), []
        release = asyncio.Event()

        async def slow(msgs: list[MessageExt]) -> None:
            started.set()
            await release.wait()
            finished.extend(msgs)

        c = PushConsumer(group, ns, listener=slow, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         consume_thread_max=1, persist_offset_interval=60)
        c.subscribe(topic)
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            await p.send(Message(topic, b"slow-one"))
        await asyncio.wait_for(started.wait(), 10)
        stop = asyncio.create_task(c.shutdown())
        await asyncio.sleep(0.1)
        assert not stop.done()  # waiting for the listener
        release.set()
        await asyncio.wait_for(stop, 10)
        assert [m.body for m in finished] == [b"slow-one"]
        async with Admin(ns) as admin:  # committed on shutdown, not only by the 60 s timer
            assert await admin.total_lag(group, topic) == 0
            assert not await admin.consumer_connections(group)  # UNREGISTER_CLIENT

    run(body)


def test_consume_from_timestamp_and_last(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("FromWhere")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        async with Producer(uniq("PG"), ns) as p:
            for i in range(5):
                await p.send(Message(topic, f"old{i}".encode()))
            await asyncio.sleep(0.05)
            mid = now_ms()
            await asyncio.sleep(0.05)
            for i in range(3):
                await p.send(Message(topic, f"new{i}".encode()))
            got: list[bytes] = []

            async def on(msgs: list[MessageExt]) -> None:
                got.extend(m.body for m in msgs)

            c = PushConsumer(uniq("TG"), ns, listener=on, consume_from_where=ConsumeFromWhere.TIMESTAMP,
                             consume_timestamp=mid)
            c.subscribe(topic)
            await c.start()
            await wait_until(lambda: b"new2" in got, 10, "messages after the timestamp")
            await c.shutdown()
            # RocketMQ's broker answers a group without an offset with 0 while the queue still holds its
            # first message, so a young queue is read from the start whatever consume_from_where says
            assert got[-3:] == [b"new0", b"new1", b"new2"] and got[0] in (b"old0", b"new0")
            # LAST_OFFSET on a queue that has lost nothing starts at 0 (the broker's rule for young queues)
            last: list[bytes] = []

            async def on_last(msgs: list[MessageExt]) -> None:
                last.extend(m.body for m in msgs)

            c2 = PushConsumer(uniq("LG"), ns, listener=on_last)
            c2.subscribe(topic)
            await c2.start()
            await p.send(Message(topic, b"latest"))
            await wait_until(lambda: b"latest" in last, 10, "the latest message")
            await c2.shutdown()

    run(body)


def test_sync_facade(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("SyncT")
    asyncio.run(create_topic(ns, topic, 2))
    with sync_client.Producer(uniq("PG"), ns) as p:
        r = p.send(Message(topic, b"from-a-thread"))
        assert r.ok
        f = p.send_async(Message(topic, b"async-from-thread"))
        assert f.result(10).ok
    with sync_client.PullConsumer(uniq("SG"), ns) as pc:
        bodies = sorted(m.body for q in pc.fetch_queues(topic) for m in pc.pull_range(q, 0, pc.max_offset(q)))
    assert bodies == [b"async-from-thread", b"from-a-thread"]
    with sync_client.Admin(ns) as admin:
        assert topic in admin.topic_list()


def test_delay_level_is_delivered_late(shared_standalone: Standalone) -> None:
    _delivery_delay(shared_standalone, lambda topic: Message(topic, b"delayed", delay_level=2), 5.0)


def test_deliver_time_is_delivered_late(shared_standalone: Standalone) -> None:
    _delivery_delay(shared_standalone, lambda topic: Message(topic, b"timed", deliver_time_ms=now_ms() + 3000), 3.0)


def _delivery_delay(s: Standalone, make: Callable[[str], Message], delay: float) -> None:
    ns = s.namesrv_addr
    topic = uniq("Delay")
    result: dict[str, float] = {}

    async def body() -> None:
        await create_topic(ns, topic, 1)
        got: list[float] = []

        async def on(msgs: list[MessageExt]) -> None:
            got.append(time.monotonic())

        c = PushConsumer(uniq("DG"), ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            t0 = time.monotonic()
            await p.send(make(topic))
        await wait_until(lambda: got, delay + 10, "the delayed message")
        await c.shutdown()
        result["after"] = got[0] - t0

    run(body)
    assert result["after"] >= delay - 0.05, f"delivered after {result['after']:.2f}s, before its {delay}s"
    assert result["after"] < delay + 5


def test_cancel_scheduled_message_end_to_end(shared_standalone: Standalone) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("Cancel")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        got: list[bytes] = []

        async def on(msgs: list[MessageExt]) -> None:
            got.extend(m.body for m in msgs)

        c = PushConsumer(uniq("XG"), ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            at = now_ms() + 2000
            doomed = await p.send(Message(topic, b"cancelled", deliver_time_ms=at))
            await p.send(Message(topic, b"kept", deliver_time_ms=at))
            await p.cancel_scheduled(doomed)
            # due a second after the others: delivered once the timer has passed their time
            await p.send(Message(topic, b"sentinel", deliver_time_ms=at + 1000))
        await wait_until(lambda: b"sentinel" in got, 15, "the sentinel")
        await c.shutdown()
        assert got == [b"kept", b"sentinel"]
        assert time.time() * 1000 >= at

    run(body)


def test_transaction_end_to_end(shared_standalone: Standalone) -> None:
    from tidalmq.client import TransactionProducer, TransactionState

    ns = shared_standalone.namesrv_addr
    topic = uniq("Tx")

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionState:
            return TransactionState(arg)

        def check_local_transaction(self, msg: MessageExt) -> TransactionState:
            return TransactionState.COMMIT

    async def body() -> None:
        await create_topic(ns, topic, 1)
        got: list[bytes] = []

        async def on(msgs: list[MessageExt]) -> None:
            got.extend(m.body for m in msgs)

        c = PushConsumer(uniq("TxG"), ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        async with TransactionProducer(uniq("TPG"), Listener(), ns) as p:
            await p.send_in_transaction(Message(topic, b"rolled-back"), TransactionState.ROLLBACK)
            await p.send_in_transaction(Message(topic, b"committed"), TransactionState.COMMIT)
        async with Producer(uniq("PG"), ns) as plain:
            sentinels = await send_sentinels(plain, topic)
        await wait_until(lambda: sentinels <= set(got), 15, "the sentinel")
        await c.shutdown()
        assert [b for b in got if b not in sentinels] == [b"committed"]

    run(body)


def test_push_consumer_is_back_within_a_second_of_a_broker_restart(tmp_path: Any) -> None:
    """A pull that cannot reach its broker is retried after 0.1 s, then every 0.2 s (not RocketMQ's flat
    3 s), and the connect backoff is as short, so a message sent right after a SIGKILL and restart reaches
    the consumer within a second."""
    sa = Standalone(tmp_path / "data").start()
    try:
        ns = sa.namesrv_addr
        topic, group = uniq("Restart"), uniq("CG")
        got: list[tuple[str, float]] = []

        async def on(msgs: list[MessageExt]) -> ConsumeResult:
            got.extend((m.body.decode(), time.monotonic()) for m in msgs)
            return ConsumeResult.SUCCESS

        async def body() -> None:
            await create_topic(ns, topic, 1)
            c = PushConsumer(group, ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
            c.subscribe(topic, "*")
            await c.start()
            try:
                async with Producer(uniq("PG"), ns) as p:
                    await p.send(Message(topic, b"before"))
                await wait_until(lambda: got, 10, "the first message")
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, sa.kill)
                await loop.run_in_executor(None, sa.start)
                ready = time.monotonic()
                async with Producer(uniq("PG"), ns) as p:
                    await p.send(Message(topic, b"after"))
                await wait_until(lambda: any(b == "after" for b, _ in got), 10, "the message sent after the restart")
                at = next(t for b, t in got if b == "after")
                assert at - ready < 1.0, f"consumed {at - ready:.2f} s after the broker was back"
            finally:
                await c.shutdown()

        run(body)
    finally:
        sa.kill()
