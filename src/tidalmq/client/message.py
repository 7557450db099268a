"""The client's message model: what a producer sends and what a consumer receives."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

from tidalmq.client.errors import ValidationError
from tidalmq.common import message as mc
from tidalmq.common.record import RecordView

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker; ordered as RocketMQ orders them (topic, broker, queue id)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


class Message:
    """A message to send. ``body`` is bytes (a ``str`` is encoded as UTF-8).

    Tags, keys and user properties travel as message properties; so do the scheduling settings:
    ``delay_level`` (RocketMQ 4 delay levels, 1..18 by default), ``deliver_time_ms`` (absolute epoch
    milliseconds, RocketMQ 5's ``TIMER_DELIVER_MS``), ``delay_ms`` / ``delay_sec`` (relative, RocketMQ 5's
    ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC``). Only one of them should be set.

    ``message_group`` makes a FIFO message (RocketMQ 5): it travels as ``__SHARDINGKEY``, and the producer
    sends every message of one group to the same queue (docs/message-types.md).

    ``priority`` (>= 0) makes a priority message (RocketMQ 5.4's Message.setPriority, ``_SYS_MSG_PRIORITY_``):
    the broker stores it in the queue of its priority and pops a PRIORITY topic highest priority first.
    """

    __slots__ = ("topic", "body", "flag", "properties")

    def __init__(self, topic: str, body: bytes | bytearray | memoryview | str = b"", *, tags: str | None = None,
                 keys: str | Iterable[str] | None = None, properties: dict[str, str] | None = None, flag: int = 0,
                 delay_level: int | None = None, deliver_time_ms: int | None = None, delay_ms: int | None = None,
                 delay_sec: int | None = None, wait_store_msg_ok: bool = True, message_group: str | None = None,
                 priority: int | None = None) -> None:
        self.topic = topic
        self.body: bytes = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = {}
        if properties:
            for k, v in properties.items():
                self.properties[k] = str(v)
        if tags is not None:
            self.tags = tags
        if keys is not None:
            self.keys = [keys] if isinstance(keys, str) else list(keys)
        if delay_level is not None:
            self.delay_level = delay_level
        if deliver_time_ms is not None:
            self.deliver_time_ms = deliver_time_ms
        if delay_ms is not None:
            self.properties[mc.TIMER_DELAY_MS] = str(int(delay_ms))
        if delay_sec is not None:
            self.properties[mc.TIMER_DELAY_SEC] = str(int(delay_sec))
        if not wait_store_msg_ok:
            self.properties[mc.WAIT_STORE_MSG_OK] = "false"
        if message_group is not None:
            self.message_group = message_group
        if priority is not None:
            self.priority = priority

    # properties with meaning ------------------------------------------------------------------
    @property
    def tags(self) -> str | None:
        return self.properties.get(mc.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value is None:
            self.properties.pop(mc.TAGS, None)
        else:
            self.properties[mc.TAGS] = value

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(mc.KEYS)
        return [k for k in raw.split(mc.KEY_SEPARATOR) if k] if raw else []

    @keys.setter
    def keys(self, value: Iterable[str]) -> None:
        joined = mc.KEY_SEPARATOR.join(k for k in value if k)
        if joined:
            self.properties[mc.KEYS] = joined
        else:
            self.properties.pop(mc.KEYS, None)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(mc.DELAY, "0") or 0)

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        self.properties[mc.DELAY] = str(int(level))

    @property
    def deliver_time_ms(self) -> int | None:
        v = self.properties.get(mc.TIMER_DELIVER_MS)
        return int(v) if v else None

    @deliver_time_ms.setter
    def deliver_time_ms(self, ms: int) -> None:
        self.properties[mc.TIMER_DELIVER_MS] = str(int(ms))

    @property
    def message_group(self) -> str | None:
        """RocketMQ 5's message group of a FIFO message (the ``__SHARDINGKEY`` property the proxy maps it to)."""
        return self.properties.get(mc.SHARDING_KEY)

    @message_group.setter
    def message_group(self, group: str) -> None:
        if not group or not group.strip():
            raise ValidationError("the message group must not be blank")
        error = mc.property_text_error(mc.SHARDING_KEY, group)
        if error is not None:
            raise ValidationError(error)
        self.properties[mc.SHARDING_KEY] = group

    @property
    def priority(self) -> int:
        """Message.getPriority: the priority, -1 when there is none."""
        v = self.properties.get(mc.PRIORITY, "")
        return int(v) if v.isascii() and v.isdigit() else -1

    @priority.setter
    def priority(self, priority: int) -> None:
        if priority < 0:
            raise ValidationError("The priority must be greater than or equal to 0")
        self.properties[mc.PRIORITY] = str(int(priority))

    @property
    def uniq_key(self) -> str | None:
        """The client message id (``UNIQ_KEY``), set by the producer when it sends."""
        return self.properties.get(mc.UNIQ_KEY)

    def put_user_property(self, name: str, value: str) -> None:
        """A user property; system names (RocketMQ's MessageConst.STRING_HASH_SET) are refused, as
        Message.putUserProperty does; so are names and values holding the properties' separators."""
        value = str(value)
        if name in mc.SYSTEM_PROPERTIES:
            raise ValidationError(f"The Property<{name}> is used by system, input another please")
        if not name or not name.strip() or not value.strip():
            raise ValidationError("The name or value of property can not be null or blank string!")
        error = mc.property_text_error(name, value)
        if error is not None:
            raise ValidationError(error)
        self.properties[name] = value

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, body={len(self.body)} bytes, properties={self.properties!r})"


