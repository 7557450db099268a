"""Turning a parked scheduled message back into a message of its real topic (messageTimeup)."""

from __future__ import annotations

from typing import Protocol

from tidalmq.common import message as mc
from tidalmq.common.record import (
    _H,
    _I,
    MESSAGE_MAGIC_CODE,
    POS_MAGIC,
    POS_QUEUEID,
    POS_TOTALSIZE,
    RecordError,
    RecordView,
    decode_record,
    patch_for_append,
)

# Properties that only describe the parking, dropped when a delay-level message is delivered
# (ScheduleMessageService.messageTimeUp drops DELAY, TIMER_DELIVER_MS and TIMER_DELAY_SEC).
PARKING_PROPERTIES = (
    mc.DELAY,
    mc.TIMER_DELIVER_MS,
    mc.TIMER_DELAY_SEC,
    mc.TIMER_DELAY_MS,
    mc.TIMER_OUT_MS,
    mc.TIMER_ROLL_TIMES,
)
# What a delivered timer message loses. RocketMQ's TimerMessageStore.convertMessage keeps every property but
# REAL_TOPIC / REAL_QID: TIMER_DELIVER_MS and TIMER_OUT_MS (the deliver time) stay here too, and the 5.x
# endpoint shows them as the message's delivery_timestamp. The relative requests (TIMER_DELAY_SEC / _MS) go:
# RocketMQ lets the TIMER_OUT_MS beside them stop a client's re-send of the message from being delayed
# again, but TidalMQ drops a client's TIMER_OUT_MS, so they would delay it anew. TidalMQ's timer never rolls.
TIMER_PARKING_PROPERTIES = (mc.DELAY, mc.TIMER_DELAY_SEC, mc.TIMER_DELAY_MS, mc.TIMER_ROLL_TIMES, mc.RESCHEDULED_FROM)


def restore_record(view: RecordView, extra_properties: dict[str, str] | None = None,
                   properties: dict[str, str] | None = None,
                   dropped: tuple[str, ...] = PARKING_PROPERTIES) -> tuple[str, int, bytearray]:
    """(real topic, real queue id, record to append) for a message parked in a schedule topic.

    Keeps body, flag, keys, tags, UNIQ_KEY, user properties, born host/time and reconsume times;
    REAL_TOPIC and REAL_QID stay, as RocketMQ keeps them, so a consumer can tell it was scheduled.
    The record is the parked one's bytes up to the end of the body (hosts, times, flags and body CRC
    as stored: nothing decoded), then the real topic and the new properties; QUEUEOFFSET,
    PHYSICALOFFSET and STORETIMESTAMP are left 0 for the append to fill in. ``properties``: the
    parked record's, when the caller has read them already. ``dropped``: the properties the delivered
    copy loses (a delay level's by default; TIMER_PARKING_PROPERTIES for the timer). Raises ValueError
    (RecordError for a topic or properties too long for a record)."""
    props = dict(view.properties if properties is None else properties)
    topic = props.get(mc.REAL_TOPIC)
    if not topic:
        raise ValueError(f"scheduled message at {view.physical_offset} has no {mc.REAL_TOPIC}")
    try:
        queue_id = int(props.get(mc.REAL_QID, "0"))
    except ValueError:
        queue_id = 0
    for key in dropped:
        props.pop(key, None)
    if extra_properties:
        props.update(extra_properties)
    props_b = mc.encode_properties(props).encode("utf-8")
    topic_b = topic.encode("utf-8")
    if len(topic_b) > 127:
        raise RecordError(f"topic too long for the record: {len(topic_b)} bytes")
    if len(props_b) > 32767:
        raise RecordError(f"properties too long: {len(props_b)} bytes > 32767")
    head = view.body_at + view.body_len - view.pos  # the fixed fields and the body
    out = bytearray(head + 1 + len(topic_b) + 2 + len(props_b))
    out[:head] = view.buf[view.pos : view.pos + head]
    _I.pack_into(out, POS_TOTALSIZE, len(out))
    _I.pack_into(out, POS_MAGIC, MESSAGE_MAGIC_CODE)  # the topic's length in one byte
    _I.pack_into(out, POS_QUEUEID, queue_id)
    patch_for_append(out, 0, 0, 0, 0)
    out[head] = len(topic_b)
    out[head + 1 : head + 1 + len(topic_b)] = topic_b
    p = head + 1 + len(topic_b)
    _H.pack_into(out, p, len(props_b))
    out[p + 2 :] = props_b
    return topic, queue_id, out


class IndexedStore(Protocol):
    @property
    def has_index(self) -> bool: ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]: ...


def copy_in_real_topic(store: IndexedStore, parked: dict[str, str], mark: str | None = None) -> bool:
    """Whether the copy of a parked message (``parked``: its properties) is in its real topic already: a
    message of that topic with the parked one's UNIQ_KEY in the index, carrying REAL_TOPIC (every restored
    copy does) and, if given, property ``mark``. What a crash mid-delivery or a promoted replica asks before
    delivering again; False without an index, a UNIQ_KEY or a REAL_TOPIC."""
    uniq, real = parked.get(mc.UNIQ_KEY), parked.get(mc.REAL_TOPIC)
    if not uniq or not real or not store.has_index:
        return False
    for view in store.query_message(real, uniq, 32, 0, 1 << 62):
        try:
            m = decode_record(view, read_body=False)
        except RecordError:
            continue
        if m.topic == real and m.properties.get(mc.REAL_TOPIC) == real and (mark is None or mark in m.properties):
            return True
    return False
