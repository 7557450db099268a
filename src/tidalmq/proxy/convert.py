"""Pure conversions between apache.rocketmq.v2 (the 5.x clients' gRPC messages) and RocketMQ's message
model: system properties to and from message properties, receipt handles, and remoting response codes to
gRPC status codes. No I/O here (tests/grpc/test_convert.py checks it without a server).

Facts from RocketMQ's proxy (grpc/v2/common/GrpcConverter, MessageConverter, ResponseBuilder): the 5.x
message id is the message's UNIQ_KEY; a message group is the FIFO sharding key (``__SHARDINGKEY``); a
delivery timestamp becomes TIMER_DELIVER_MS; the body digest is the CRC32 of the body in upper-case hex.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from typing import Any

from tidalmq.client.message import Message, MessageExt
from tidalmq.client.pop_consumer import POP_CK
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common import pop_handle as xi
from tidalmq.common.attribute.topic_message_type import TopicMessageType, message_type_of, priority_of
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.remoting.codes import ResponseCode

Code = pb.Code

# The properties a 5.x client may not set as user properties: RocketMQ's proxy refuses them
# (ILLEGAL_MESSAGE_PROPERTY_KEY), since they steer the broker.
RESERVED_USER_KEYS = mc.SYSTEM_PROPERTIES | {mc.SHARDING_KEY, mc.LITE_TOPIC}


class ConvertError(ValueError):
    """A message or handle the proxy refuses: ``code`` is the gRPC status code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def millis(t: Any) -> int:
    """A Timestamp or Duration in whole milliseconds (rounded down)."""
    return int(t.seconds * 1000 + t.nanos // 1_000_000)


def _set_ms(ts: Any, ms: int) -> None:
    """``ts`` (a Timestamp field) set to ``ms``; unlike FromMilliseconds, a time outside years 1-9999 that
    a stored message carries is passed on as it is, not refused."""
    ts.seconds, ts.nanos = ms // 1000, (ms % 1000) * 1_000_000


def to_remoting(m: pb.Message, max_body_size: int) -> Message:
    """A 5.x client's message as TidalMQ's ``Message`` (properties as a 4.x client would set them)."""
    sp = m.system_properties
    body = bytes(m.body)
    if sp.body_encoding == pb.Encoding.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error):
            raise ConvertError(Code.MESSAGE_CORRUPTED, "the GZIP body does not inflate") from None
    if not body:
        raise ConvertError(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_body_size:
        raise ConvertError(Code.MESSAGE_BODY_TOO_LARGE,
                           f"the message body size {len(body)} is over max value, MAX: {max_body_size}")
    for key, value in m.user_properties.items():
        if key in RESERVED_USER_KEYS:
            raise ConvertError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved")
        problem = mc.property_text_error(key, value)
        if problem is not None:
            raise ConvertError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, problem)
    if not sp.message_id:
        raise ConvertError(Code.ILLEGAL_MESSAGE_ID, "the message has no message id")
    props = dict(m.user_properties)
    props[mc.UNIQ_KEY] = sp.message_id
    if sp.tag:
        props[mc.TAGS] = sp.tag
    keys = [k for k in sp.keys if k]
    if keys:
        props[mc.KEYS] = mc.KEY_SEPARATOR.join(keys)
    if sp.HasField("message_group"):
        if not sp.message_group:
            raise ConvertError(Code.ILLEGAL_MESSAGE_GROUP, "the message group is empty")
        props[mc.SHARDING_KEY] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        props[mc.TIMER_DELIVER_MS] = str(millis(sp.delivery_timestamp))
    if sp.HasField("lite_topic"):  # docs/grpc.md, "Lite topics"
        try:
            nm.check_lite_topic(sp.lite_topic)
        except nm.NameError_ as e:
            raise ConvertError(Code.ILLEGAL_LITE_TOPIC, str(e)) from None
        if sp.HasField("message_group") or sp.HasField("delivery_timestamp") or sp.HasField("priority"):
            raise ConvertError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                               "a lite message has no message group, delivery time nor priority")
        props[mc.LITE_TOPIC] = sp.lite_topic
    if sp.HasField("priority"):  # RocketMQ's proxy: Message.setPriority, which refuses a negative one
        if sp.priority < 0:
            raise ConvertError(Code.BAD_REQUEST, "The priority must be greater than or equal to 0")
        props[mc.PRIORITY] = str(sp.priority)
    return Message(m.topic.name, body, properties=props)


# TopicMessageType → the 5.x MessageType (GrpcConverter; UNSPECIFIED and MIXED never come from a message).
_GRPC_TYPES = {
    TopicMessageType.NORMAL: pb.MessageType.NORMAL,
    TopicMessageType.FIFO: pb.MessageType.FIFO,
    TopicMessageType.DELAY: pb.MessageType.DELAY,
    TopicMessageType.TRANSACTION: pb.MessageType.TRANSACTION,
    TopicMessageType.LITE: pb.MessageType.LITE,
    TopicMessageType.PRIORITY: pb.MessageType.PRIORITY,
}