_LAZY = object()  # a field not decoded yet: it is read from the record view on first access


class MessageExt:
    """A received message (RocketMQ's MessageExt). ``msg_id`` is the client id (``UNIQ_KEY``) when the
    producer set one, else the offset id; ``offset_msg_id`` is always the broker's offset id.

    A message decoded from a pull (``from_view``) keeps its record view and turns the hosts and the
    offset id into text only when they are read: a consumer pays for what its listener looks at."""

    __slots__ = ("topic", "body", "queue_id", "queue_offset", "commit_log_offset", "properties", "flag", "sysflag",
                 "born_timestamp", "_born_host", "store_timestamp", "_store_host", "reconsume_times",
                 "_offset_msg_id", "broker_name", "store_size", "prepared_transaction_offset", "_view")
    FIELDS: ClassVar[tuple[str, ...]] = (
        "topic", "body", "queue_id", "queue_offset", "commit_log_offset", "properties", "flag", "sysflag",
        "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times", "offset_msg_id",
        "broker_name", "store_size", "prepared_transaction_offset")
    _born_host: tuple[str, int] | object
    _store_host: tuple[str, int] | object
    _offset_msg_id: str | object

    def __init__(self, topic: str, body: bytes, queue_id: int, queue_offset: int, commit_log_offset: int,
                 properties: dict[str, str], flag: int = 0, sysflag: int = 0, born_timestamp: int = 0,
                 born_host: tuple[str, int] = ("", 0), store_timestamp: int = 0,
                 store_host: tuple[str, int] = ("", 0), reconsume_times: int = 0, offset_msg_id: str = "",
                 broker_name: str = "", store_size: int = 0, prepared_transaction_offset: int = 0) -> None:
        self.topic, self.body, self.queue_id, self.queue_offset = topic, body, queue_id, queue_offset
        self.commit_log_offset, self.properties, self.flag, self.sysflag = commit_log_offset, properties, flag, sysflag
        self.born_timestamp, self._born_host, self.store_timestamp = born_timestamp, born_host, store_timestamp
        self._store_host, self.reconsume_times, self._offset_msg_id = store_host, reconsume_times, offset_msg_id
        self.broker_name, self.store_size = broker_name, store_size
        self.prepared_transaction_offset = prepared_transaction_offset
        self._view: RecordView | None = None

    @classmethod
    def from_view(cls, v: RecordView, body: bytes, broker_name: str = "") -> MessageExt:
        """The message of a stored record; ``body`` is its (uncompressed) body. Raises ``RecordError``
        when the topic or properties do not decode. The hosts and the offset id are decoded lazily."""
        m = _new(cls)
        m.topic, m.body, m.queue_id, m.queue_offset = v.topic, body, v.queue_id, v.queue_offset
        m.commit_log_offset, m.properties, m.flag, m.sysflag = v.physical_offset, v.properties, v.flag, v.sysflag
        m.born_timestamp, m.store_timestamp, m.reconsume_times = v.born_timestamp, v.store_timestamp, v.reconsume_times
        m._born_host = m._store_host = m._offset_msg_id = _LAZY
        m.broker_name, m.store_size, m.prepared_transaction_offset = broker_name, v.total, v.prepared_transaction_offset
        m._view = v
        return m

    @property
    def born_host(self) -> tuple[str, int]:
        h = self._born_host
        if h is _LAZY:
            assert self._view is not None
            h = self._born_host = self._view.born_host
        return h  # type: ignore[return-value]

    @born_host.setter
    def born_host(self, value: tuple[str, int]) -> None:
        self._born_host = value

    @property
    def store_host(self) -> tuple[str, int]:
        h = self._store_host
        if h is _LAZY:
            assert self._view is not None
            h = self._store_host = self._view.store_host
        return h  # type: ignore[return-value]

    @store_host.setter
    def store_host(self, value: tuple[str, int]) -> None:
        self._store_host = value

    @property
    def offset_msg_id(self) -> str:
        i = self._offset_msg_id
        if i is _LAZY:
            assert self._view is not None
            i = self._offset_msg_id = self._view.msg_id
        return i  # type: ignore[return-value]

    @offset_msg_id.setter
    def offset_msg_id(self, value: str) -> None:
        self._offset_msg_id = value

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, f) for f in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaces

    @property
    def msg_id(self) -> str:
        return self.properties.get(mc.UNIQ_KEY) or self.offset_msg_id

    @property
    def tags(self) -> str | None:
        return self.properties.get(mc.TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(mc.KEYS)
        return [k for k in raw.split(mc.KEY_SEPARATOR) if k] if raw else []

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def __repr__(self) -> str:
        return (f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"msg_id={self.msg_id!r}, body={len(self.body)} bytes)")


_new = object.__new__


class SendStatus(str, Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class SendResult:
    """What the broker answered: ``msg_id`` is the client id (UNIQ_KEY; for a batch, comma-separated),
    ``offset_msg_id`` the broker's offset id."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str = "DefaultRegion"
    deliver_time_ms: int | None = None  # the scheduled time of a timer message (absolute), for cancel
    recall_handle: str | None = None  # a timer message's handle for Producer.recall (RocketMQ 5.3)

    @property
    def ok(self) -> bool:
        return self.status == SendStatus.SEND_OK


class PullStatus(str, Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


class ConsumeResult(str, Enum):
    """What a listener returns. ``None`` counts as SUCCESS; an exception as RECONSUME_LATER (concurrent)
    or SUSPEND_CURRENT_QUEUE_A_MOMENT (orderly)."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class MessageModel(str, Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(str, Enum):
    """Where a group without a committed offset starts (RocketMQ's ConsumeFromWhere)."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class TransactionState(str, Enum):
    """A local transaction's outcome (LocalTransactionState)."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"


@dataclass(slots=True)
class TransactionSendResult:
    send_result: SendResult
    local_state: TransactionState

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id

    @property
    def transaction_id(self) -> str | None:
        return self.send_result.transaction_id


def now_ms() -> int:
    return int(time.time() * 1000)
