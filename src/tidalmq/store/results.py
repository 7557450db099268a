"""Requests, results and statuses of the store API (re-exported by ``message_store``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from tidalmq.common.record_batch import RecordBatch


class PutStatus(enum.Enum):
    """The statuses ``put_messages`` produces (a subset of RocketMQ's PutMessageStatus). A SYNC_FLUSH
    timeout is not one: it is reported by ``request_flush``'s callback, after the append."""

    PUT_OK = "PUT_OK"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class PutRequest:
    """Records already encoded by ``record.encode_record`` for one (topic, queue), or a ``RecordBatch``
    from ``record.encode_batch_records``. Several records form a batch (SEND_BATCH_MESSAGE): they get
    consecutive queue offsets and are never split across files. The records are patched in place
    (queue offset, physical offset, store timestamp)."""

    topic: str
    queue_id: int
    records: list[bytearray] | RecordBatch


@dataclass(slots=True)
class AppendResult:
    status: PutStatus
    wrote_offset: int = 0  # physical (CommitLog) offset of the first record
    wrote_bytes: int = 0
    msg_id: str = ""  # offset msgId; for a batch, the ids joined by "," as RocketMQ does
    queue_offset: int = 0  # of the first record
    store_timestamp: int = 0
    msg_num: int = 1


@dataclass(slots=True)
class GetMessageResult:
    status: GetStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    buffers: list[memoryview] = field(default_factory=list)
    message_count: int = 0
    buffer_total_size: int = 0
    queue_offsets: list[int] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    filter_message_count: int = 0


class QueueRange(NamedTuple):
    """Logical offsets of a ConsumeQueue: ``min_offset`` is the first readable entry, ``max_offset`` the
    next to be dispatched (both 0 for a queue the store does not have)."""

    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueueEntries:
    """Consecutive ConsumeQueue entries, copied out of the mapped file (so they stay valid after the
    file is deleted or unmapped). Entry ``i`` is logical offset ``start + i``; pre-blank entries (size
    ``BLANK_SIZE``) are included as they are stored. ``next_offset`` is where the next read starts: past
    these entries, or past the end of a missing file (roll-over), or ``start`` when nothing was readable."""

    start: int
    next_offset: int
    commit_log_offsets: np.ndarray  # int64
    sizes: np.ndarray  # int64
    tags_codes: np.ndarray  # int64; the deliver time for the schedule and timer topics

    def __len__(self) -> int:
        return len(self.commit_log_offsets)

    def rows(self) -> list[tuple[int, int, int]]:
        """(CommitLog offset, size, tag code) per entry, as Python ints."""
        return list(zip(self.commit_log_offsets.tolist(), self.sizes.tolist(), self.tags_codes.tolist(), strict=True))

    @staticmethod
    def empty(start: int, next_offset: int) -> QueueEntries:
        none = np.zeros(0, dtype=np.int64)
        return QueueEntries(start, next_offset, none, none, none)


class DispatchRequest(NamedTuple):
    """What reput needs from one CommitLog record (RocketMQ's DispatchRequest)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sysflag: int
    prepared_transaction_offset: int


@dataclass(slots=True)
class DispatchBatch:
    """What reput needs from a run of CommitLog records, a column per field and a row per record
    (RocketMQ's DispatchRequest, for many records at once)."""

    topic_names: list[str]  # topic_ids index this list
    topic_ids: np.ndarray
    queue_ids: np.ndarray
    commit_log_offsets: np.ndarray
    sizes: np.ndarray
    tags_codes: np.ndarray
    store_timestamps: np.ndarray
    queue_offsets: np.ndarray
    sysflags: np.ndarray
    prepared_offsets: np.ndarray
    keys: list[str | None]
    uniq_keys: list[str | None]
    # Each record's lite topic (__LITE_TOPIC), None for most; the whole column None when no record has one.
    lite_topics: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.commit_log_offsets)

    def rows(self) -> list[DispatchRequest]:
        """One DispatchRequest per record (for tools and tests)."""
        names = self.topic_names
        return [
            DispatchRequest(names[t], q, off, size, tag, ts, qoff, keys, uniq, flag, prep)
            for t, q, off, size, tag, ts, qoff, keys, uniq, flag, prep in zip(
                self.topic_ids.tolist(), self.queue_ids.tolist(), self.commit_log_offsets.tolist(),
                self.sizes.tolist(), self.tags_codes.tolist(), self.store_timestamps.tolist(),
                self.queue_offsets.tolist(), self.keys, self.uniq_keys, self.sysflags.tolist(),
                self.prepared_offsets.tolist(), strict=True)
        ]

    @staticmethod
    def empty(topic_names: list[str]) -> DispatchBatch:
        none = np.zeros(0, dtype=np.int64)
        return DispatchBatch(topic_names, keys=[], uniq_keys=[], lite_topics=None,
                             **dict.fromkeys(_ARRAY_FIELDS, none))

    @staticmethod
    def concat(parts: list[DispatchBatch]) -> DispatchBatch:
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return DispatchBatch.empty([])
        names = parts[-1].topic_names  # the name table only grows, so the last one covers all ids
        cols = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _ARRAY_FIELDS}
        keys = [k for p in parts for k in p.keys]
        uniq = [u for p in parts for u in p.uniq_keys]
        lite = None
        if any(p.lite_topics is not None for p in parts):
            lite = [x for p in parts for x in (p.lite_topics if p.lite_topics is not None else [None] * len(p))]
        return DispatchBatch(names, keys=keys, uniq_keys=uniq, lite_topics=lite, **cols)


_ARRAY_FIELDS = ("topic_ids", "queue_ids", "commit_log_offsets", "sizes", "tags_codes", "store_timestamps",
                 "queue_offsets", "sysflags", "prepared_offsets")
