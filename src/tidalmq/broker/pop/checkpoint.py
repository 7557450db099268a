"""Checkpoints and acks as they travel through the revive topic (PopCheckPoint / AckMsg, fastjson keys).

A pop writes one checkpoint per queue it read: which offsets, when, for how long. It goes to
``rmq_sys_REVIVE_LOG_<cluster>`` as a timer message due at its deadline; an ack goes there due at the
same deadline. The revive service reads both when they are due and re-puts what no ack covered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidalmq.common import fastjson

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG, ACK_TAG = "ck", "ack"


def revive_topic(cluster: str) -> str:
    """PopAckConstants.buildClusterReviveTopic."""
    return REVIVE_TOPIC_PREFIX + cluster


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
        return fastjson.dumpb({
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
    topic: str
    queue_id: int
    group: str
    start_offset: int
    pop_time: int
    ack_offset: int
    broker_name: str = ""

    @property
    def key(self) -> CkKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    def encode(self) -> bytes:
        return fastjson.dumpb({"ao": self.ack_offset, "so": self.start_offset, "c": self.group, "t": self.topic,
                               "q": self.queue_id, "pt": self.pop_time, "bn": self.broker_name})

    @classmethod
    def decode(cls, body: bytes) -> AckMsg:
        d = fastjson.loads(body)
        return cls(str(d["t"]), int(d["q"]), str(d["c"]), int(d["so"]), int(d["pt"]), int(d["ao"]),
                   str(d.get("bn", "")))
