"""The parts of the PushConsumer (tidalmq.client.push) each alone: the consume services against an
in-memory offset store and a recording send-back, the pull service and the rebalance against the
scripted fake broker of tests/client/fakes.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.client.fakes import FakeCluster
from tidalmq.client import codec
from tidalmq.client.allocate import allocate_averagely
from tidalmq.client.errors import CONNECT_BROKER_EXCEPTION, MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import ConsumeFromWhere, ConsumeResult, MessageExt, MessageModel, MessageQueue
from tidalmq.client.offset_store import NOT_FOUND, OffsetStore, RemoteBrokerOffsetStore
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.push.consume_concurrently import ConsumeConcurrentlyService
from tidalmq.client.push.consume_orderly import ConsumeOrderlyService
from tidalmq.client.push.listener import ListenerRunner
from tidalmq.client.push.pull_service import (
    PULL_DELAY_FLOW_CONTROL,
    PULL_DELAY_NOT_LOCKED,
    FlowControl,
    PullService,
    pull_retry_delay,
)
from tidalmq.client.push.queue_lock import QueueLocker
from tidalmq.client.push.rebalance import RebalancePush
from tidalmq.client.push.send_back import retry_copy
from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.common.record import encode_record
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import Connection

pytestmark = pytest.mark.timeout(30)

MQ = MessageQueue("T", "a", 0)


def msg(offset: int, mq: MessageQueue = MQ, body: bytes = b"x", **props: str) -> MessageExt:
    return MessageExt(topic=mq.topic, body=body, queue_id=mq.queue_id, queue_offset=offset,
                      commit_log_offset=offset * 100, properties=dict(props), broker_name=mq.broker_name)


class Sender:
    """A send-back that records what it was handed, and succeeds while ``ok``."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.sent: list[tuple[int, int]] = []  # (queue offset, reconsume times)

    async def send_message_back(self, m: MessageExt, delay_level: int | None = None) -> bool:
        self.sent.append((m.queue_offset, m.reconsume_times))
        return self.ok


async def until(pred: Callable[[], Any], what: str, timeout: float = 5.0) -> Any:
    async def poll() -> Any:
        while not (v := pred()):
            await asyncio.sleep(0.005)
        return v

    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro(), 20))


class Running:
    """The consumer's state as the services see it: running until ``stop()`` (shutdown)."""

    def __init__(self) -> None:
        self.on = True

    def __call__(self) -> bool:
        return self.on

    def stop(self) -> None:
        self.on = False


# ConsumeConcurrentlyService -------------------------------------------------------------------

class LockWatchedQueue(ProcessQueue):
    """A ProcessQueue that counts how often its lock is looked at."""

    def __init__(self) -> None:
        self.lock_reads = 0
        self._locked = False
        super().__init__()

    @property
    def locked(self) -> bool:
        self.lock_reads += 1
        return self._locked

    @locked.setter
    def locked(self, value: bool) -> None:
        self._locked = value


class CountedFlowControl(FlowControl):
    """FlowControl that counts the rounds in which it held a pull back."""

    held = 0

    def delay(self, pq: ProcessQueue) -> float:
        d = super().delay(pq)
        if d > 0:
            self.held += 1
        return d

def test_concurrent_commits_the_lowest_offset_still_in_flight() -> None:
    async def body() -> None:
        release = {o: asyncio.Event() for o in (10, 11, 12)}
        consumed: list[int] = []

        async def listener(msgs: list[MessageExt]) -> None:
            await release[msgs[0].queue_offset].wait()
            consumed.append(msgs[0].queue_offset)

        store = OffsetStore()
        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=False, name="t"),
                                         sender=Sender(), offset_store=store, workers=3)
        svc.start()
        pq = ProcessQueue()
        pq.put([msg(10), msg(11), msg(12)])
        svc.submit(MQ, pq)
        release[12].set()
        release[11].set()
        await until(lambda: consumed == [12, 11] or consumed == [11, 12], "11 and 12 consumed")
        assert store.read_memory(MQ) == 10  # 10 is still with the listener: committing past it would lose it
        release[10].set()
        await until(lambda: store.read_memory(MQ) == 13, "the offset after the last message")
        assert pq.count == 0
        await svc.shutdown(1.0)

    run(body)


