"""The CommitLog dispatchers (RocketMQ's CommitLogDispatcherBuildConsumeQueue and
CommitLogDispatcherBuildIndex): what the reput does with each round of records it reads.

``CommitLogDispatcher`` writes into the store's ConsumeQueueTable and index; it owns the cache of the LMQ
names of lite topics.
"""

from __future__ import annotations

import logging

import numpy as np

from tidalmq.common import naming as nm
from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import DiskFullError, UnsafePathError
from tidalmq.common.message import KEY_SEPARATOR
from tidalmq.store.consume_queue_table import ConsumeQueueTable
from tidalmq.store.disk_space import CONSUME_QUEUE, INDEX, DiskSpaceGuard
from tidalmq.store.index_service import IndexServiceLike
from tidalmq.store.results import DispatchBatch

log = logging.getLogger("tidalmq.store")
LMQ_NAMES_MAX = 65536


def _may_have_lite_queues(topic: str) -> bool:
    """Records of system topics (a timer or schedule topic holding a message until it is due, half
    messages, revive logs), and of retry and dead-letter topics, keep their ``__LITE_TOPIC`` for when
    they come back to their topic, but are queued in no LMQ."""
    return not (nm.is_system_topic(topic) or topic == nm.SCHEDULE_TOPIC
                or topic.startswith((nm.RETRY_GROUP_TOPIC_PREFIX, nm.DLQ_GROUP_TOPIC_PREFIX)))


