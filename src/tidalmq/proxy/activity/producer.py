"""SendMessage and RecallMessage (RocketMQ's proxy SendMessageActivity and RecallMessageActivity): a 5.x
message converted to RocketMQ's model and sent through TidalMQ's producer."""

from __future__ import annotations

import grpc
from tidalmq.acl.permission import PUB
from tidalmq.client import validators
from tidalmq.client.message import Message, SendStatus
from tidalmq.client.selector import select_by_hash
from tidalmq.client.transaction_producer import TransactionProducer
from tidalmq.common import message as mc
from tidalmq.common.attribute.topic_message_type import check_message_type, message_type_of, needs_type_check
from tidalmq.proxy import auth, convert
from tidalmq.proxy.access import AccessCheck
from tidalmq.proxy.activity.transaction import ProducerRegistration, transaction_id
from tidalmq.proxy.config import ProxyConfig
from tidalmq.proxy.metadata import ProxyMetadata
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv
from tidalmq.proxy.response import error_status, status

Code = pb.Code
# Half messages sent through the proxy carry this producer group (PGROUP): a 5.x producer has no group.
PROXY_PRODUCER_GROUP = "PROXY_TRANSACTION_PRODUCER"


class SendMessageActivity:
    def __init__(self, config: ProxyConfig, producer: TransactionProducer, metadata: ProxyMetadata,
                 registration: ProducerRegistration, access: AccessCheck) -> None:
        self.config = config
        self.producer = producer
        self.metadata = metadata
        self.registration = registration
        self.access = access

    async def send_message(self, request: sv.SendMessageRequest, context: grpc.aio.ServicerContext
                           ) -> sv.SendMessageResponse:
        if not request.messages:
            return sv.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        needed = {m.topic.name: PUB for m in request.messages}
        if (refused := self.access.refusal(context, needed)) is not None:
            return sv.SendMessageResponse(status=refused)
        entries = [await self._send_one(m) for m in request.messages]
        if len(entries) == 1:
            return sv.SendMessageResponse(status=entries[0].status, entries=entries)
        ok = all(e.status.code == Code.OK for e in entries)
        return sv.SendMessageResponse(status=status() if ok else status(Code.MULTIPLE_RESULTS, "multiple results"),
                                      entries=entries)

    async def _send_one(self, m: pb.Message) -> sv.SendResultEntry:
        try:
            msg = convert.to_remoting(m, self.config.max_message_size)
            kind = m.system_properties.message_type
            transactional = kind == pb.MessageType.TRANSACTION
            if transactional:
                if mc.SHARDING_KEY in msg.properties or mc.TIMER_DELIVER_MS in msg.properties:
                    raise convert.ConvertError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                               "a transactional message has no message group nor delivery time")
                msg.properties[mc.TRAN_MSG] = "true"
                msg.properties[mc.PGROUP] = PROXY_PRODUCER_GROUP
                await self.registration.ensure()
            if self.config.enable_topic_message_type_check:
                await self._check_type(msg)
            group = msg.properties.get(mc.SHARDING_KEY)
            if group is not None:  # FIFO: one message group, one queue (RocketMQ's proxy hashes the group)
                res = await self.producer.send(msg, selector=select_by_hash, arg=group)
            else:
                res = await self.producer.send(msg)
        except Exception as e:
            return sv.SendResultEntry(status=error_status(e))
        if res.status != SendStatus.SEND_OK:
            # stored, but not flushed or replicated as the broker was asked to: RocketMQ's proxy says so
            code = Code.MASTER_PERSISTENCE_TIMEOUT if res.status == SendStatus.FLUSH_DISK_TIMEOUT else Code.HA_NOT_AVAILABLE
            return sv.SendResultEntry(status=status(code, res.status.value), message_id=res.msg_id)
        return sv.SendResultEntry(status=status(), message_id=res.msg_id, offset=res.queue_offset,
                                  transaction_id=transaction_id(res) if transactional else "",
                                  recall_handle=res.recall_handle or "")

    async def _check_type(self, msg: Message) -> None:
        """RocketMQ's proxy with enableTopicMessageTypeCheck (ProducerProcessor): the message's type against
        its topic's message.type, before the send (retry and dead-letter topics unchecked). A topic the
        NameServer does not route is left to the send (TOPIC_NOT_FOUND)."""
        if not needs_type_check(msg.topic, msg.properties):
            return
        topic_type = await self.metadata.routed_topic_type(msg.topic)
        if topic_type is None:
            return
        remark = check_message_type(msg.topic, topic_type, message_type_of(msg.properties))
        if remark is not None:
            raise convert.ConvertError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, remark)


class RecallMessageActivity:
    def __init__(self, producer: TransactionProducer, access: AccessCheck) -> None:
        self.producer = producer
        self.access = access

    async def recall_message(self, request: sv.RecallMessageRequest, context: grpc.aio.ServicerContext
                             ) -> sv.RecallMessageResponse:
        """RECALL_MESSAGE with the handle a delay message's send answered (docs/message-types.md): the
        broker decides (recallMessageEnable, the topic's type, already delivered ...)."""
        topic = request.topic.name
        if (refused := self.access.refusal(context, auth.topic_needs(topic))) is not None:
            return sv.RecallMessageResponse(status=refused)
        try:
            validators.check_topic(topic)
            msg_id = await self.producer.recall(topic, request.recall_handle)
        except Exception as e:
            return sv.RecallMessageResponse(status=error_status(e))
        return sv.RecallMessageResponse(status=status(), message_id=msg_id)
