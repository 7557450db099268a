"""RocketMQ 5 message types and topic attributes, as pure rules (no I/O, no broker state).

A topic's ``message.type`` attribute (TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE) says which kind of
message it accepts: NORMAL, FIFO, DELAY, TRANSACTION, LITE and PRIORITY (RocketMQ 5.4), or MIXED (any). A
message's own type is read from its properties (TopicMessageType.parseFromMessageProperty). The send path
(and the gRPC endpoint) compares the two with ``check_message_type`` when ``enableTopicMessageTypeCheck``
is on (docs/message-types.md).

Topic attributes are changed with RocketMQ's syntax (AttributeParser / AttributeUtil): ``+key=value`` adds
or alters, ``-key`` deletes, comma-separated, e.g. ``+message.type=DELAY``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.message import PROPERTY_SEPARATOR

# MessageConst.PROPERTY_TRANSFER_FLAG: set on a message one broker forwards to another.
TRANSFER_FLAG = "TRANSFER_FLAG"
# A number Java's Integer.parseInt / Long.parseLong could read, as NumberUtils.toInt / toLong try it.
_JAVA_INT = re.compile(r"[+-]?[0-9]{1,10}")


class TopicAttributeError(ValueError):
    """An attribute modification RocketMQ refuses (its message, in RocketMQ's words where it has one)."""


class TopicMessageType(str, Enum):
    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    LITE = "LITE"  # a parent topic: each message names its lite topic (__LITE_TOPIC), docs/grpc.md
    PRIORITY = "PRIORITY"
    MIXED = "MIXED"


@dataclass(frozen=True)
class Attribute:
    """One topic attribute: its legal values, its default, and whether it may change after creation.

    ``supported`` narrows RocketMQ's legal values to those TidalMQ honours: an attribute that would be
    stored and silently ignored (a compaction topic that is never compacted) is refused instead."""

    name: str
    changeable: bool
    universe: frozenset[str] | None  # None: a long within [low, high]
    default: str
    supported: frozenset[str] | None = None
    low: int = 0
    high: int = 0

    def verify(self, value: str) -> None:
        if self.universe is not None:
            if value not in self.universe:
                raise TopicAttributeError(f"value is not in set: [{', '.join(sorted(self.universe))}]")
        else:
            try:
                n = int(value)
            except ValueError:
                raise TopicAttributeError(f"{self.name}: {value!r} is not a number") from None
            if not self.low <= n <= self.high:
                raise TopicAttributeError(f"value is not in range({self.low}, {self.high})")
        if self.supported is not None and value not in self.supported:
            raise TopicAttributeError(f"{self.name}={value} is not supported by TidalMQ "
                                      f"(supported: {', '.join(sorted(self.supported))})")


MESSAGE_TYPE = "message.type"
TOPIC_ATTRIBUTES: dict[str, Attribute] = {a.name: a for a in (
    Attribute("queue.type", False, frozenset({"BatchCQ", "SimpleCQ"}), "SimpleCQ", supported=frozenset({"SimpleCQ"})),
    Attribute("cleanup.policy", False, frozenset({"DELETE", "COMPACTION"}), "DELETE", supported=frozenset({"DELETE"})),
    Attribute(MESSAGE_TYPE, True, frozenset(t.value for t in TopicMessageType), TopicMessageType.NORMAL.value),
    # The per-topic retention of RocketMQ's tiered store; -1 is "the broker's fileReservedTime", what TidalMQ does.
    Attribute("reserve.time", True, None, "-1", supported=frozenset({"-1"}), low=-1, high=(1 << 63) - 1),
)}


# Subscription group attributes (SubscriptionGroupAttributes.ALL), changed with the same syntax in the
# ``attributes`` of UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body. priority.factor (RocketMQ 5.4): the share of a
# group's pops of a PRIORITY topic that read it highest priority first (0: none, 100: all).
PRIORITY_FACTOR = "priority.factor"
GROUP_ATTRIBUTES: dict[str, Attribute] = {a.name: a for a in (
    Attribute(PRIORITY_FACTOR, True, None, "100", low=0, high=100),
)}


def priority_factor(attributes: Mapping[str, str] | None) -> int:
    """SubscriptionGroupConfig.getPriorityFactor: the group's priority.factor, 100 when unset or not a number."""
    value = (attributes or {}).get(PRIORITY_FACTOR, "")
    return int(value) if _JAVA_INT.fullmatch(value) else 100


def parse_modification(text: str | None) -> dict[str, str]:
    """AttributeParser.parseToMap: ``+k=v,-k2`` → {"+k": "v", "-k2": ""} (signed keys, in order)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for kv in text.split(","):
        if "=" in kv:
            key, _, value = kv.partition("=")
            if "+" not in key:
                raise TopicAttributeError(f"add/alter attribute format is wrong: {key}")
            if not value or "=" in value:
                raise TopicAttributeError(f"add/alter attribute format is wrong: {kv} (give +key=value)")
        else:
            key, value = kv, ""
            if "-" not in key:
                raise TopicAttributeError(f"delete attribute format is wrong: {key}")
        if key in out:
            raise TopicAttributeError(f"key duplication: {key}")
        out[key] = value
    return out


def alter_attributes(create: bool, current: Mapping[str, str], modification: Mapping[str, str],
                     known: Mapping[str, Attribute] | None = None) -> dict[str, str]:
    """AttributeUtil.alterCurrentAttributes: the attributes after applying ``modification`` (signed keys
    from ``parse_modification``) to ``current``. Creating a topic (or group) only adds; unknown keys, illegal
    values and changes to an unchangeable attribute are refused (TopicAttributeError), nothing applied.
    ``known``: the legal attributes, the topic's (TOPIC_ATTRIBUTES) unless given (GROUP_ATTRIBUTES)."""
    known = TOPIC_ATTRIBUTES if known is None else known
    seen: set[str] = set()
    result = dict(current)
    deletes: list[str] = []
    for signed, value in modification.items():
        key = signed[1:]
        if not key or "+" in key or "-" in key:
            raise TopicAttributeError("kv string format wrong.")
        if key in seen:
            raise TopicAttributeError(f"alter duplication key. key: {key}")
        seen.add(key)
        attr = known.get(key)
        if create:
            if not signed.startswith("+"):
                raise TopicAttributeError(f"only add attribute is supported while creating topic. key: {key}")
        elif signed.startswith("-"):
            if key not in current:
                raise TopicAttributeError(f"attempt to delete a nonexistent key: {key}")
        elif not signed.startswith("+"):
            raise TopicAttributeError(f"wrong format key: {key}")
        if attr is None:
            raise TopicAttributeError(f"unsupported key: {key}")
        if not create and not attr.changeable:
            raise TopicAttributeError(f"attempt to update an unchangeable attribute. key: {key}")
        if signed.startswith("-"):
            deletes.append(key)
        else:
            attr.verify(value)
            result[key] = value
    for key in deletes:
        result.pop(key, None)
    return result


def topic_message_type(attributes: Mapping[str, str] | None) -> TopicMessageType:
    """TopicConfig.getTopicMessageType: a topic without the attribute is NORMAL."""
    value = (attributes or {}).get(MESSAGE_TYPE)
    if value is None:
        return TopicMessageType.NORMAL
    try:
        return TopicMessageType(value)
    except ValueError:
        return TopicMessageType.UNSPECIFIED  # a hand-edited topics.json: refuse every send rather than guess


_DELAY_PROPERTIES = frozenset({mc.DELAY, mc.TIMER_DELIVER_MS, mc.TIMER_DELAY_SEC, mc.TIMER_DELAY_MS})
# The property names that decide a message's type, found in the encoded properties text without parsing it.
_TYPE_NAMES = mc.property_finder((
    mc.TRAN_MSG, *sorted(_DELAY_PROPERTIES), mc.SHARDING_KEY, mc.LITE_TOPIC, mc.PRIORITY, TRANSFER_FLAG))


def message_type_of(props: Mapping[str, str]) -> TopicMessageType:
    """TopicMessageType.parseFromMessageProperty: TRAN_MSG=true → TRANSACTION; a delay level or a timer
    property → DELAY; a message group (``__SHARDINGKEY``) → FIFO; a lite topic (``__LITE_TOPIC``) → LITE;
    a priority (``_SYS_MSG_PRIORITY_``, any value) → PRIORITY; else NORMAL. Never UNSPECIFIED or MIXED. The
    order keeps the types exclusive: a delay message with a priority is DELAY."""
    if props.get(mc.TRAN_MSG) == "true":
        return TopicMessageType.TRANSACTION
    if any(k in props for k in _DELAY_PROPERTIES):
        return TopicMessageType.DELAY
    if mc.SHARDING_KEY in props:
        return TopicMessageType.FIFO
    if mc.LITE_TOPIC in props:
        return TopicMessageType.LITE
    if mc.PRIORITY in props:
        return TopicMessageType.PRIORITY
    return TopicMessageType.NORMAL


def priority_of(value: str | None) -> int:
    """Message.getPriority: the priority property as an int, -1 when it is missing or not a Java int
    (NumberUtils.toInt(value, -1)). Only a value >= 0 is a priority."""
    if value is None or not _JAVA_INT.fullmatch(value):
        return -1
    n = int(value)
    return n if -(1 << 31) <= n < (1 << 31) else -1


def priority_queue(priority: int, write_queue_nums: int) -> int:
    """SendMessageProcessor: a PRIORITY message is stored in queue min(priority, writeQueueNums - 1), so on
    a topic of N queues priorities 0..N-1 are distinct levels and higher ones share the last queue."""
    return max(0, min(priority, write_queue_nums - 1))


def type_properties(text: str) -> dict[str, str]:
    """The properties of an encoded properties text that ``message_type_of`` and ``needs_type_check`` read
    (one regex pass; the send path does not parse the whole text for this)."""
    return dict(_TYPE_NAMES.findall(PROPERTY_SEPARATOR + text))


def needs_type_check(topic: str, props: Mapping[str, str]) -> bool:
    """RocketMQ's proxy checks neither retry nor dead-letter topics, nor messages a broker forwards
    (TRANSFER_FLAG)."""
    return not (topic.startswith((nm.RETRY_GROUP_TOPIC_PREFIX, nm.DLQ_GROUP_TOPIC_PREFIX)) or TRANSFER_FLAG in props)


def check_message_type(topic: str, topic_type: TopicMessageType, message_type: TopicMessageType) -> str | None:
    """DefaultTopicMessageTypeValidator: None when ``topic`` accepts ``message_type``, else the remark to
    refuse the send with (answered MESSAGE_ILLEGAL over remoting, MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    over gRPC)."""
    if message_type != TopicMessageType.UNSPECIFIED and (
            message_type == topic_type or topic_type == TopicMessageType.MIXED):
        return None
    return (f"TopicMessageType validate failed, the expected type is {topic_type.value}, but actual type is "
            f"{message_type.value} (topic {topic})")


def check_messages(topic: str, topic_type: TopicMessageType, properties: Iterable[str]) -> str | None:
    """``check_message_type`` over the encoded properties texts of the messages of one send (a batch:
    each of its messages); the first refusal's remark, or None."""
    if topic_type == TopicMessageType.MIXED:
        return None
    for text in properties:
        props = type_properties(text)
        if needs_type_check(topic, props):
            remark = check_message_type(topic, topic_type, message_type_of(props))
            if remark is not None:
                return remark
    return None


def check_lite(topic: str, topic_type: TopicMessageType, properties: Iterable[str]) -> str | None:
    """Lite topics, checked on every send whatever ``enableTopicMessageTypeCheck`` says (a lite topic
    name becomes a ConsumeQueue directory): a message carrying ``__LITE_TOPIC`` goes to a LITE (or MIXED)
    topic only, and names a legal lite topic. The first refusal's remark, or None."""
    for text in properties:
        if mc.LITE_TOPIC not in text:
            continue
        lite = type_properties(text).get(mc.LITE_TOPIC)
        if lite is None:
            continue
        if topic_type not in (TopicMessageType.LITE, TopicMessageType.MIXED):
            return check_message_type(topic, topic_type, TopicMessageType.LITE)
        try:
            nm.check_lite_topic(lite)
        except nm.NameError_ as e:
            return f"illegal lite topic: {e}"
    return None