class CommitLogDispatcher:
    """Builds the ConsumeQueues (``queues``) and the index (``index``, None without one) from each round
    of records; a full disk is told to ``disk_space``."""

    def __init__(self, queues: ConsumeQueueTable, index: IndexServiceLike | None, disk_space: DiskSpaceGuard) -> None:
        self.queues = queues
        self.index = index
        self.disk_space = disk_space
        self._lmq_names: dict[tuple[str, str], str | None] = {}  # (topic, lite topic) -> its LMQ; reput's alone

    def dispatch(self, batch: DispatchBatch) -> dict[tuple[str, int], int]:
        """CommitLogDispatcherBuildConsumeQueue + CommitLogDispatcherBuildIndex for one round."""
        tx = batch.sysflags & sf.TRANSACTION_TYPE_MASK
        names = batch.topic_names
        touched: dict[tuple[str, int], int] = {}
        in_queue = np.flatnonzero((tx == sf.TRANSACTION_NOT_TYPE) | (tx == sf.TRANSACTION_COMMIT_TYPE))
        if batch.lite_topics is not None and len(in_queue):
            # Before the topics' own queues: recovery after a crash re-dispatches from the first record
            # missing from its topic's queue, and the lite queues skip what they already hold.
            self._dispatch_lite(batch, in_queue, touched)
        if len(in_queue):
            # One group per (topic, queue), CommitLog order kept inside each.
            group_keys = (batch.topic_ids[in_queue] << 32) | (batch.queue_ids[in_queue] & 0xFFFFFFFF)
            if (group_keys == group_keys[0]).all():
                groups = [(int(group_keys[0]), in_queue)]
            else:
                order = np.argsort(group_keys, kind="stable")
                sorted_keys = group_keys[order]
                cuts = (np.flatnonzero(np.diff(sorted_keys)) + 1).tolist()
                groups = [(int(sorted_keys[a]), in_queue[order[a:b]])
                          for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
            for key, idx in groups:
                queue_id = key & 0xFFFFFFFF
                if queue_id >= 1 << 31:
                    queue_id -= 1 << 32
                topic = names[key >> 32]
                try:
                    cq = self.queues.find_or_create(topic, queue_id)
                except UnsafePathError:
                    # A record whose topic cannot be a directory (written before the naming rules, or
                    # past them): it stays in the CommitLog, readable by offset, but is queued nowhere.
                    log.error("record(s) of topic %r queue %d not queued: the name is not a safe path", topic, queue_id)
                    continue
                try:
                    touched[(topic, queue_id)] = cq.put_entries(batch.queue_offsets[idx], batch.commit_log_offsets[idx],
                                                                batch.sizes[idx], batch.tags_codes[idx])
                except DiskFullError as e:
                    # The round is not done: the reput retries it (entries already put are skipped then).
                    self.disk_space.set(CONSUME_QUEUE, f"{topic}-{queue_id}: {e}")
                    raise
        self.disk_space.clear(CONSUME_QUEUE)
        index = self.index
        if index is not None:
            try:
                self._build_index(index, batch, tx == sf.TRANSACTION_ROLLBACK_TYPE)
                self.disk_space.clear(INDEX)
            except DiskFullError as e:
                # The index is a lookup aid: this round's keys are not indexed, the messages are queued.
                self.disk_space.set(INDEX, str(e))
            except Exception:
                log.exception("build index failed")
        return touched

    def _dispatch_lite(self, batch: DispatchBatch, in_queue: np.ndarray, touched: dict[tuple[str, int], int]) -> None:
        """RocketMQ's multi-dispatch for lite topics: a record carrying ``__LITE_TOPIC`` gets a second
        ConsumeQueue entry, in queue 0 of its lite topic's LMQ ``%LMQ%$<topic>$<lite topic>``. The LMQ's
        offsets are its own, given here in CommitLog order. A lite name the naming rules refuse queues
        nothing (the broker refuses such sends; this guards records from elsewhere), nor does a record
        of a system, retry or dead-letter topic."""
        lite = batch.lite_topics
        assert lite is not None
        names = batch.topic_names
        topic_ids = batch.topic_ids
        by_queue: dict[tuple[int, str], list[int]] = {}
        for i in in_queue.tolist():
            child = lite[i]
            if child is not None:
                by_queue.setdefault((int(topic_ids[i]), child), []).append(i)
        for (tid, child), rows in by_queue.items():
            lmq = self._lmq_name(names[tid], child, int(batch.commit_log_offsets[rows[0]]))
            if lmq is None:
                continue
            idx = np.array(rows, dtype=np.int64)
            try:
                cq = self.queues.find_or_create(lmq, 0)
            except UnsafePathError:
                log.error("lite queue %r not queued: the name is not a safe path", lmq)
                continue
            phys, sizes = batch.commit_log_offsets[idx], batch.sizes[idx]
            new = phys + sizes > cq.max_physic_offset  # a re-dispatch after recovery: skip what is there
            if not new.all():
                if not new.any():
                    continue
                idx, phys, sizes = idx[new], phys[new], sizes[new]
            offsets = cq.max_offset_in_queue + np.arange(len(idx), dtype=np.int64)
            try:
                touched[(lmq, 0)] = cq.put_entries(offsets, phys, sizes, batch.tags_codes[idx])
            except DiskFullError as e:
                self.disk_space.set(CONSUME_QUEUE, f"{lmq}-0: {e}")
                raise

    def _lmq_name(self, parent: str, child: str, at: int) -> str | None:
        """The LMQ of (topic, lite topic), None when there is none (remembered: few pairs recur)."""
        key = (parent, child)
        cache = self._lmq_names
        if key in cache:
            return cache[key]
        lmq: str | None = None
        if _may_have_lite_queues(parent):
            try:
                lmq = nm.lite_queue(parent, child)
            except nm.NameError_:
                log.error("record at %d: lite topic %r of %r is not a legal name; not queued in an LMQ",
                          at, child[:80], parent)
        if len(cache) >= LMQ_NAMES_MAX:
            cache.clear()
        cache[key] = lmq
        return lmq

    @staticmethod
    def _build_index(index: IndexServiceLike, batch: DispatchBatch, rolled_back: np.ndarray) -> None:
        """CommitLogDispatcherBuildIndex: KEYS and UNIQ_KEY of every record but rolled-back half messages."""
        names = batch.topic_names
        keys = [[k for k in text.split(KEY_SEPARATOR) if k] if text else None for text in batch.keys]
        uniqs = batch.uniq_keys
        if not rolled_back.any() and None not in uniqs:  # the usual round: every record has a UNIQ_KEY
            index.build_index_columns([names[t] for t in batch.topic_ids.tolist()], keys, uniqs,
                                      batch.commit_log_offsets, batch.store_timestamps)
            return
        offsets = batch.commit_log_offsets.tolist()
        times = batch.store_timestamps.tolist()
        items = [(names[t], k, u, offsets[i], times[i])
                 for i, (t, k, u, rb) in enumerate(zip(batch.topic_ids.tolist(), keys, uniqs, rolled_back.tolist(),
                                                       strict=True))
                 if (k or u) and not rb]
        if items:
            index.build_index_batch(items)