def test_concurrent_failure_is_sent_back_and_the_offset_moves_on() -> None:
    async def body() -> None:
        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            if msgs[0].queue_offset == 1:
                raise RuntimeError("boom")  # an exception counts as RECONSUME_LATER
            return ConsumeResult.SUCCESS

        store, sender, stats = OffsetStore(), Sender(ok=True), {"consumed_ok": 0, "consumed_failed": 0}
        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=True, name="t"),
                                         sender=sender, offset_store=store, workers=1, stats=stats)
        svc.start()
        pq = ProcessQueue()
        pq.put([msg(0), msg(1), msg(2)])
        svc.submit(MQ, pq)
        await until(lambda: store.read_memory(MQ) == 3, "all three done with")
        assert sender.sent == [(1, 0)]
        assert stats == {"consumed_ok": 2, "consumed_failed": 1}
        await svc.shutdown(1.0)

    run(body)


def test_concurrent_message_nobody_took_back_is_consumed_again_here_and_holds_the_offset() -> None:
    async def body() -> None:
        calls: list[tuple[int, int]] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            m = msgs[0]
            calls.append((m.queue_offset, m.reconsume_times))
            return ConsumeResult.RECONSUME_LATER if m.reconsume_times == 0 else ConsumeResult.SUCCESS

        store, sender = OffsetStore(), Sender(ok=False)
        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=True, name="t"),
                                         sender=sender, offset_store=store, workers=1, retry_local_delay=0.2)
        svc.start()
        pq = ProcessQueue()
        pq.put([msg(5)])
        svc.submit(MQ, pq)
        await until(lambda: sender.sent, "the send-back attempt")
        assert store.read_memory(MQ) == NOT_FOUND  # not committed while it waits for its local retry
        await until(lambda: store.read_memory(MQ) == 6, "the local retry succeeding")
        assert calls == [(5, 0), (5, 1)]
        await svc.shutdown(1.0)

    run(body)


def test_concurrent_broadcasting_failure_is_dropped_without_send_back() -> None:
    async def body() -> None:
        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            return ConsumeResult.RECONSUME_LATER

        store, sender = OffsetStore(), Sender()
        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=True, name="t"),
                                         sender=sender, offset_store=store, workers=1,
                                         message_model=MessageModel.BROADCASTING)
        svc.start()
        pq = ProcessQueue()
        pq.put([msg(0)])
        svc.submit(MQ, pq)
        await until(lambda: store.read_memory(MQ) == 1, "the offset past the failed message")
        assert sender.sent == []
        await svc.shutdown(1.0)

    run(body)


def test_concurrent_items_keep_listener_batches_and_every_worker_busy() -> None:
    """A pull's messages go out in work items of several listener batches (docs/client.md, "Performance"):
    the listener still gets at most ``batch_max`` at a time, as many calls run at once as there are
    workers, every message is consumed once and the offset ends after the last one."""

    async def body() -> None:
        gate = asyncio.Event()
        batches: list[list[int]] = []
        in_flight = [0, 0]  # now, most at once

        async def listener(msgs: list[MessageExt]) -> None:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
            await gate.wait()
            batches.append([m.queue_offset for m in msgs])
            in_flight[0] -= 1

        store = OffsetStore()
        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=True, name="t"),
                                         sender=Sender(), offset_store=store, batch_max=3, workers=4)
        svc.start()
        pq = ProcessQueue()
        pq.put([msg(o) for o in range(40)])
        svc.submit(MQ, pq)
        await until(lambda: in_flight[0] == 4, "a listener call in each of the four workers")
        assert store.read_memory(MQ) == NOT_FOUND
        gate.set()
        await until(lambda: store.read_memory(MQ) == 40, "the offset after the last message")
        assert in_flight[1] == 4
        assert all(1 <= len(b) <= 3 for b in batches)
        assert sorted(o for b in batches for o in b) == list(range(40))
        assert pq.count == 0
        await svc.shutdown(1.0)

    run(body)


