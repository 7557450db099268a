"""Checkpoints and acks as they travel through the revive topic (PopCheckPoint / AckMsg, fastjson keys).

A pop writes one checkpoint per queue it read: which offsets, when, for how long. It goes to
``rmq_sys_REVIVE_LOG_<cluster>`` as a timer message due at its deadline; an ack goes there due at the
same deadline. The revive service reads both when they are due and re-puts what no ack covered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tidalmq.common import fastjson

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"  # PopAckConstants


def revive_topic(cluster: str) -> str:
    """PopAckConstants.buildClusterReviveTopic."""
    return REVIVE_TOPIC_PREFIX + cluster


def _dumpb(obj: dict[str, Any]) -> bytes:
    # Plain JSON (numbers and validated names): the stdlib's C encoder, one per pop and per ack.
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


CkKey = tuple[str, str, int, int, int]  # group, topic, queue id, start offset, pop time


@dataclass(slots=True)
class PopCheckPoint:
    topic: str  # the topic read: the user's topic or its pop retry topic
    queue_id: int
    group: str
    start_offset: int
    pop_time: int
    invisible_time: int
    offsets: list[int] = field(default_factory=list)
    broker_name: str = ""

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def key(self) -> CkKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    def encode(self) -> bytes:
        return _dumpb({
            "so": self.start_offset, "pt": self.pop_time, "it": self.invisible_time, "n": len(self.offsets),
            "q": self.queue_id, "t": self.topic, "c": self.group, "bn": self.broker_name,
            "d": [o - self.start_offset for o in self.offsets], "ro": 0, "bm": 0,
        })

    @classmethod
    def decode(cls, body: bytes) -> PopCheckPoint:
        d = fastjson.loads(body)
        so = int(d["so"])
        return cls(str(d["t"]), int(d["q"]), str(d["c"]), so, int(d["pt"]), int(d["it"]),
                   [so + int(x) for x in d.get("d") or []], str(d.get("bn", "")))


@dataclass(frozen=True, slots=True)
class AckMsg:
    """One ack (tag ``ack``, AckMsg) or several of one checkpoint (tag ``bAck``, BatchAckMsg: ``aol``)."""

    topic: str
    queue_id: int
    group: str
    start_offset: int
    pop_time: int
    ack_offsets: tuple[int, ...]
    broker_name: str = ""

    @property
    def key(self) -> CkKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def tag(self) -> str:
        return ACK_TAG if len(self.ack_offsets) == 1 else BATCH_ACK_TAG

    def encode(self) -> bytes:
        d: dict[str, Any] = {"so": self.start_offset, "c": self.group, "t": self.topic, "q": self.queue_id,
                             "pt": self.pop_time, "bn": self.broker_name}
        if len(self.ack_offsets) == 1:
            d["ao"] = self.ack_offsets[0]
        else:
            d["aol"] = list(self.ack_offsets)
        return _dumpb(d)

    @classmethod
    def decode(cls, body: bytes) -> AckMsg:
        d = fastjson.loads(body)
        offsets = tuple(int(o) for o in d["aol"]) if "aol" in d else (int(d["ao"]),)
        return cls(str(d["t"]), int(d["q"]), str(d["c"]), int(d["so"]), int(d["pt"]), offsets,
                   str(d.get("bn", "")))
