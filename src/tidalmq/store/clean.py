"""Retention: CleanCommitLogService and CleanConsumeQueueService, run by one CleanService thread.

CommitLog files go when their last modification is older than ``file_reserved_time`` hours and the
current hour is listed in ``delete_when`` (``"04;05"``), or when the disk is fuller than
``disk_max_used_space_ratio``. Over ``disk_space_clean_forcibly_ratio`` unexpired files go too, but only
those every reading group has consumed, unless ``clean_file_forcibly_enable`` (then all, as RocketMQ);
when unconsumed files are all that could go, the store refuses writes instead (``DiskSpaceGuard``). The written file is never deleted. Then ConsumeQueue files wholly below the new
minimum physical offset go, each queue's minimum logical offset moves up, and the index drops files
below it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidalmq.store.disk_space import RATIO, UNCONSUMED
from tidalmq.store.flush import ServiceThread

if TYPE_CHECKING:
    from tidalmq.store.message_store import DefaultMessageStore

log = logging.getLogger("tidalmq.store")


def disk_partition_space_used_percent(path: str) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: (total - free) / total, -1 when unknown.

    "free" is the filesystem's unallocated space (Java's File.getFreeSpace, statvfs f_bfree), as
    RocketMQ measures it; blocks reserved for root or held back by the host are not counted as used.
    """
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    if st.f_blocks <= 0:
        return -1.0
    return (st.f_blocks - st.f_bfree) / st.f_blocks


def is_time_to_delete(delete_when: str, now_ms: int) -> bool:
    hour = time.localtime(now_ms / 1000).tm_hour
    for part in delete_when.split(";"):
        part = part.strip()
        if part.isdigit() and int(part) == hour:
            return True
    return False


class CleanCommitLogService:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.clean_immediately = False
        self.over_forcibly_ratio = False
        self.disk_usage: Callable[[str], float] = disk_partition_space_used_percent

    def _warning_ratio(self) -> float:
        return min(0.90, max(0.35, self.store.config.disk_space_warning_level_ratio / 100))

    def _forcibly_ratio(self) -> float:
        return min(0.85, max(0.30, self.store.config.disk_space_clean_forcibly_ratio / 100))

    def is_space_to_delete(self) -> bool:
        """Also maintains the store's "ratio" disk-full cause, which makes puts fail (SERVICE_NOT_AVAILABLE)."""
        cfg = self.store.config
        guard = self.store.disk_space
        self.clean_immediately = self.over_forcibly_ratio = False
        ratios = [self.disk_usage(path) for path in (cfg.commit_log_path, cfg.consume_queue_path)]
        worst = max(ratios)
        over_warning = worst > self._warning_ratio()
        if over_warning:
            guard.set(RATIO, f"disk used {worst:.2f} > diskSpaceWarningLevelRatio {self._warning_ratio():.2f}")
        else:
            guard.clear(RATIO)
        if over_warning or worst > self._forcibly_ratio():
            self.clean_immediately = self.over_forcibly_ratio = True
            return True
        guard.clear(UNCONSUMED)
        # An unknown usage (-1) counts as "delete what has expired", as in RocketMQ.
        return min(ratios) < 0 or worst > cfg.disk_max_used_space_ratio / 100

    def delete_expired_files(self, manual: bool = False) -> int:
        cfg = self.store.config
        time_up = is_time_to_delete(cfg.delete_when, self.store.clock())
        space_full = self.is_space_to_delete()
        if not (time_up or space_full or manual):
            return 0
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        # Over the forcible ratio without the operator's opt-in, unexpired files still go when every
        # group reading their topics has consumed past them; never one holding an unconsumed message.
        consumed_to: int | None = None
        holder = ""
        if self.clean_immediately and not cfg.clean_file_forcibly_enable:
            try:
                consumed_to, holder = self.store.consumed_commit_log_offset()
            except Exception:  # the broker's tables changed under us: keep everything this round
                log.exception("computing the consumed CommitLog offset failed")
                consumed_to, holder = self.store.commit_log.min_offset, "unknown"
        count = self.store.commit_log.delete_expired_file(
            cfg.file_reserved_time * 60 * 60 * 1000, cfg.delete_commit_log_files_interval,
            clean_at_once or consumed_to is not None, cfg.delete_file_batch_max, consumed_to)
        if self.over_forcibly_ratio and consumed_to is not None and count < cfg.delete_file_batch_max:
            if len(self.store.commit_log.mfq.files) > 1:
                # What is left before the written file is unconsumed: keep it, refuse new messages.
                self.store.disk_space.set(UNCONSUMED, f"over diskSpaceCleanForciblyRatio and the oldest CommitLog "
                                                      f"file holds unconsumed messages ({holder}); consume them, "
                                                      f"or set cleanFileForciblyEnable=true to delete them")
            else:
                self.store.disk_space.clear(UNCONSUMED)
        if count == 0 and space_full:
            log.warning("disk space will be full soon, but no file could be deleted")
        return count


class CleanConsumeQueueService:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.last_physical_min_offset = 0

    def delete_expired_files(self) -> int:
        min_phy = self.store.commit_log.min_offset
        if min_phy <= self.last_physical_min_offset:
            return 0
        self.last_physical_min_offset = min_phy
        deleted = 0
        for cq in list(self.store.consume_queues()):
            deleted += cq.delete_expired_file(min_phy)
        index = self.store.index_service
        if index is not None:
            try:
                index.delete_expired(min_phy)
            except Exception:
                log.exception("index retention failed")
        return deleted


class CleanService(ServiceThread):
    def __init__(self, run_once: Callable[[], object], interval_ms: int) -> None:
        super().__init__("CleanService")
        self.run_once = run_once
        self.interval_s = interval_ms / 1000

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self.interval_s)
            if self.stopped:
                break
            try:
                self.run_once()
            except Exception:
                log.exception("clean service failed")