def message_type(props: dict[str, str]) -> int:
    """A stored message's type as RocketMQ's proxy shows it (TopicMessageType.parseFromMessageProperty). A
    delivered timer message sent with a relative delay is DELAY too: RocketMQ keeps its TIMER_DELAY_SEC /
    TIMER_DELAY_MS, TidalMQ only its TIMER_OUT_MS (schedule/restore.py)."""
    kind = message_type_of(props)
    if kind == TopicMessageType.NORMAL and mc.TIMER_OUT_MS in props:
        return pb.MessageType.DELAY
    return _GRPC_TYPES.get(kind, pb.MessageType.NORMAL)


def accept_message_types(topic_type: TopicMessageType) -> list[int]:
    """The message types a route's queues accept, from the topic's message.type (RouteActivity.
    parseTopicMessageType): the topic's own type; MIXED the four of RocketMQ 5.0 (not PRIORITY nor LITE);
    UNSPECIFIED (a type the endpoint could not learn) MESSAGE_TYPE_UNSPECIFIED, which no message has."""
    if topic_type == TopicMessageType.MIXED:
        return [pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION]
    return [_GRPC_TYPES.get(topic_type, pb.MessageType.MESSAGE_TYPE_UNSPECIFIED)]


def to_grpc(m: MessageExt, topic: str, receipt_handle: str = "") -> pb.Message:
    """A stored message as the 5.x clients read it. ``topic`` is the one the client asked for (a retry
    copy is stored under the group's retry topic)."""
    props = m.properties
    out = pb.Message(topic=pb.Resource(name=topic), body=m.body)
    sp = out.system_properties
    sp.message_id = props.get(mc.UNIQ_KEY) or m.offset_msg_id
    tag = props.get(mc.TAGS)
    if tag:
        sp.tag = tag
    sp.keys.extend(k for k in props.get(mc.KEYS, "").split(mc.KEY_SEPARATOR) if k)
    sp.body_digest.type = pb.DigestType.MD5
    sp.body_digest.checksum = hashlib.md5(m.body, usedforsecurity=False).hexdigest().upper()
    sp.body_encoding = pb.Encoding.IDENTITY
    sp.message_type = message_type(props)
    _set_ms(sp.born_timestamp, m.born_timestamp)
    sp.born_host = m.born_host[0]
    _set_ms(sp.store_timestamp, m.store_timestamp)
    sp.store_host = f"{m.store_host[0]}:{m.store_host[1]}"
    # A delivered timer message keeps the deliver time it was sent with (GrpcConverter reads TIMER_DELIVER_MS);
    # one sent with a relative delay has TIMER_OUT_MS, its deliver time (RocketMQ would show now + delay).
    deliver = props.get(mc.TIMER_DELIVER_MS) or props.get(mc.TIMER_OUT_MS)
    if deliver and deliver.isascii() and deliver.isdigit():
        _set_ms(sp.delivery_timestamp, int(deliver))
    group = props.get(mc.SHARDING_KEY)
    if group:
        sp.message_group = group
    lite = props.get(mc.LITE_TOPIC)
    if lite:
        sp.lite_topic = lite
    priority = priority_of(props.get(mc.PRIORITY))
    if priority >= 0:
        sp.priority = priority
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    sp.delivery_attempt = m.reconsume_times + 1
    if receipt_handle:
        sp.receipt_handle = receipt_handle
    for k, v in props.items():
        if k not in RESERVED_USER_KEYS and k != POP_CK:
            out.user_properties[k] = v
    return out


def parse_handle(handle: str) -> xi.ExtraInfo:
    """A receipt handle is the pop's extraInfo (POP_CK), which names broker, queue and offset."""
    try:
        info = xi.ExtraInfo.parse(handle)
    except xi.ExtraInfoError as e:
        raise ConvertError(Code.INVALID_RECEIPT_HANDLE, f"bad receipt handle: {e}") from None
    if info.queue_offset < 0 or not info.broker_name:
        raise ConvertError(Code.INVALID_RECEIPT_HANDLE, "bad receipt handle: no broker or queue offset")
    return info


def handle_message(topic: str, handle: str) -> MessageExt:
    """The received message a handle stands for, as the pop consumer acks it (topic, queue, offset, POP_CK)."""
    info = parse_handle(handle)
    return MessageExt(topic, b"", info.queue_id, info.queue_offset, 0, {POP_CK: handle},
                      broker_name=info.broker_name)


# RocketMQ's remoting codes → the gRPC codes RocketMQ's proxy answers (ResponseBuilder.buildStatus).
_CODES: dict[int, int] = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    ResponseCode.NO_MESSAGE: Code.INVALID_RECEIPT_HANDLE,
    ResponseCode.POLLING_FULL: Code.TOO_MANY_REQUESTS,
}


# How RocketMQ's DefaultTopicMessageTypeValidator starts its remark (the broker answers it MESSAGE_ILLEGAL).
TYPE_CHECK_REMARK = "TopicMessageType validate failed"


def grpc_code(remoting_code: int, remark: str = "") -> int:
    """The gRPC status code for a remoting error answer."""
    if remoting_code == ResponseCode.MESSAGE_ILLEGAL and "size" in remark:
        return Code.MESSAGE_BODY_TOO_LARGE
    if remoting_code == ResponseCode.MESSAGE_ILLEGAL and remark.startswith(TYPE_CHECK_REMARK):
        return Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE  # RocketMQ's proxy: the topic's message.type
    return _CODES.get(remoting_code, Code.INTERNAL_SERVER_ERROR)
