"""MessageStoreConfig: RocketMQ's store keys in snake_case, with RocketMQ's defaults.

``common.config.apply_properties`` maps ``broker.conf`` keys (``mappedFileSizeCommitLog``) onto these
fields (``mapped_file_size_commit_log``), so field names must stay RocketMQ's names exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tidalmq.common.config import JAVA_INT_MAX, Check, ConfigError, check_fields, in_range, one_of
from tidalmq.common.fileutil import path_under

CQ_STORE_UNIT_SIZE = 20
TIMER_SLOT_MS = 1000  # the timer wheel's slot; its precision must divide it


# What a record may add to its body's maxMessageSize: header, topic and properties.
RECORD_OVERHEAD_ALLOWANCE = 64 * 1024


@dataclass
class MessageStoreConfig:
    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), ".tidalmq", "store")
    # Empty means "<root>/commitlog" (RocketMQ derives it the same way).
    store_path_commit_log: str = ""

    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300000 * CQ_STORE_UNIT_SIZE

    flush_disk_type: str = "ASYNC_FLUSH"  # or SYNC_FLUSH
    flush_interval_commit_log: int = 500  # ms, ASYNC_FLUSH period
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 1000 * 10  # ms: flush whatever is dirty at least this often
    flush_interval_consume_queue: int = 1000  # ms
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 1000 * 60  # ms; the checkpoint is advanced on these
    sync_flush_timeout: int = 1000 * 5  # ms
    # The CommitLog's put lock held this long by one writer means the store is stalled ("OS page cache
    # busy"): client sends queued behind it are answered SYSTEM_BUSY (docs/broker.md "Flow control").
    os_page_cache_busy_time_out_mills: int = 1000

    delete_when: str = "04"
    file_reserved_time: int = 72  # hours
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    # RocketMQ defaults to true (over diskSpaceCleanForciblyRatio unexpired files go, consumed or not);
    # ours keeps files holding unconsumed messages and refuses writes instead (docs/broker.md).
    clean_file_forcibly_enable: bool = False
    clean_resource_interval: int = 10000  # ms
    delete_commit_log_files_interval: int = 100  # ms between two deleted files
    delete_file_batch_max: int = 10

    max_message_size: int = 1024 * 1024 * 4
    check_crc_on_recover: bool = True
    # Not a RocketMQ 4.x key (it checks CRCs only on recovery): verify each record before serving it
    # (pull, query, view by id); see docs/broker.md.
    check_crc_on_read: bool = False
    # RocketMQ 5's enabledAppendPropCRC (default false there): every record ends its properties with a CRC of
    # the whole record (``__CRC32#``), so damage to the header, topic or properties is found, not only to the
    # body. On here: the README's "corrupt records are never served" rests on it (docs/broker.md).
    enabled_append_prop_crc: bool = True
    # RocketMQ 5's forceVerifyPropCRC: recovery fails a record that lacks the record CRC (written by a broker
    # without enabledAppendPropCRC); off, such a record is checked by its body CRC only.
    force_verify_prop_crc: bool = False
    # Not a RocketMQ key: verify the record CRC of every record that carries one before serving it (one CRC
    # pass over each record read); a record that fails it is skipped, never served.
    check_prop_crc_on_read: bool = True

    message_index_enable: bool = True
    message_index_safe: bool = False
    max_hash_slot_num: int = 5000000
    max_index_num: int = 5000000 * 4
    max_msgs_num_batch: int = 64

    max_filter_message_size: int = 16000
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 1024 * 64
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40

    # Used to compute the ConsumeQueue tag code (deliver time) of SCHEDULE_TOPIC_XXXX records.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

    # RocketMQ 5's timer (arbitrary delivery time, rmq_sys_wheel_timer): see docs/scheduled-delivery.md.
    timer_wheel_enable: bool = True
    # Release tick; must divide 1000 and be >= 10. RocketMQ 5 defaults to 1000; 100 keeps lateness
    # under a tenth of a second out of the box at the cost of ten wake-ups a second when busy.
    timer_precision_ms: int = 100
    timer_max_delay_sec: int = 400 * 86400  # RocketMQ's default is 3 days; ours 400
    # Not RocketMQ's: the timer service in a process of its own, following the CommitLog read-only and
    # handing its deliveries back to the broker (docs/multicore.md); false keeps it a thread of the broker.
    timer_process_enable: bool = True

    @property
    def commit_log_path(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_path(self) -> str:
        return path_under(self.store_path_root_dir, "consumequeue")

    @property
    def index_path(self) -> str:
        return path_under(self.store_path_root_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return path_under(self.store_path_root_dir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return path_under(self.store_path_root_dir, "abort")

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    def validate(self) -> None:
        """Refuse values the store cannot run with (``ConfigError`` names the key and what is allowed);
        called before anything binds a port or opens a file."""
        check_fields(self, _CHECKS)
        largest = self.max_message_size + RECORD_OVERHEAD_ALLOWANCE
        if self.mapped_file_size_commit_log < largest:
            # a message of maxMessageSize would fit no CommitLog file: refused at put for ever
            raise ConfigError(
                f"mappedFileSizeCommitLog={self.mapped_file_size_commit_log}: smaller than the largest record, "
                f"maxMessageSize={self.max_message_size} + {RECORD_OVERHEAD_ALLOWANCE} bytes of header, topic and "
                f"properties ({largest}); raise it or lower maxMessageSize")
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as e:
            raise ConfigError(f"messageDelayLevel={self.message_delay_level!r}: {e}") from None
        for part in self.delete_when.split(";"):
            if part.strip() and not (part.strip().isdigit() and 0 <= int(part) <= 23):
                raise ConfigError(f"deleteWhen={self.delete_when!r}: hours 00..23 separated by ';'")


def _multiple_of(unit: int) -> Check:
    return lambda v: None if v > 0 and v % unit == 0 else f"must be a positive multiple of {unit}"


def _timer_precision(v: int) -> str | None:
    return None if v >= 1 and TIMER_SLOT_MS % v == 0 else f"must be >= 1 and divide {TIMER_SLOT_MS}"


_POSITIVE_INT = in_range(1, JAVA_INT_MAX)
_CHECKS: dict[str, Check] = {
    "flush_disk_type": one_of("ASYNC_FLUSH", "SYNC_FLUSH"),
    "mapped_file_size_commit_log": in_range(4096, JAVA_INT_MAX),
    "mapped_file_size_consume_queue": _multiple_of(CQ_STORE_UNIT_SIZE),
    "flush_interval_commit_log": _POSITIVE_INT,
    "flush_interval_consume_queue": _POSITIVE_INT,
    "sync_flush_timeout": _POSITIVE_INT,
    "os_page_cache_busy_time_out_mills": _POSITIVE_INT,
    "file_reserved_time": in_range(0, JAVA_INT_MAX),
    "disk_max_used_space_ratio": in_range(1, 100),
    "disk_space_warning_level_ratio": in_range(1, 100),
    "disk_space_clean_forcibly_ratio": in_range(1, 100),
    "max_message_size": _POSITIVE_INT,
    "max_hash_slot_num": _POSITIVE_INT,
    "max_index_num": _POSITIVE_INT,
    "timer_precision_ms": _timer_precision,
    "timer_max_delay_sec": _POSITIVE_INT,
}


# A level's delay fits a Java int of milliseconds (~24.8 days; RocketMQ's default levels end at 2 h). Each
# level is a queue of SCHEDULE_TOPIC_XXXX with its own ConsumeQueue files: the count is bounded too.
MAX_DELAY_LEVEL_MS = JAVA_INT_MAX
MAX_DELAY_LEVELS = 1000
_UNITS_MS = {"s": 1000, "m": 60 * 1000, "h": 60 * 60 * 1000, "d": 24 * 60 * 60 * 1000}


def parse_delay_levels(text: str) -> dict[int, int]:
    """``"1s 5s 1m"`` -> {1: 1000, 2: 5000, 3: 60000} (level numbers start at 1, as RocketMQ's)."""
    out: dict[int, int] = {}
    for i, item in enumerate(text.split(), start=1):
        unit = item[-1]
        digits = item[:-1]
        if unit not in _UNITS_MS or not (digits.isascii() and digits.isdigit()):
            raise ValueError(f"bad delay level {item!r} in {text!r}")
        ms = int(digits) * _UNITS_MS[unit]
        if not 0 < ms <= MAX_DELAY_LEVEL_MS:
            raise ValueError(f"delay level {item!r} must be more than 0 and at most {MAX_DELAY_LEVEL_MS} ms")
        out[i] = ms
    if not out:
        raise ValueError("no delay level given")
    if len(out) > MAX_DELAY_LEVELS:
        raise ValueError(f"{len(out)} delay levels, at most {MAX_DELAY_LEVELS}")
    return out
