"""PushConsumer and ClientInstance against the scripted fake broker: a shutdown() whose cancellation
meets a broker's answer or a NOTIFY_CONSUMER_IDS_CHANGED in the same event-loop iteration.

Python 3.11's ``asyncio.wait_for`` returns the result instead of raising CancelledError when the future
it waits for completes in the loop iteration of the ``cancel()`` (CPython gh-86296). The transport waits
for responses with it, and the rebalance loop waited for its event with it: a shutdown() right after
another consumer of the group left (its NOTIFY starting a rebalance that asks the broker for offsets)
lost the cancellation of the rebalance task and then waited for that task for ever."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from tests.client.fakes import FakeCluster
from tidalmq.client import ConsumeFromWhere, MessageExt, PushConsumer
from tidalmq.client.instance import ClientInstance
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand, encode_frame
from tidalmq.remoting.protocol.broker_headers import QueryConsumerOffsetRequestHeader
from tidalmq.remoting.transport import Connection

pytestmark = pytest.mark.timeout(30)


def run(fn: Callable[[FakeCluster], Awaitable[None]]) -> None:
    async def go() -> None:
        fake = await FakeCluster(["a"], topic_queues=2).start()
        try:
            await asyncio.wait_for(fn(fake), 20)
        finally:
            await fake.stop()

    asyncio.run(go())


class GroupBroker:
    """Broker ``a`` for the push consumers of group CG: the members are ``consumer_ids``; pulls are held
    as by long polling; QUERY_CONSUMER_OFFSET finds nothing, or is held (unanswered) in ``held`` while
    ``hold_offset_queries``."""

    def __init__(self, fake: FakeCluster, consumer_ids: list[str]) -> None:
        self.consumer_ids = consumer_ids
        self.hold_offset_queries = False
        self.held: list[RemotingCommand] = []
        h = fake.handlers["a"]
        h[RC.GET_CONSUMER_LIST_BY_GROUP] = lambda conn, cmd: cmd.make_response(
            ResponseCode.SUCCESS, body=fastjson.dumpb({"consumerIdList": list(self.consumer_ids)}))
        h[RC.PULL_MESSAGE] = lambda conn, cmd: None
        h[RC.UPDATE_CONSUMER_OFFSET] = lambda conn, cmd: cmd.make_response(ResponseCode.SUCCESS)
        h[RC.QUERY_CONSUMER_OFFSET] = self._query_offset

    def _query_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if self.hold_offset_queries:
            self.held.append(cmd)
            return None
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, "no offset")


def consumer(fake: FakeCluster) -> PushConsumer:
    async def on(msgs: list[MessageExt]) -> None:
        return None

    c = PushConsumer("CG", fake.namesrv_addr, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    c.subscribe("T", "*")
    return c


def mine(c: PushConsumer) -> set[int]:
    return {mq.queue_id for mq in c.assigned_queues if mq.topic == "T"}


async def answer_now(inst: ClientInstance, fake: FakeCluster, cmd: RemotingCommand, ext: dict[str, str]) -> None:
    """The client's connection to broker ``a`` receives the answer to ``cmd`` now, as the event loop
    delivers it: the caller's next statements run in the same loop iteration."""
    conn = await inst.remoting.connection(fake.addr("a"))  # the open connection: does not suspend
    conn.data_received(encode_frame(cmd.make_response(ResponseCode.SUCCESS, None, ext)))


def test_invoke_keeps_a_cancel_that_arrives_with_the_response() -> None:
    async def body(fake: FakeCluster) -> None:
        held: list[RemotingCommand] = []
        fake.handlers["a"][RC.QUERY_CONSUMER_OFFSET] = lambda conn, cmd: held.append(cmd)
        inst = ClientInstance(fake.namesrv_addr)
        try:
            task = asyncio.create_task(inst.invoke_ok(fake.addr("a"), RC.QUERY_CONSUMER_OFFSET,
                                                      QueryConsumerOffsetRequestHeader(consumer_group="CG", topic="T", queue_id=0)))
            await fake.wait_for(lambda: held)
            await answer_now(inst, fake, held[0], {"offset": "7"})
            task.cancel()  # in the loop iteration that completed the response
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()
        finally:
            await inst.shutdown()

    run(body)


def test_push_shutdown_while_a_rebalance_waits_for_the_broker() -> None:
    """Another member left: the NOTIFY's rebalance takes its queue and asks the broker for the offset;
    the answer comes in the loop iteration in which shutdown() cancels the rebalance."""

    async def body(fake: FakeCluster) -> None:
        c = consumer(fake)
        broker = GroupBroker(fake, [c.client_id, "zzz@the-other-member"])
        await c.start()
        assert mine(c) == {0}
        broker.hold_offset_queries = True
        broker.consumer_ids.remove("zzz@the-other-member")
        notify = RemotingCommand(code=RC.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": "CG"})
        assert fake.connections["a"][-1].invoke_oneway(notify)
        await fake.wait_for(lambda: broker.held)
        await answer_now(c.instance, fake, broker.held[0], {"offset": "0"})
        async with asyncio.timeout(5):
            await c.shutdown()
        assert mine(c) == {0}  # stopped before taking the other member's queue

    run(body)


def test_push_shutdown_in_the_loop_iteration_of_a_notify() -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED wakes the rebalance loop in the iteration of shutdown()'s cancel."""

    async def body(fake: FakeCluster) -> None:
        c = consumer(fake)
        GroupBroker(fake, [c.client_id])
        await c.start()
        assert mine(c) == {0, 1}
        await asyncio.sleep(0.05)  # the rebalance loop waits for its event
        c.rebalance_soon()  # what the client instance does on NOTIFY_CONSUMER_IDS_CHANGED
        async with asyncio.timeout(5):
            await c.shutdown()

    run(body)
