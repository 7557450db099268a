"""Message properties (RocketMQ's MessageConst) and their wire encoding.

Properties travel as ``name\\x01value\\x02`` pairs, both in SEND_MESSAGE headers and in
stored records, so the same codec serves the protocol and the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Property names that carry behaviour (MessageConst.java).
KEYS = "KEYS"
TAGS = "TAGS"
WAIT_STORE_MSG_OK = "WAIT"
DELAY = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
UNIQ_KEY = "UNIQ_KEY"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
CONSUME_START_TIME = "CONSUME_START_TIME"
TRANSACTION_ID = "__transactionId__"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
SHARDING_KEY = "__SHARDINGKEY"
CLUSTER = "CLUSTER"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

KEY_SEPARATOR = " "


def encode_properties(props: dict[str, str] | None) -> str:
    """Properties to RocketMQ's string form; ``None`` values are skipped as Java does."""
    if not props:
        return ""
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items() if v is not None
    )


def decode_properties(text: str | None) -> dict[str, str]:
    """Parse ``name\\x01value\\x02`` pairs; tolerant of a missing trailing separator."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[name] = value
    return out


@dataclass(slots=True)
class Message:
    """A message as a producer builds it (and as the broker receives it)."""

    topic: str
    body: bytes = b""
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []
