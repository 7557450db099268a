"""The pop handle strings, as RocketMQ's ExtraInfoUtil and KeyBuilder write them, and BatchAck's bit
set (pure codecs, shared by the broker and the client).

extraInfo (the receipt handle a client sends back in ACK / CHANGE_MESSAGE_INVISIBLETIME), fields joined
by a space: ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId msgQueueOffset, where
``retry`` is 0 for the topic itself, 1 for its pop retry topic ``%RETRY%<group>_<topic>`` (v1), 2 for
``%RETRY%<group>+<topic>`` (v2). The pop response header lists, per queue read, ``retry queueId offset``
entries (startOffsetInfo, orderCountInfo) and ``retry queueId o1,o2,...`` (msgOffsetInfo), ';'-separated.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from tidalmq.common.naming import RETRY_GROUP_TOPIC_PREFIX

NORMAL, RETRY_V1, RETRY_V2 = "0", "1", "2"
SEPARATOR = " "


class ExtraInfoError(ValueError):
    """A handle that does not parse."""


def pop_retry_topic(topic: str, group: str) -> str:
    """KeyBuilder.buildPopRetryTopicV1: where unacked popped messages of ``topic`` come back."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def retry_flag(topic: str) -> str:
    """ExtraInfoUtil.getRetry."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return NORMAL
    return RETRY_V2 if "+" in topic else RETRY_V1


def real_topic(topic: str, group: str, flag: str) -> str:
    """ExtraInfoUtil.getRealTopic: the topic a handle's message was read from."""
    if flag == NORMAL:
        return topic
    if flag == RETRY_V1:
        return pop_retry_topic(topic, group)
    if flag == RETRY_V2:
        return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"
    raise ExtraInfoError(f"unknown retry flag {flag!r} in the extraInfo")


def normal_topic(topic: str, group: str) -> str:
    """KeyBuilder.parseNormalTopic: the topic a pop retry topic is the retry topic of."""
    for sep in ("+", "_"):
        prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{group}{sep}"
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return topic


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    queue_offset: int

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    def build(self) -> str:
        return SEPARATOR.join(str(x) for x in (self.ck_queue_offset, self.pop_time, self.invisible_time,
                                               self.revive_qid, self.retry, self.broker_name, self.queue_id,
                                               self.queue_offset))

    @classmethod
    def parse(cls, text: str) -> ExtraInfo:
        parts = text.split(SEPARATOR)
        if len(parts) < 7:
            raise ExtraInfoError(f"the extraInfo has {len(parts)} fields, 7 or 8 expected: {text[:80]!r}")
        try:
            return cls(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4], parts[5],
                       int(parts[6]), int(parts[7]) if len(parts) > 7 else -1)
        except ValueError:
            raise ExtraInfoError(f"the extraInfo has a field that is not a number: {text[:80]!r}") from None


def build_start_offset_info(entries: list[tuple[str, int, int]]) -> str:
    """``(topic, queue id, start offset)`` per queue read."""
    return ";".join(f"{retry_flag(t)} {q} {o}" for t, q, o in entries)


def build_msg_offset_info(entries: list[tuple[str, int, list[int]]]) -> str:
    return ";".join(f"{retry_flag(t)} {q} {','.join(map(str, offs))}" for t, q, offs in entries)


def _key(flag: str, queue_id: str) -> str:
    return f"{flag}@{queue_id}"


def parse_start_offset_info(text: str | None) -> dict[str, int]:
    """``{"<retry>@<queueId>": start offset}`` (ExtraInfoUtil.parseStartOffsetInfo's keys)."""
    out: dict[str, int] = {}
    for item in filter(None, (text or "").split(";")):
        flag, qid, off = item.split(SEPARATOR)
        out[_key(flag, qid)] = int(off)
    return out


def parse_msg_offset_info(text: str | None) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for item in filter(None, (text or "").split(";")):
        flag, qid, offs = item.split(SEPARATOR)
        out[_key(flag, qid)] = [int(o) for o in offs.split(",") if o]
    return out


def parse_order_count_info(text: str | None) -> dict[str, int]:
    return parse_start_offset_info(text)


def queue_key(topic: str, queue_id: int) -> str:
    """The key of a (possibly retry) topic's queue in the parsed header maps."""
    return _key(retry_flag(topic), str(queue_id))


def bitset_offsets(start_offset: int, b64: str) -> list[int]:
    """The offsets of a BatchAck's ``b``: java.util.BitSet.toByteArray (bit i of the set is bit i % 8
    of byte i // 8) as fastjson writes a byte[] (base64); bit i acks ``start_offset + i``."""
    data = base64.b64decode(b64, validate=True)
    return [start_offset + i * 8 + j for i, byte in enumerate(data) for j in range(8) if byte >> j & 1]


def bitset_of(start_offset: int, offsets: list[int]) -> str:
    bits = [o - start_offset for o in offsets]
    if any(b < 0 for b in bits):
        raise ValueError("an offset before the start offset")
    data = bytearray((max(bits) // 8 + 1) if bits else 0)
    for b in bits:
        data[b // 8] |= 1 << (b % 8)
    return base64.b64encode(bytes(data)).decode("ascii")
