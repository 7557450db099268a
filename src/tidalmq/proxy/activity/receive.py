"""ReceiveMessage (RocketMQ's proxy ReceiveMessageActivity): a pop of the group's consumer, orderly for
a FIFO group, or of a lite consumer's subscribed lite topics; streamed back as a status, the delivery
time and the messages, each with its receipt handle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
from tidalmq.client.message import MessageExt
from tidalmq.client.pop_consumer import MAX_POP_NUMS, POP_CK, PopConsumer
from tidalmq.common import naming as nm
from tidalmq.proxy import auth, convert
from tidalmq.proxy.access import AccessCheck, client_id
from tidalmq.proxy.consumers import PopConsumers
from tidalmq.proxy.lite import LiteError, LiteSubscription, LiteSubscriptions
from tidalmq.proxy.metadata import ProxyMetadata
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv
from tidalmq.proxy.response import error_status, status

Code = pb.Code
DEFAULT_INVISIBLE_MS = 30_000
# Kept back from a receive's deadline for the answer to reach the client in time.
RECEIVE_MARGIN_S = 1.0


class ReceiveMessageActivity:
    def __init__(self, consumers: PopConsumers, metadata: ProxyMetadata, lite: LiteSubscriptions,
                 access: AccessCheck, max_poll_ms: int) -> None:
        self.consumers = consumers
        self.max_poll_ms = max_poll_ms  # grpcClientConsumerMaxLongPollingTimeoutMillis
        self.metadata = metadata
        self.lite = lite
        self.access = access
        self._lite_rounds = 0

    async def receive_message(self, request: sv.ReceiveMessageRequest, context: grpc.aio.ServicerContext
                              ) -> AsyncIterator[sv.ReceiveMessageResponse]:
        topic = request.message_queue.topic.name
        group = request.group.name
        if (refused := self.access.refusal(context, auth.consume_needs(topic, group))) is not None:
            yield sv.ReceiveMessageResponse(status=refused)
            return
        invisible = (convert.millis(request.invisible_duration) if request.HasField("invisible_duration")
                     else DEFAULT_INVISIBLE_MS)
        poll = convert.millis(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
        poll = min(poll, self.max_poll_ms)
        remaining = context.time_remaining()
        if remaining is not None:  # the answer must reach the client before its deadline
            poll = max(0, min(poll, int((remaining - RECEIVE_MARGIN_S) * 1000)))
        fe = request.filter_expression
        client = client_id(context)
        batch = max(1, min(request.batch_size or MAX_POP_NUMS, MAX_POP_NUMS))
        try:
            if invisible <= 0:
                raise convert.ConvertError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is illegal")
            consumer = await self.consumers.of(group)
            # A lite client, or any receive from a LITE topic: never a plain pop of the parent's queues, which
            # hold every lite topic's messages (a lite client not known as one yet, after a restart, too).
            if client and (self.lite.is_lite_client(client) or self.lite.get(group, client)
                           or await self.metadata.is_lite_topic(topic)):
                msgs = await self._receive_lite(consumer, self.lite.watch(group, client, topic), topic, batch,
                                                invisible / 1000.0, poll / 1000.0)
            else:
                # FIFO group: orderly pop, a queue (hence a message group) lent until its messages are acked
                fifo = await self.metadata.is_fifo(group)
                msgs = await consumer.receive(
                    topic, batch, invisible / 1000.0, expression=fe.expression or "*",
                    expression_type="SQL92" if fe.type == pb.FilterType.SQL else "TAG",
                    block_timeout=poll / 1000.0, order=fifo)
        except Exception as e:
            yield sv.ReceiveMessageResponse(status=error_status(e))
            return
        for out in self._answer_received(msgs, topic):
            yield out

    @staticmethod
    def _answer_received(msgs: list[MessageExt], topic: str) -> list[sv.ReceiveMessageResponse]:
        if not msgs:
            return [sv.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))]
        now = time.time()
        out = [sv.ReceiveMessageResponse(status=status()),
               sv.ReceiveMessageResponse(delivery_timestamp={"seconds": int(now), "nanos": int(now % 1 * 1e9)})]
        for m in msgs:
            # The handle is the pop's extraInfo plus the CommitLog offset (as RocketMQ's ReceiptHandle ends
            # with it): the broker reads the first eight fields, a dead-letter forward the last.
            handle = f"{m.properties[POP_CK]} {m.commit_log_offset}"
            out.append(sv.ReceiveMessageResponse(message=convert.to_grpc(m, topic, handle)))
        return out

    async def _receive_lite(self, consumer: PopConsumer, sub: LiteSubscription, topic: str, batch: int,
                            invisible_s: float, poll_s: float) -> list[MessageExt]:
        """A lite consumer's receive: pops the LMQs of its subscribed lite topics (one after another, the
        first one turning each time) up to ``batch`` messages. When none has any, waits up to ``poll_s``
        for any of them to get one (NOTIFICATION on each) or for the subscription to change."""
        if sub.topic != topic:
            raise LiteError(Code.BAD_REQUEST, f"the client is bound to topic {sub.topic}, not {topic}")
        deadline = time.monotonic() + poll_s
        while True:
            lites = sorted(sub.lite_topics)
            changed = sub.changed
            got: list[MessageExt] = []
            if lites:
                self._lite_rounds += 1
                start = self._lite_rounds % len(lites)
                for lite in lites[start:] + lites[:start]:
                    got.extend(await consumer.receive(nm.lite_queue(topic, lite), batch - len(got), invisible_s,
                                                      route_topic=topic))
                    if len(got) >= batch:
                        break
            left = deadline - time.monotonic()
            if got or left <= 0:
                return got
            waits = [asyncio.ensure_future(consumer.has_message(nm.lite_queue(topic, lite), left, route_topic=topic))
                     for lite in lites]
            waits.append(asyncio.ensure_future(changed.wait()))
            try:
                done, _ = await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            for w in done:
                if not w.cancelled() and (e := w.exception()) is not None:
                    raise e