def test_concurrent_item_stops_at_a_dropped_queue_and_commits_only_what_was_consumed() -> None:
    async def body() -> None:
        started, release = asyncio.Event(), asyncio.Event()
        seen: list[int] = []

        async def listener(msgs: list[MessageExt]) -> None:
            started.set()
            await release.wait()
            seen.extend(m.queue_offset for m in msgs)

        store = OffsetStore()
        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=True, name="t"),
                                         sender=Sender(), offset_store=store, workers=1)
        svc.start()
        pq = ProcessQueue()
        pq.put([msg(o) for o in range(5)])
        svc.submit(MQ, pq)  # one worker: one item of all five
        await asyncio.wait_for(started.wait(), 5)
        pq.dropped = True  # the rebalance gave the queue away
        release.set()
        await until(lambda: seen, "the call in progress finishing")
        await until(lambda: pq.count == 4, "the consumed message removed")
        assert seen == [0]  # the rest of the item is left for the queue's new owner
        assert store.read_memory(MQ) == NOT_FOUND  # a dropped queue's offset is not updated
        await svc.shutdown(1.0)

    run(body)


def test_concurrent_failure_inside_an_item_holds_the_offset_until_its_local_retry() -> None:
    async def body() -> None:
        calls: list[tuple[int, int]] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeResult | None:
            m = msgs[0]
            calls.append((m.queue_offset, m.reconsume_times))
            return ConsumeResult.RECONSUME_LATER if (m.queue_offset, m.reconsume_times) == (1, 0) else None

        store, sender = OffsetStore(), Sender(ok=False)
        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=True, name="t"),
                                         sender=sender, offset_store=store, workers=1, retry_local_delay=0.2)
        svc.start()
        pq = ProcessQueue()
        pq.put([msg(o) for o in range(4)])
        svc.submit(MQ, pq)
        await until(lambda: len(calls) == 4, "the item's four calls")
        await until(lambda: store.read_memory(MQ) == 1, "the offset held at the failed message")
        await until(lambda: store.read_memory(MQ) == 4, "the local retry succeeding")
        assert calls == [(0, 0), (1, 0), (2, 0), (3, 0), (1, 1)]
        assert sender.sent == [(1, 0)]
        await svc.shutdown(1.0)

    run(body)


# ConsumeOrderlyService ------------------------------------------------------------------------
def orderly(listener: Callable[[list[MessageExt]], Any], sender: Sender, store: OffsetStore,
            **kw: Any) -> tuple[ConsumeOrderlyService, Running]:
    running = Running()
    svc = ConsumeOrderlyService("CG", listener=ListenerRunner(listener, thread_max=1, inline=True, name="t"),
                                sender=sender, offset_store=store, running=running, **kw)
    return svc, running


def test_orderly_consumes_a_clustering_queue_only_while_locked() -> None:
    async def body() -> None:
        seen: list[int] = []

        async def listener(msgs: list[MessageExt]) -> None:
            seen.extend(m.queue_offset for m in msgs)

        store = OffsetStore()
        svc, running = orderly(listener, Sender(), store)
        pq = LockWatchedQueue()  # not locked: another member may still be consuming the queue
        svc.start_queue(MQ, pq)
        pq.put([msg(0), msg(1), msg(2)])
        svc.submit(MQ, pq)
        # the service looks at the lock three times: each time it could have consumed, and may not
        await until(lambda: pq.lock_reads >= 3, "three looks at the queue's lock")
        assert seen == [] and store.read_memory(MQ) == NOT_FOUND
        pq.locked = True
        await until(lambda: store.read_memory(MQ) == 3, "the queue consumed once locked")
        assert seen == [0, 1, 2]
        running.stop()
        await svc.shutdown(1.0)

    run(body)


def test_orderly_retries_a_failed_message_in_place_then_sends_it_back() -> None:
    """The failing message blocks its queue (offset order) until max_reconsume_times, then goes to the
    send-back (the DLQ) and the queue moves on."""

    async def body() -> None:
        seen: list[tuple[int, int]] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            m = msgs[0]
            seen.append((m.queue_offset, m.reconsume_times))
            return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT if m.queue_offset == 5 else ConsumeResult.SUCCESS

        store, sender = OffsetStore(), Sender()
        svc, running = orderly(listener, sender, store, max_reconsume_times=2, suspend_time=0.01)
        pq = ProcessQueue()
        pq.locked = True
        svc.start_queue(MQ, pq)
        pq.put([msg(5), msg(6)])
        svc.submit(MQ, pq)
        await until(lambda: store.read_memory(MQ) == 7, "both messages done with")
        assert seen == [(5, 0), (5, 1), (5, 2), (6, 0)]
        assert sender.sent == [(5, 3)]  # handed over with its reconsume count
        running.stop()
        await svc.shutdown(1.0)

    run(body)


