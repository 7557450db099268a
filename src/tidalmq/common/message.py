"""Message properties (RocketMQ's MessageConst) and their wire encoding: the properties codec.

Properties travel as ``name\\x01value\\x02`` pairs, both in SEND_MESSAGE headers and in
stored records, so the same codec serves the protocol and the store. Every module that reads or
writes the encoded form (text or bytes) does it with what is here: the separators, the encoders and
decoders, one property's lookup, and the patterns that find named properties without decoding the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
NAME_VALUE_SEPARATOR_BYTES = NAME_VALUE_SEPARATOR.encode()
PROPERTY_SEPARATOR_BYTES = PROPERTY_SEPARATOR.encode()
PROPERTY_SEPARATOR_BYTE = PROPERTY_SEPARATOR_BYTES[0]  # what ``raw[i]`` of encoded bytes is at a separator
NAME_VALUE_SEPARATOR_BYTE = NAME_VALUE_SEPARATOR_BYTES[0]

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
# MessageConst.PROPERTY_LITE_TOPIC: the lite topic of a message sent to a LITE topic (docs/grpc.md, "Lite topics").
LITE_TOPIC = "__LITE_TOPIC"
CLUSTER = "CLUSTER"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
# TidalMQ's: on a reschedule's copy of a pending message, what it replaces (schedule/reschedule.py).
RESCHEDULED_FROM = "RESCHEDULED_FROM"
# RocketMQ 5.4's message priority (MessageConst.PROPERTY_PRIORITY): an integer >= 0, on a PRIORITY topic the
# queue the message is stored in (docs/message-types.md, "Priority messages").
PRIORITY = "_SYS_MSG_PRIORITY_"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
# The record CRC that ends a stored record's properties (enabledAppendPropCRC, common/record.py): a system
# property, so the gRPC endpoint hands it to no client as a user property (RocketMQ's proxy neither).
PROPERTY_CRC32 = "__CRC32#"

# Names a user property may not take (MessageConst.STRING_HASH_SET, which Message.putUserProperty
# refuses), with the ones TidalMQ's broker writes besides (TIMER_DELAY_MS, DLQ_ORIGIN_*).
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", KEYS, TAGS, WAIT_STORE_MSG_OK, DELAY, RETRY_TOPIC, REAL_TOPIC, REAL_QID, TRAN_MSG,
    PGROUP, MIN_OFFSET, MAX_OFFSET, "BUYER_ID", ORIGIN_MESSAGE_ID, "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", RECONSUME_TIME, UNIQ_KEY, MAX_RECONSUME_TIMES, CONSUME_START_TIME, "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", TRAN_PREPARED_QUEUE_OFFSET, "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", CLUSTER, "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
    TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS, TIMER_ROLL_TIMES,
    TIMER_OUT_MS, TIMER_DEL_UNIQKEY, "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP",
    DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID, TRANSACTION_CHECK_TIMES, PRIORITY, PROPERTY_CRC32, RESCHEDULED_FROM,
})

# What the broker does with properties only it writes when a client's send carries them
# (docs/security.md, "Properties"). Refused (MESSAGE_ILLEGAL): never on a message a client receives,
# so no real client has a copy to send. Dropped: they ride on delivered messages (REAL_TOPIC of a
# delivered delayed message, TIMER_OUT_MS and TIMER_ENQUEUE_MS of a timer one ...) and clients copy them
# when they re-send a message themselves, so refusing would break them; the broker writes its own where
# needed.
BROKER_ONLY_PROPERTIES = (TIMER_ROLL_TIMES, TRAN_PREPARED_QUEUE_OFFSET)
BROKER_WRITTEN_PROPERTIES = (REAL_TOPIC, REAL_QID, TIMER_OUT_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS,
                             TRANSACTION_CHECK_TIMES, DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID, RESCHEDULED_FROM)


def property_text_error(name: str, value: str) -> str | None:
    """Why ``name``/``value`` cannot travel as a property, or None: a separator inside either would let
    one property write others (``"x\x02DELAY\x012"``)."""
    if not isinstance(name, str) or not name:
        return "a property name must be a non-empty string"
    if not isinstance(value, str):
        return f"the value of property {name!r} must be a string"
    for text, what in ((name, "name"), (value, "value")):
        if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
            return f"the property {what} {text[:64]!r} contains a reserved separator (\\x01 or \\x02)"
    return None

KEY_SEPARATOR = " "


def encode_properties(props: dict[str, str] | None) -> str:
    """Properties to RocketMQ's string form; ``None`` values are skipped as Java does."""
    if not props:
        return ""
    try:  # all names and values strings (nearly always): two C-level joins
        return PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, props.items())) + PROPERTY_SEPARATOR
    except TypeError:
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


def decode_java_properties(raw: bytes) -> dict[str, str]:
    """Every property as MessageDecoder.string2messageProperties reads them (what a broker-side filter
    sees): the first name/value separator splits a pair, a pair with an empty name or value is dropped,
    the last of duplicate names wins."""
    out: dict[str, str] = {}
    for item in raw.decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


def property_key(name: str) -> str:
    """What precedes a property's value in the encoded text: its name and the name/value separator (a
    marker whose absence from the text shows the property absent)."""
    return name + NAME_VALUE_SEPARATOR


def encode_property(name: str, value: str) -> str:
    """One encoded pair, its separator included: what appending a property to encoded text adds."""
    return f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"


def has_encoded_property(text: str, name: str) -> bool:
    """Whether encoded ``text`` holds property ``name``, without decoding it."""
    return text.startswith(name + NAME_VALUE_SEPARATOR) or f"{PROPERTY_SEPARATOR}{name}{NAME_VALUE_SEPARATOR}" in text


