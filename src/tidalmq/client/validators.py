"""Checks done before anything goes to the network (RocketMQ's Validators), with clear messages."""

from __future__ import annotations

from collections.abc import Sequence

from tidalmq.client.errors import ValidationError
from tidalmq.client.message import Message, now_ms
from tidalmq.common import message as mc
from tidalmq.common import naming as nm

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
DEFAULT_MAX_DELAY_LEVEL = 18  # "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
# timerMaxDelaySec of a TidalMQ broker (store/config.py; RocketMQ 5's is 3 days, and its broker refuses a
# later deliver time itself): the client checks no less than the broker it talks to accepts.
DEFAULT_TIMER_MAX_DELAY_SEC = 400 * 24 * 3600
_TIMER_PROPS = (mc.TIMER_DELIVER_MS, mc.TIMER_DELAY_MS, mc.TIMER_DELAY_SEC)
_TIMER_SET = frozenset(_TIMER_PROPS)
_DELAY_SET = frozenset((mc.DELAY, *_TIMER_PROPS))  # check_delay has nothing to do without one
_NOT_DELIVER_SET = _DELAY_SET - {mc.TIMER_DELIVER_MS}


def check_group(group: str | None) -> None:
    try:
        nm.check_group(group)
    except nm.NameError_ as e:
        raise ValidationError(str(e)) from None


def check_topic(topic: str | None) -> None:
    try:
        nm.check_topic(topic)
    except nm.NameError_ as e:
        raise ValidationError(str(e)) from None


def check_topic_sendable(topic: str | None) -> None:
    check_topic(topic)
    assert topic is not None
    if topic in nm.NOT_ALLOWED_SEND_TOPICS:
        raise ValidationError(f"Sending message to topic[{topic}] is forbidden.")


def _int_prop(msg: Message, name: str) -> int:
    raw = msg.properties[name]
    try:
        return int(raw)
    except ValueError:
        raise ValidationError(f"property {name} must be an integer, got {raw!r}") from None


def check_delay(msg: Message, max_delay_level: int = DEFAULT_MAX_DELAY_LEVEL,
                timer_max_delay_sec: int = DEFAULT_TIMER_MAX_DELAY_SEC, now: int | None = None) -> None:
    """Delay level within 1..max, timer properties positive and within the broker's horizon, one kind only.
    ``now``: the clock reading to measure a deliver time from (a batch reads it once)."""
    if _DELAY_SET.isdisjoint(msg.properties):
        return
    if _NOT_DELIVER_SET.isdisjoint(msg.properties):  # a deliver time alone (the usual timer message)
        _check_horizon(_int_prop(msg, mc.TIMER_DELIVER_MS), mc.TIMER_DELIVER_MS, timer_max_delay_sec, now)
        return
    kinds = [p for p in _TIMER_PROPS if p in msg.properties]
    if mc.DELAY in msg.properties:
        level = _int_prop(msg, mc.DELAY)
        if level < 0 or level > max_delay_level:
            raise ValidationError(f"delay level {level} is out of range 1..{max_delay_level} (0 means no delay)")
        if level > 0 and kinds:
            raise ValidationError(f"set either a delay level or a delivery time ({kinds[0]}), not both")
    if len(kinds) > 1:
        raise ValidationError(f"set only one of {', '.join(_TIMER_PROPS)}; the message has {', '.join(kinds)}")
    if not kinds:
        return
    kind = kinds[0]
    _check_horizon(_int_prop(msg, kind), kind, timer_max_delay_sec, now)


def _check_horizon(value: int, kind: str, timer_max_delay_sec: int, now: int | None) -> None:
    """A timer property's value positive and within the broker's horizon."""
    if kind == mc.TIMER_DELIVER_MS:
        if value <= 0:
            raise ValidationError(f"deliver time must be a positive epoch time in milliseconds, got {value}")
        delay_ms = value - (now_ms() if now is None else now)
    elif kind == mc.TIMER_DELAY_MS:
        if value <= 0:
            raise ValidationError(f"delay in milliseconds must be positive, got {value}")
        delay_ms = value
    else:
        if value <= 0:
            raise ValidationError(f"delay in seconds must be positive, got {value}")
        delay_ms = value * 1000
    if delay_ms > timer_max_delay_sec * 1000:
        raise ValidationError(f"the delivery time is {delay_ms // 1000} s away, beyond the broker's maximum of "
                              f"{timer_max_delay_sec} s (timerMaxDelaySec)")


def check_message(msg: Message | None, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
    if msg is None:
        raise ValidationError("the message is null")
    if not isinstance(msg, Message):
        raise ValidationError(f"expected a tidalmq.client.Message, got {type(msg).__name__}")
    check_topic_sendable(msg.topic)
    _check_body_and_properties(msg, max_message_size)


def _check_body_and_properties(msg: Message, max_message_size: int) -> None:
    if msg.body is None:
        raise ValidationError("the message body is null")
    if len(msg.body) == 0:
        raise ValidationError("the message body length is zero")
    if len(msg.body) > max_message_size:
        raise ValidationError(f"the message body size over max value, MAX: {max_message_size}")
    check_properties(msg.properties)


def check_properties(properties: dict[str, str]) -> None:
    """No name or value may hold a separator of the properties' wire form (it would write other
    properties, a DELAY for instance, into the message)."""
    for name, value in properties.items():
        error = mc.property_text_error(name, value)
        if error is not None:
            raise ValidationError(error)


def check_batch(msgs: Sequence[Message], max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                timer_max_delay_sec: int = DEFAULT_TIMER_MAX_DELAY_SEC) -> None:
    """All to one topic, none with a delay level or to a retry topic, WAIT alike (MessageBatch.generateFromList).
    Beyond RocketMQ: a batch of timer messages, each with its own deliver time (all of the batch or none)."""
    if not msgs:
        raise ValidationError("the batch is empty")
    first = msgs[0]
    check_message(first, max_message_size)  # the topic is checked once: the others must have the same
    topic = first.topic
    if topic.startswith(nm.RETRY_GROUP_TOPIC_PREFIX):
        raise ValidationError("Retry Group is not supported for batching")
    wait = first.properties.get(mc.WAIT_STORE_MSG_OK, "true")
    timed = not _TIMER_SET.isdisjoint(first.properties)
    now = now_ms()
    delivers: list[str] = []  # TIMER_DELIVER_MS values of messages asking for nothing else: checked together
    for m in msgs:
        if m is None:
            raise ValidationError("the message is null")
        if not isinstance(m, Message):
            raise ValidationError(f"expected a tidalmq.client.Message, got {type(m).__name__}")
        if m.topic != topic:
            raise ValidationError("The topic of the messages in one batch should be the same")
        _check_body_and_properties(m, max_message_size)
        props = m.properties
        if mc.DELAY in props and m.delay_level > 0:
            raise ValidationError("TimeDelayLevel is not supported for batching")
        if _TIMER_SET.isdisjoint(props) == timed:
            raise ValidationError("timer and plain messages cannot share a batch: give every message a deliver time, or none")
        if timed:
            if mc.TIMER_DEL_UNIQKEY in props:
                raise ValidationError("a cancel (TIMER_DEL_UNIQKEY) is sent alone, not in a batch")
            deliver = props.get(mc.TIMER_DELIVER_MS)
            if deliver is None or not _NOT_DELIVER_SET.isdisjoint(props):
                check_delay(m, timer_max_delay_sec=timer_max_delay_sec, now=now)
            else:
                delivers.append(deliver)
        if props.get(mc.WAIT_STORE_MSG_OK, "true") != wait:
            raise ValidationError("The waitStoreMsgOK of the messages in one batch should the same")
    if delivers:
        try:
            values = list(map(int, delivers))
        except ValueError:
            values = []
        if not values or min(values) <= 0 or max(values) - now > timer_max_delay_sec * 1000:
            for m in msgs:  # the first message at fault, as check_delay words it
                check_delay(m, timer_max_delay_sec=timer_max_delay_sec, now=now)
