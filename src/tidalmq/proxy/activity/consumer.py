"""What a consumer does with a received message, by its receipt handle (RocketMQ's proxy
AckMessageActivity, ChangeInvisibleDurationActivity, ForwardMessageToDLQActivity), and the lite
consumers' SyncLiteSubscription."""

from __future__ import annotations

import grpc
from tidalmq.client import validators
from tidalmq.client.errors import MQBrokerError
from tidalmq.client.instance import ClientInstance
from tidalmq.common import naming as nm
from tidalmq.proxy import auth, convert
from tidalmq.proxy.access import AccessCheck, client_id
from tidalmq.proxy.consumers import PopConsumers
from tidalmq.proxy.lite import LiteError, LiteSubscriptions
from tidalmq.proxy.metadata import ProxyMetadata
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv
from tidalmq.proxy.response import error_status, status, topic_not_found
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.protocol.broker_headers import ConsumerSendMsgBackRequestHeader

Code = pb.Code
# What the broker answers a handle it no longer knows (acked, expired, changed since)
_STALE_HANDLE = (ResponseCode.NO_MESSAGE, ResponseCode.INVALID_PARAMETER)


def queue_of(topic: str, lite_topic: str) -> str:
    """The topic an ack or change of a received message names: a lite topic's is its LMQ."""
    if not lite_topic:
        return topic
    try:
        return nm.lite_queue(topic, lite_topic)
    except nm.NameError_ as e:
        raise convert.ConvertError(Code.ILLEGAL_LITE_TOPIC, str(e)) from None


class AckMessageActivity:
    def __init__(self, consumers: PopConsumers, access: AccessCheck) -> None:
        self.consumers = consumers
        self.access = access

    async def ack_message(self, request: sv.AckMessageRequest, context: grpc.aio.ServicerContext
                          ) -> sv.AckMessageResponse:
        out = sv.AckMessageResponse()
        refused = self.access.refusal(context, auth.consume_needs(request.topic.name, request.group.name))
        if refused is not None:
            out.status.CopyFrom(refused)
            return out
        try:
            consumer = await self.consumers.of(request.group.name)
        except Exception as e:
            out.status.CopyFrom(error_status(e))
            return out
        for entry in request.entries:
            try:
                queue = queue_of(request.topic.name, entry.lite_topic)
                await consumer.ack(convert.handle_message(queue, entry.receipt_handle))
                st = status()
            except MQBrokerError as e:
                st = status(Code.INVALID_RECEIPT_HANDLE, e.remark or "") if e.code in _STALE_HANDLE else error_status(e)
            except Exception as e:
                st = error_status(e)
            out.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)
        codes = {e.status.code for e in out.entries}
        if len(out.entries) == 1:
            out.status.CopyFrom(out.entries[0].status)
        else:
            out.status.CopyFrom(status() if codes <= {Code.OK} else status(Code.MULTIPLE_RESULTS, "multiple results"))
        return out


class ChangeInvisibleDurationActivity:
    def __init__(self, consumers: PopConsumers, access: AccessCheck) -> None:
        self.consumers = consumers
        self.access = access

    async def change_invisible_duration(self, request: sv.ChangeInvisibleDurationRequest,
                                        context: grpc.aio.ServicerContext) -> sv.ChangeInvisibleDurationResponse:
        refused = self.access.refusal(context, auth.consume_needs(request.topic.name, request.group.name))
        if refused is not None:
            return sv.ChangeInvisibleDurationResponse(status=refused)
        invisible = convert.millis(request.invisible_duration)
        try:
            if invisible <= 0:
                raise convert.ConvertError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is illegal")
            msg = convert.handle_message(queue_of(request.topic.name, request.lite_topic), request.receipt_handle)
            cl_offset = request.receipt_handle.rsplit(" ", 1)[-1]
            consumer = await self.consumers.of(request.group.name)
            new = await consumer.change_invisible(msg, invisible / 1000.0)
        except MQBrokerError as e:
            code = Code.INVALID_RECEIPT_HANDLE if e.code in _STALE_HANDLE else convert.grpc_code(e.code, e.remark or "")
            return sv.ChangeInvisibleDurationResponse(status=status(code, e.remark or str(e)))
        except Exception as e:
            return sv.ChangeInvisibleDurationResponse(status=error_status(e))
        return sv.ChangeInvisibleDurationResponse(status=status(), receipt_handle=f"{new} {cl_offset}")


class ForwardMessageToDLQActivity:
    def __init__(self, consumers: PopConsumers, instance: ClientInstance, access: AccessCheck) -> None:
        self.consumers = consumers
        self.instance = instance
        self.access = access

    async def forward_message_to_dead_letter_queue(
            self, request: sv.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> sv.ForwardMessageToDeadLetterQueueResponse:
        """CONSUMER_SEND_MSG_BACK with delay level -1 (straight to %DLQ%group), then the ack of the
        received copy, as RocketMQ's proxy does."""
        refused = self.access.refusal(context, auth.consume_needs(request.topic.name, request.group.name))
        if refused is not None:
            return sv.ForwardMessageToDeadLetterQueueResponse(status=refused)
        try:
            msg = convert.handle_message(queue_of(request.topic.name, request.lite_topic), request.receipt_handle)
            cl_offset = request.receipt_handle.rsplit(" ", 1)[-1]
            if not cl_offset.isdigit() or len(request.receipt_handle.split(" ")) < 9:
                raise convert.ConvertError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle has no CommitLog offset")
            consumer = await self.consumers.of(request.group.name)
            instance = self.instance
            addr = instance.master_addr(msg.broker_name)
            if addr is None:
                await instance.update_route(request.topic.name)
                addr = instance.master_addr(msg.broker_name)
            if addr is None:
                raise convert.ConvertError(Code.NOT_FOUND, f"broker {msg.broker_name} not found")
            await instance.invoke_ok(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ConsumerSendMsgBackRequestHeader(
                offset=int(cl_offset), group=request.group.name, delay_level=-1, origin_msg_id=request.message_id,
                origin_topic=request.topic.name, unit_mode=False, max_reconsume_times=request.max_delivery_attempts))
            await consumer.ack(msg)
        except Exception as e:
            return sv.ForwardMessageToDeadLetterQueueResponse(status=error_status(e))
        return sv.ForwardMessageToDeadLetterQueueResponse(status=status())


class SyncLiteSubscriptionActivity:
    def __init__(self, instance: ClientInstance, metadata: ProxyMetadata, lite: LiteSubscriptions,
                 access: AccessCheck) -> None:
        self.instance = instance
        self.metadata = metadata
        self.lite = lite
        self.access = access

    async def sync_lite_subscription(self, request: sv.SyncLiteSubscriptionRequest,
                                     context: grpc.aio.ServicerContext) -> sv.SyncLiteSubscriptionResponse:
        """The set of lite topics a lite consumer receives (proxy/lite.py), kept by the endpoint per group
        and client. The parent topic must exist."""
        topic, group = request.topic.name, request.group.name
        if (refused := self.access.refusal(context, auth.consume_needs(topic, group))) is not None:
            return sv.SyncLiteSubscriptionResponse(status=refused)
        try:
            validators.check_topic(topic)
            validators.check_group(group)
            route = await self.instance.update_route(topic)
            if route is None or not route.queue_datas:
                return sv.SyncLiteSubscriptionResponse(status=topic_not_found(topic))
            if not await self.metadata.is_lite_topic(topic):
                return sv.SyncLiteSubscriptionResponse(status=status(
                    Code.BAD_REQUEST, f"topic[{topic}] is not a lite topic (message.type=LITE)"))
            self.lite.sync(group, client_id(context), topic, request.action, list(request.lite_topic_set))
        except LiteError as e:
            return sv.SyncLiteSubscriptionResponse(status=status(e.code, str(e)))
        except Exception as e:
            return sv.SyncLiteSubscriptionResponse(status=error_status(e))
        return sv.SyncLiteSubscriptionResponse(status=status())