def encoded_property(text: str, name: str) -> str | None:
    """The value of the first property ``name`` of encoded ``text``, without decoding the others."""
    key = name + NAME_VALUE_SEPARATOR
    if text.startswith(key):
        start = len(key)
    else:
        i = text.find(PROPERTY_SEPARATOR + key)
        if i < 0:
            return None
        start = i + 1 + len(key)
    end = text.find(PROPERTY_SEPARATOR, start)
    return text[start:end] if end >= 0 else text[start:]


def java_property_reader(names: Iterable[str]) -> Callable[[bytes], dict[str, str]]:
    """A reader of the properties ``names`` in encoded bytes, as ``decode_java_properties`` would give
    them (the last duplicate wins, an empty value is no value), one search a name rather than a decode of
    the whole section: cheaper for a few names."""
    # A separator put in front makes every name start right after one: a search for separator + name +
    # name/value separator cannot land inside a longer name. From the end: the last duplicate wins.
    keys = tuple((n, f"{PROPERTY_SEPARATOR}{n}{NAME_VALUE_SEPARATOR}", len(n) + 2) for n in sorted(names))
    sep = PROPERTY_SEPARATOR

    def read(raw: bytes) -> dict[str, str]:
        text = sep + raw.decode("utf-8", "replace")
        props = {}
        for name, key, klen in keys:
            i = text.rfind(key)
            if i >= 0:
                i += klen
                j = text.find(sep, i)
                value = text[i:j] if j >= 0 else text[i:]
                if value:
                    props[name] = value
        return props
    return read


# Patterns that find named properties in encoded properties. Each is searched in the properties with a
# separator put in front (``PROPERTY_SEPARATOR + text``): a pattern that begins with a literal lets the regex
# engine jump from separator to separator, where one with an alternation in front ("start or separator")
# is tried at every position (docs/benchmarks.md, "Figures behind the code").
def _names(names: Iterable[str | bytes]) -> bytes:
    return b"|".join(re.escape(n if isinstance(n, bytes) else n.encode()) for n in names)


_VALUE_B = NAME_VALUE_SEPARATOR_BYTES + b"([^" + PROPERTY_SEPARATOR_BYTES + b"]*)"  # after a name: its value


def property_finder(names: Iterable[str]) -> re.Pattern[str]:
    """``findall(PROPERTY_SEPARATOR + text)`` gives (name, value) of each property of ``names`` in ``text``."""
    return re.compile(f"{PROPERTY_SEPARATOR}({'|'.join(map(re.escape, names))}){NAME_VALUE_SEPARATOR}"
                      f"([^{PROPERTY_SEPARATOR}]*)")


def property_key_finder(names: Iterable[str]) -> re.Pattern[str]:
    """``search(text)`` finds a ``property_key`` of any of ``names`` in ``text``: a quick "may hold one"
    (a hit may lie inside a longer name or a value: then decode and look)."""
    return re.compile("|".join(re.escape(property_key(n)) for n in names))


def property_finder_bytes(names: Iterable[str | bytes], *, empty_pair: bool = False) -> re.Pattern[bytes]:
    """``property_finder`` over bytes. With ``empty_pair`` it also finds each pair of an empty name and an
    empty value (a mark between messages' properties, record_batch.PROPERTIES_MARK) as ``(b"", b"")``."""
    pair = b"(" + _names(names) + b")" + _VALUE_B
    if empty_pair:
        pair = b"(?:" + NAME_VALUE_SEPARATOR_BYTES * 2 + b"|" + pair + b")"
    return re.compile(PROPERTY_SEPARATOR_BYTES + pair)


def property_name_finder_bytes(names: Iterable[str | bytes]) -> re.Pattern[bytes]:
    """``findall`` gives each of ``names`` found as a property name (the names alone)."""
    return re.compile(PROPERTY_SEPARATOR_BYTES + b"(" + _names(names) + b")" + NAME_VALUE_SEPARATOR_BYTES)


def property_run_pattern(prefix: bytes, names: Iterable[bytes]) -> re.Pattern[bytes]:
    """``prefix`` then exactly the pairs of ``names`` in that order, each ended by its separator; a group a
    value (the properties of one layout, record_batch.batch_layout)."""
    pairs = b"".join(re.escape(n) + _VALUE_B + PROPERTY_SEPARATOR_BYTES for n in names)
    return re.compile(re.escape(prefix) + pairs)
def inner_property_key_bytes(name: str) -> bytes:
    """How property ``name`` stands in encoded bytes after another property: the separator, the name and the
    name/value separator (its value follows)."""
    return PROPERTY_SEPARATOR_BYTES + name.encode() + NAME_VALUE_SEPARATOR_BYTES


def property_tail_finder_bytes(names: Iterable[str], end: bytes) -> re.Pattern[bytes]:
    """``findall`` gives the value of the first of ``names`` for each run of encoded properties that ends
    with exactly the pairs of ``names``, in that order and each after another property, right before
    ``end`` or at the end of the text."""
    first, *rest = names
    pattern = inner_property_key_bytes(first) + b"([^" + PROPERTY_SEPARATOR_BYTES + b"]*)"
    for name in rest:
        pattern += inner_property_key_bytes(name) + b"[^" + PROPERTY_SEPARATOR_BYTES + b"]*"
    return re.compile(pattern + PROPERTY_SEPARATOR_BYTES + b"(?=" + re.escape(end) + rb"|\Z)")


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