def test_orderly_send_back_refused_keeps_the_message_first_in_line() -> None:
    async def body() -> None:
        seen: list[int] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            seen.append(msgs[0].queue_offset)
            return ConsumeResult.RECONSUME_LATER  # orderly: the same as SUSPEND_CURRENT_QUEUE_A_MOMENT

        store, sender = OffsetStore(), Sender(ok=False)
        svc, running = orderly(listener, sender, store, max_reconsume_times=0, suspend_time=0.01)
        pq = ProcessQueue()
        pq.locked = True
        svc.start_queue(MQ, pq)
        pq.put([msg(0), msg(1)])
        svc.submit(MQ, pq)
        await until(lambda: len(sender.sent) >= 3, "three send-back attempts")
        assert set(seen) == {0} and store.read_memory(MQ) == NOT_FOUND
        running.stop()
        await svc.shutdown(1.0)
        assert list(pq.pending)[0].queue_offset == 0  # rolled back in front, to come again

    run(body)


def test_orderly_stop_queue_lets_the_batch_in_progress_finish() -> None:
    async def body() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        async def listener(msgs: list[MessageExt]) -> None:
            started.set()
            await release.wait()

        store = OffsetStore()
        svc, _ = orderly(listener, Sender(), store)
        pq = ProcessQueue()
        pq.locked = True
        svc.start_queue(MQ, pq)
        pq.put([msg(0), msg(1)])
        svc.submit(MQ, pq)
        await asyncio.wait_for(started.wait(), 5)
        pq.dropped = True  # what the rebalance does before stopping the queue
        stopping = asyncio.create_task(svc.stop_queue(MQ))
        await asyncio.sleep(0)
        assert not stopping.done()
        release.set()
        await asyncio.wait_for(stopping, 5)
        assert pq.count == 1  # the batch finished; the next message was not started
        assert store.read_memory(MQ) == NOT_FOUND  # a dropped queue's offset is not updated

    run(body)


# PullService -----------------------------------------------------------------------------------
def test_flow_control_thresholds() -> None:
    flow = FlowControl(max_count=2, max_size=10, max_span=5)
    pq = ProcessQueue()
    pq.put([msg(0), msg(1)])
    assert flow.delay(pq) == 0.0  # at the threshold, not over it
    pq.put([msg(2)])
    assert flow.delay(pq) == PULL_DELAY_FLOW_CONTROL  # count over 2
    big = ProcessQueue()
    big.put([msg(0, body=b"y" * 11)])
    assert flow.delay(big) == PULL_DELAY_FLOW_CONTROL  # bytes over 10
    span = ProcessQueue()
    span.put([msg(0), msg(6)])
    assert flow.delay(span) == PULL_DELAY_FLOW_CONTROL  # offsets 0..6 in flight: span 6 > 5
    orderly_flow = FlowControl(max_count=2, max_size=10, max_span=5, orderly=True)
    assert orderly_flow.delay(span) == PULL_DELAY_NOT_LOCKED  # orderly ignores the span, needs the lock
    span.locked = True
    assert orderly_flow.delay(span) == 0.0


def records(offsets: range) -> bytes:
    return b"".join(bytes(encode_record(topic="T", queue_id=0, body=b"m", properties={mc.TAGS: "A"},
                                        queue_offset=o, physical_offset=o * 100)) for o in offsets)


