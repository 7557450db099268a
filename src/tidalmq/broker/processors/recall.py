"""RECALL_MESSAGE (RocketMQ 5.3's RecallMessageProcessor): take back a scheduled message before it is due.

A send of a timer message is answered with a recall handle (``recallHandle`` in the send response
header, ``attach_recall_handle``); RECALL_MESSAGE with that handle files the timer's own cancel
(TIMER_DEL_UNIQKEY, broker/schedule/hooks.py TimerRewrite), so the message is never delivered. The gRPC
endpoint calls ``RecallMessageProcessor.recall`` directly (docs/message-types.md).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidalmq.broker.message import InnerMessage
from tidalmq.broker.topic.topic_config import PERM_WRITE
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.attribute.topic_message_type import TopicMessageType, check_message_type
from tidalmq.common.msgid import host_bytes
from tidalmq.common.recall_handle import (
    RecallHandle,
    RecallHandleError,
    decode_recall_handle,
    encode_recall_handle,
)
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import ExtFieldsTemplate, RemotingCommand
from tidalmq.remoting.protocol.broker_headers import (
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
    SendMessageResponseHeader,
)
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    from collections.abc import Callable

    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.processors.collaborators import InternalSender
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.config import MessageStoreConfig

RECALL_HANDLE = SendMessageResponseHeader.key_of("recall_handle")
# Every single timer send's answer carries one: encoded from the handle's ASCII bytes, no text round trip.
_RECALL_HANDLE_FIELD = ExtFieldsTemplate((RECALL_HANDLE,))
_SEND_BATCH, _SUCCESS = int(RequestCode.SEND_BATCH_MESSAGE), int(ResponseCode.SUCCESS)  # compared on every timer send
RECALL_MESSAGE_TAG = "_RECALL_TAG_"
_UNAVAILABLE = "recall failed, broker service not available"


def attach_recall_handle(broker_name: str, req: RemotingCommand, msg: InnerMessage,
                         reply: Callable[[RemotingCommand], object]) -> Callable[[RemotingCommand], object]:
    """SendMessageProcessor.attachRecallHandle: ``reply`` adding the recall handle to a successful send's
    response when ``msg`` turned out (after the rewrites, which run later) to be parked in the timer topic.
    Not for batches, cancels, retry topics nor messages without a uniq key. ``reply`` itself for most sends."""
    if req.code == _SEND_BATCH or "TIMER_" not in msg.properties_text:
        return reply

    def with_handle(resp: RemotingCommand) -> object:
        if resp.code == _SUCCESS and msg.topic == nm.TIMER_TOPIC:
            handle = _recall_handle_of(msg, broker_name)
            if handle is not None:
                if resp.ext_encoded and not resp.ext_fields:  # the send's header, encoded already: one more field
                    resp.ext_encoded += _RECALL_HANDLE_FIELD.encode_bytes(handle)
                else:
                    resp.ext_fields[RECALL_HANDLE] = handle.decode("ascii")
        return reply(resp)

    return with_handle


def _recall_handle_of(msg: InnerMessage, broker_name: str) -> bytes | None:
    """The recall handle of ``msg`` as parked in the timer topic, or None where it gets none."""
    parked = msg.timer_parked
    real_topic: str | None
    out_ms: str | None
    if parked is not None and parked[0] is msg.properties_text and not msg.is_parsed:
        # the timer rewrite's fast path wrote these properties: one timer request, no cancel
        _, real_topic, out_ms = parked
    else:
        if msg.has_property(mc.TIMER_DEL_UNIQKEY):
            return None
        out_ms = msg.get_property(mc.TIMER_OUT_MS)
        real_topic = msg.get_property(mc.REAL_TOPIC)
        if not out_ms or not real_topic:
            return None
    uniq = msg.get_property(mc.UNIQ_KEY)
    if not uniq or real_topic.startswith(nm.RETRY_GROUP_TOPIC_PREFIX):
        return None
    return encode_recall_handle(real_topic, broker_name, out_ms, uniq)


@dataclass(frozen=True, slots=True)
class RecallOutcome:
    """RECALL_MESSAGE's answer: ``code`` SUCCESS with ``msg_id`` (the recalled message's uniq key), or a
    RocketMQ response code and its remark."""

    code: int
    remark: str | None = None
    msg_id: str = ""


class RecallMessageProcessor:
    def __init__(self, *, config: BrokerConfig, store_config: MessageStoreConfig, topics: TopicConfigManager,
                 sender: InternalSender) -> None:
        self.config, self.store_config, self.topics, self.sender = config, store_config, topics, sender

    def process(self, conn: Connection, req: RemotingCommand,
                h: RecallMessageRequestHeader) -> asyncio.Future[RemotingCommand]:
        host = conn.attributes.get("born_host") or host_bytes(conn.remote[0])

        async def answer() -> RemotingCommand:
            out = await self.recall(h.topic, h.recall_handle, h.producer_group, host, conn.remote[1])
            ext = RecallMessageResponseHeader(msg_id=out.msg_id if out.code == ResponseCode.SUCCESS else None,
                                              msg_region="DefaultRegion").to_ext()
            return req.make_response(out.code, out.remark, ext)

        return asyncio.ensure_future(answer())

    def _refusal(self, topic: str, handle_text: str) -> RecallOutcome | RecallHandle:
        """RocketMQ's checks, in its order: the decoded handle, or why the recall is refused."""
        c = self.config
        if not c.recall_message_enable:
            return RecallOutcome(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        if c.is_slave:
            return RecallOutcome(ResponseCode.SLAVE_NOT_AVAILABLE, _UNAVAILABLE)
        if not (c.broker_permission & PERM_WRITE) and not c.allow_recall_when_broker_not_writeable:
            return RecallOutcome(ResponseCode.SERVICE_NOT_AVAILABLE, _UNAVAILABLE)
        tc = self.topics.get(topic)
        if tc is None:
            return RecallOutcome(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
        if c.enable_topic_message_type_check:  # RocketMQ's proxy: only a DELAY (or MIXED) topic has recalls
            remark = check_message_type(topic, tc.message_type, TopicMessageType.DELAY)
            if remark is not None:
                return RecallOutcome(ResponseCode.MESSAGE_ILLEGAL, remark)
        try:
            handle = decode_recall_handle(handle_text)
        except RecallHandleError as e:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, str(e))
        if handle.topic != topic:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
        if handle.broker_name != c.broker_name:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, _UNAVAILABLE)
        left = handle.deliver_ms - int(time.time() * 1000)
        # After its deliver time the message is delivered (or being delivered): nothing left to recall.
        if left <= 0 or left >= self.store_config.timer_max_delay_sec * 1000:
            return RecallOutcome(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
        return handle

    async def recall(self, topic: str, handle_text: str, producer_group: str = "", born_host: bytes = b"\x7f\0\0\1",
                     born_port: int = 0) -> RecallOutcome:
        """Recall the scheduled message ``handle_text`` names (a plain method: the gRPC endpoint calls it).
        The cancel goes through the send path, so its target is checked as any TIMER_DEL_UNIQKEY's is: one
        unknown, already delivered or already recalled is answered QUERY_NOT_FOUND and nothing is stored."""
        checked = self._refusal(topic, handle_text)
        if isinstance(checked, RecallOutcome):
            return checked
        h = checked
        now = int(time.time() * 1000)
        props = {
            mc.TAGS: RECALL_MESSAGE_TAG,
            mc.TIMER_DEL_UNIQKEY: f"{h.topic}+{h.message_id}",
            mc.UNIQ_KEY: h.message_id,
            mc.TIMER_DELIVER_MS: h.timestamp,
            mc.WAIT_STORE_MSG_OK: "true",
        }
        if producer_group:
            props[mc.PGROUP] = producer_group
        msg = InnerMessage(topic, 0, b"0", 0, mc.encode_properties(props), 0, now, born_host, born_port)
        resp = await self.sender.store_internal(RemotingCommand(code=RequestCode.SEND_MESSAGE), msg)
        if resp.code in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                         ResponseCode.SLAVE_NOT_AVAILABLE):
            return RecallOutcome(ResponseCode.SUCCESS, None, h.message_id)  # stored: RocketMQ's answer
        return RecallOutcome(resp.code, f"recall failed: {resp.remark}")
