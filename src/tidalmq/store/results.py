"""Requests, results and statuses of the store API (re-exported by ``message_store``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


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
    """Records already encoded by ``record.encode_record`` for one (topic, queue). Several records form
    a batch (SEND_BATCH_MESSAGE): they get consecutive queue offsets and are never split across files.
    The records are patched in place (queue offset, physical offset, store timestamp)."""

    topic: str
    queue_id: int
    records: list[bytearray]


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