def test_pull_service_stops_pulling_a_full_queue_until_it_is_consumed() -> None:
    async def body(fake: FakeCluster) -> None:
        def pull(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            start = int(cmd.ext_fields["queueOffset"])
            n = int(cmd.ext_fields["maxMsgNums"])
            return cmd.make_response(ResponseCode.SUCCESS, body=records(range(start, start + n)),
                                     ext_fields={"nextBeginOffset": str(start + n), "minOffset": "0",
                                                 "maxOffset": "1000", "suggestWhichBrokerId": "0"})

        fake.handlers["a"][RC.PULL_MESSAGE] = pull
        inst = ClientInstance(fake.namesrv_addr)
        await inst.update_route("T")
        dispatched: list[int] = []
        store = OffsetStore()
        store.update(MQ, 40)
        flow = CountedFlowControl(max_count=3)
        svc = PullService(inst, "CG", offset_store=store,
                          subscriptions=lambda: {"T": codec.Subscription.build("T", "*", 0)},
                          dispatch=lambda mq, pq: dispatched.append(pq.count), running=lambda: True,
                          flow=flow, pull_batch_size=4)
        pq = ProcessQueue()
        try:
            svc.start(MQ, pq, 40)
            await until(lambda: dispatched, "the first pull")
            # six rounds in which flow control held the pull back: no pull while 4 > 3 messages wait
            await until(lambda: flow.held >= 6, "six flow-control rounds")
            pulls = fake.of_code(RC.PULL_MESSAGE)
            assert len(pulls) == 1 and dispatched == [4]
            head = pulls[0].ext_fields
            assert head["queueOffset"] == "40" and head["maxMsgNums"] == "4" and head["commitOffset"] == "40"
            assert int(head["sysFlag"]) == 0x7  # commit offset + suspend + subscription
            pq.remove(list(pq.msgs.values())[:2])  # consumed: 2 left, under the threshold
            await until(lambda: len(fake.of_code(RC.PULL_MESSAGE)) >= 2, "the pull after consumption")
            assert fake.of_code(RC.PULL_MESSAGE)[1].ext_fields["queueOffset"] == "44"
        finally:
            await svc.stop_all()
            await inst.shutdown()

    run_fake(body)


def test_pull_service_filters_tags_and_follows_offset_moved() -> None:
    async def body(fake: FakeCluster) -> None:
        answers = [(ResponseCode.SUCCESS, records(range(0, 2)), "2"),
                   (ResponseCode.PULL_OFFSET_MOVED, b"", "100")]

        def pull(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
            if not answers:
                return None  # long polling: held
            code, data, nbo = answers.pop(0)
            return cmd.make_response(code, body=data or None, ext_fields={"nextBeginOffset": nbo})

        fake.handlers["a"][RC.PULL_MESSAGE] = pull
        fake.handlers["a"][RC.UPDATE_CONSUMER_OFFSET] = lambda conn, cmd: cmd.make_response(ResponseCode.SUCCESS)
        inst = ClientInstance(fake.namesrv_addr)
        await inst.update_route("T")
        store = RemoteBrokerOffsetStore(inst, "CG")
        dispatched: list[int] = []
        svc = PullService(inst, "CG", offset_store=store,
                          subscriptions=lambda: {"T": codec.Subscription.build("T", "B", 0)},
                          dispatch=lambda mq, pq: dispatched.append(pq.count), running=lambda: True,
                          flow=FlowControl())
        try:
            svc.start(MQ, ProcessQueue(), 0)
            commits = await until(lambda: fake.of_code(RC.UPDATE_CONSUMER_OFFSET), "the moved offset persisted")
            assert commits[0].ext_fields["commitOffset"] == "100"
            await until(lambda: len(fake.of_code(RC.PULL_MESSAGE)) == 3, "the pull from the moved offset")
            assert fake.of_code(RC.PULL_MESSAGE)[2].ext_fields["queueOffset"] == "100"
            assert dispatched == []  # tag A is not the subscribed B
        finally:
            await svc.stop_all()
            await inst.shutdown()

    run_fake(body)


# RebalancePush ---------------------------------------------------------------------------------
def run_fake(fn: Callable[[FakeCluster], Awaitable[None]], queues: int = 4) -> None:
    async def go() -> None:
        fake = await FakeCluster(["a"], topic_queues=queues).start()
        try:
            await asyncio.wait_for(fn(fake), 20)
        finally:
            await fake.stop()

    asyncio.run(go())


class Owner:
    """A QueueOwner recording the calls of the rebalance."""

    def __init__(self) -> None:
        self.started: dict[MessageQueue, int] = {}
        self.stopped: list[MessageQueue] = []
        self.dropped: list[MessageQueue] = []

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self.started[mq] = offset

    async def stop_queue(self, mq: MessageQueue) -> None:
        self.stopped.append(mq)

    def drop_queue(self, mq: MessageQueue) -> None:
        self.dropped.append(mq)


class Group:
    """Broker ``a`` for group CG: its members, the committed offsets (queue id -> offset), the locks."""

    def __init__(self, fake: FakeCluster, members: list[str], offsets: dict[int, int]) -> None:
        self.members = members
        self.offsets = offsets
        self.lockable: set[int] | None = None  # None: the broker has no LOCK_BATCH_MQ
        h = fake.handlers["a"]
        h[RC.GET_CONSUMER_LIST_BY_GROUP] = lambda conn, cmd: cmd.make_response(
            ResponseCode.SUCCESS, body=fastjson.dumpb({"consumerIdList": list(self.members)}))
        h[RC.QUERY_CONSUMER_OFFSET] = self._query
        h[RC.UPDATE_CONSUMER_OFFSET] = self._update
        h[RC.LOCK_BATCH_MQ] = self._lock
        h[RC.UNLOCK_BATCH_MQ] = lambda conn, cmd: cmd.make_response(ResponseCode.SUCCESS)

    def _query(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        qid = int(cmd.ext_fields["queueId"])
        if qid not in self.offsets:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, "no offset")
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(self.offsets[qid])})

    def _update(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.offsets[int(cmd.ext_fields["queueId"])] = int(cmd.ext_fields["commitOffset"])
        return cmd.make_response(ResponseCode.SUCCESS)

    def _lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if self.lockable is None:
            return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "fake")
        mqs = fastjson.loads(cmd.body_bytes())["mqSet"]
        return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(
            {"lockOKMQSet": [m for m in mqs if m["queueId"] in self.lockable]}))


