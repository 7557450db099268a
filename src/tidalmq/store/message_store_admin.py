"""Admin and runtime stats of ``DefaultMessageStore``: CommitLog bounds, topics and their queues, topic
deletion, and the figures of RocketMQ's getRuntimeInfo.

``MessageStoreAdmin`` is a base of ``DefaultMessageStore`` (store/message_store.py), which owns the
state it reads.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Iterable

from tidalmq.common.fileutil import UnsafePathError, path_under
from tidalmq.store.checkpoint import StoreCheckpoint
from tidalmq.store.clean import CleanCommitLogService
from tidalmq.store.commit_log import CommitLog
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.consume_queue import ConsumeQueue
from tidalmq.store.disk_space import DiskSpaceGuard
from tidalmq.store.reput import ReputMessageService

log = logging.getLogger("tidalmq.store")


class MessageStoreAdmin:
    """The admin part of ``DefaultMessageStore``: the attributes below are the store's."""

    config: MessageStoreConfig
    commit_log: CommitLog
    checkpoint: StoreCheckpoint | None
    clean_commit_log: CleanCommitLogService
    disk_space: DiskSpaceGuard
    reput: ReputMessageService
    _cqs: dict[tuple[str, int], ConsumeQueue]
    _cq_lock: threading.Lock
    _stats: dict[str, int]


    @property
    def disk_full(self) -> bool:
        """Writes are being refused for lack of space (see ``store.disk_space``)."""
        return self.disk_space.full

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    def flush_behind_bytes(self) -> int:
        """CommitLog bytes written but not flushed yet (rocketmq_storage_flush_behind_bytes)."""
        return max(0, self.commit_log.max_offset - self.commit_log.flushed_where)

    def earliest_message_time(self) -> int:
        """RocketMQ's getEarliestMessageTime: the store time of the CommitLog's first message, -1 if none."""
        try:
            return self.commit_log.store_timestamp_at(self.min_phy_offset)
        except (ValueError, OSError):  # its file went with a cleanup meanwhile
            return -1

    def page_cache_lock_time_ms(self) -> float:
        """How long the CommitLog's put lock has been held by the writer holding it now, 0 when free
        (RocketMQ's pageCacheLockTimeMills)."""
        return self.commit_log.lock_held_ms()

    def dispatch_behind_bytes(self) -> int:
        """CommitLog bytes not dispatched to the queues yet (rocketmq_storage_dispatch_behind_bytes)."""
        return self.reput.behind()

    @property
    def min_phy_offset(self) -> int:
        return max(self.commit_log.min_offset, 0)

    def topics_and_queues(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in list(self._cqs):
            out.setdefault(topic, []).append(qid)
        for qids in out.values():
            qids.sort()
        return out

    def clean_expired_consumer_queue(self, live_topics: Iterable[str]) -> int:
        """CLEAN_EXPIRED_CONSUMEQUEUE (DefaultMessageStore.cleanExpiredConsumerQueue): delete the ConsumeQueues
        of topics not in ``live_topics``, and the ConsumeQueue files of the others whose entries all point
        below the CommitLog's min offset. A live topic's queue is never removed whole (RocketMQ's is when
        all of it is expired): its offsets then carry on rather than restart at 0 under its consumers.
        Returns the queues and files removed."""
        live = set(live_topics)
        removed = self.delete_topics({t for t in self.topics_and_queues() if t not in live})
        min_phy = self.commit_log.min_offset
        with self._cq_lock:
            queues = list(self._cqs.values())
        for cq in queues:
            removed += cq.delete_expired_file(min_phy)
        return removed

    def delete_topics(self, names: Iterable[str]) -> int:
        """Delete the ConsumeQueues of these topics (the CommitLog keeps its records until retention)."""
        names = set(names)
        count = 0
        with self._cq_lock:
            doomed = [(k, cq) for k, cq in self._cqs.items() if k[0] in names]
            for k, _ in doomed:
                del self._cqs[k]
                self.commit_log.topic_queue_table.pop(k, None)
        for _, cq in doomed:
            with cq.write_lock:
                cq.destroy()
            count += 1
        for name in names:
            try:
                doomed_dir = path_under(self.config.consume_queue_path, name)
            except UnsafePathError:
                log.error("not deleting %r: the name is not a safe path under the store", name)
                continue
            if not os.path.islink(doomed_dir):
                shutil.rmtree(doomed_dir, ignore_errors=True)
        return count

    def runtime_info(self) -> dict[str, str]:
        cfg = self.config
        info = {k: str(v) for k, v in self._stats.items()}
        info.update({
            "commitLogMinOffset": str(self.min_phy_offset),
            "commitLogMaxOffset": str(self.max_phy_offset),
            "commitLogFlushedOffset": str(self.commit_log.flushed_where),
            "commitLogCorruptRecords": str(self.commit_log.corrupt_records),
            "dispatchBehindBytes": str(self.reput.behind()),
            "commitLogDiskRatio": str(self.clean_commit_log.disk_usage(cfg.commit_log_path)),
            "consumeQueueDiskRatio": str(self.clean_commit_log.disk_usage(cfg.consume_queue_path)),
            "diskFull": str(self.disk_full).lower(),
            "diskFullReason": self.disk_space.reason(),
            "flushDiskType": cfg.flush_disk_type,
        })
        cp = self.checkpoint
        if cp is not None:
            info["physicMsgTimestamp"] = str(cp.physic_msg_timestamp)
            info["logicsMsgTimestamp"] = str(cp.logics_msg_timestamp)
        return info