def rebalancer(inst: ClientInstance, owner: Owner, subs: dict[str, codec.Subscription],
               locker: QueueLocker | None = None) -> RebalancePush:
    return RebalancePush(inst, "CG", message_model=MessageModel.CLUSTERING, allocate_strategy=allocate_averagely,
                         consume_from_where=ConsumeFromWhere.FIRST_OFFSET, consume_timestamp=0,
                         offset_store=RemoteBrokerOffsetStore(inst, "CG"), subscriptions=lambda: subs,
                         owner=owner, running=lambda: True, locker=locker)


def test_rebalance_applies_the_allocation_diff() -> None:
    async def body(fake: FakeCluster) -> None:
        inst = ClientInstance(fake.namesrv_addr, instance_name="a-first")
        me = inst.client_id
        group = Group(fake, [me], {0: 7, 2: 9})  # queues 1 and 3 never committed: FIRST_OFFSET
        owner = Owner()
        subs = {"T": codec.Subscription.build("T", "*", 0)}
        rb = rebalancer(inst, owner, subs)
        try:
            await rb.rebalance()
            assert {mq.queue_id: off for mq, off in owner.started.items()} == {0: 7, 1: 0, 2: 9, 3: 0}
            pq2 = rb.process_queues[MessageQueue("T", "a", 2)]
            rb.offset_store.update(MessageQueue("T", "a", 2), 12)  # consumed up to 12 meanwhile

            group.members = sorted([me, "zzz@other"])  # a second member takes the upper half
            await rb.rebalance()
            assert [mq.queue_id for mq in owner.stopped] == [2, 3]
            assert pq2.dropped and sorted(mq.queue_id for mq in rb.process_queues) == [0, 1]
            assert group.offsets[2] == 12  # the consumed offset persisted before the queue went elsewhere
            assert len(owner.started) == 4  # queues kept are not started again

            group.members = []  # no member list (the broker forgot us a moment): keep what we have
            await rb.rebalance()
            assert rb.incomplete and sorted(mq.queue_id for mq in rb.process_queues) == [0, 1]

            subs.clear()  # unsubscribed: every queue of the topic goes
            await rb.rebalance()
            assert rb.process_queues == {} and len(owner.stopped) == 4
        finally:
            await inst.shutdown()

    run_fake(body)


def test_rebalance_reset_offsets_drops_without_committing() -> None:
    async def body(fake: FakeCluster) -> None:
        inst = ClientInstance(fake.namesrv_addr)
        group = Group(fake, [inst.client_id], {0: 3})
        owner = Owner()
        rb = rebalancer(inst, owner, {"T": codec.Subscription.build("T", "*", 0)})
        try:
            await rb.rebalance()
            mq0 = MessageQueue("T", "a", 0)
            pq0 = rb.process_queues[mq0]
            rb.offset_store.update(mq0, 50)
            group.offsets[0] = 1  # the operator rewound the group to 1
            await rb.reset_offsets({mq0: 1})
            assert pq0.dropped and owner.dropped == [mq0] and mq0 not in rb.process_queues
            assert not fake.of_code(RC.UPDATE_CONSUMER_OFFSET)  # 50 was not committed over the rewind
            await rb.rebalance()  # what rebalance_soon() wakes
            assert owner.started[mq0] == 1 and rb.process_queues[mq0] is not pq0
        finally:
            await inst.shutdown()

    run_fake(body)


def test_rebalance_locks_orderly_queues_and_unlocks_lost_ones() -> None:
    async def body(fake: FakeCluster) -> None:
        inst = ClientInstance(fake.namesrv_addr)
        me = inst.client_id
        group = Group(fake, [me], {})
        group.lockable = {0, 1, 2}  # queue 3 is still locked by a member that left
        owner = Owner()
        locker = QueueLocker(inst, "CG")
        rb = rebalancer(inst, owner, {"T": codec.Subscription.build("T", "*", 0)}, locker)
        try:
            await rb.rebalance()
            assert {mq.queue_id: pq.locked for mq, pq in rb.process_queues.items()} == \
                {0: True, 1: True, 2: True, 3: False}
            group.lockable = {0, 1, 2, 3}
            await rb.lock_all()  # the periodic renewal takes over the freed queue
            assert all(pq.locked for pq in rb.process_queues.values())
            group.members = sorted([me, "zzz@other"])
            await rb.rebalance()
            unlocked = fake.of_code(RC.UNLOCK_BATCH_MQ)
            assert len(unlocked) == 2
            assert sorted(m["queueId"] for c in unlocked for m in fastjson.loads(c.body_bytes())["mqSet"]) == [2, 3]
            group.lockable = None  # a broker without LOCK_BATCH_MQ: ordering relies on rebalance alone
            group.members = [me]
            await rb.rebalance()
            assert not locker.supported and all(pq.locked for pq in rb.process_queues.values())
        finally:
            await inst.shutdown()

    run_fake(body)


# send-back --------------------------------------------------------------------------------------
def test_retry_copy_goes_to_the_retry_topic_then_the_dlq() -> None:
    m = msg(3)
    m.properties.update({mc.UNIQ_KEY: "U1", mc.DELAY: "2", mc.PGROUP: "PG", "k": "v"})
    m.reconsume_times = 1
    r = retry_copy(m, "CG", max_times=16, delay_level=0, max_delay_level=18)
    assert r.topic == "%RETRY%CG" and r.body == m.body
    p = r.properties
    assert p[mc.RETRY_TOPIC] == "T" and p[mc.RECONSUME_TIME] == "2" and p[mc.MAX_RECONSUME_TIMES] == "16"
    assert p[mc.DELAY] == "4" and p[mc.ORIGIN_MESSAGE_ID] == "U1" and p[mc.UNIQ_KEY] == "U1" and p["k"] == "v"
    assert mc.PGROUP not in p
    assert retry_copy(m, "CG", max_times=16, delay_level=30, max_delay_level=18).properties[mc.DELAY] == "18"
    m.reconsume_times = 16
    dlq = retry_copy(m, "CG", max_times=16, delay_level=0, max_delay_level=18)
    assert dlq.topic == "%DLQ%CG" and mc.DELAY not in dlq.properties
    assert retry_copy(msg(0), "CG", max_times=16, delay_level=-1, max_delay_level=18).topic == "%DLQ%CG"


def test_pull_retry_delay_reconnects_quickly_and_waits_after_broker_errors() -> None:
    lost = MQClientError(CONNECT_BROKER_EXCEPTION, "connect to 127.0.0.1:1 failed")
    assert [pull_retry_delay(lost, n) for n in range(4)] == [0.1, 0.2, 0.2, 0.2]
    assert pull_retry_delay(lost, 10_000) == 0.2
    assert pull_retry_delay(MQBrokerError(1, "system error", "127.0.0.1:1"), 0) == 3.0
