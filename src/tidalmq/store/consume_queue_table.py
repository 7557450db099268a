"""The store's table of ConsumeQueues (RocketMQ's consumeQueueTable in ConsumeQueueStore): every
(topic, queue id)'s ConsumeQueue, the lock that guards making and removing them, and the read API over
their entries that the broker's services use.

Lookups take no lock (a dict read); only making a queue (the reput's dispatch) and removing queues (topic
deletion) do.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable

import numpy as np

from tidalmq.common import naming as nm
from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import UnsafePathError, path_under
from tidalmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from tidalmq.store.results import DispatchBatch, QueueEntries, QueueRange

log = logging.getLogger("tidalmq.store")

# The ConsumeQueue file size of every LMQ: 8,192 entries (160 KiB), fixed (files of another size would not
# be read back). A lite topic costs one such file on disk at least.
LMQ_FILE_SIZE = 8192 * 20


class ConsumeQueueTable:
    """The ConsumeQueues under ``root``; a topic's files are ``file_size`` bytes (an LMQ's LMQ_FILE_SIZE)."""

    def __init__(self, root: str, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the table
    def file_size_of(self, topic: str) -> int:
        """The size of the topic's ConsumeQueue files: ``mappedFileSizeConsumeQueue``, but LMQ_FILE_SIZE for
        a lite topic's LMQ (there may be very many, most of them small)."""
        return LMQ_FILE_SIZE if topic.startswith(nm.LITE_QUEUE_PREFIX) else self.file_size

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, made (empty) when there is none; UnsafePathError for a topic that cannot be a directory."""
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self.root, self.file_size_of(topic))
                    self._queues[key] = cq
        return cq

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._queues

    def queues(self) -> list[ConsumeQueue]:
        """A copy of the queues (the table may change meanwhile)."""
        return list(self._queues.values())

    def max_offsets(self) -> dict[tuple[str, int], int]:
        """Each queue's max offset: the CommitLog's topic queue table after recovery."""
        return {key: cq.max_offset_in_queue for key, cq in self._queues.items()}

    def topics_and_queues(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in list(self._queues):
            out.setdefault(topic, []).append(qid)
        for qids in out.values():
            qids.sort()
        return out

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> bool:
        """Load every queue found under the root (False when one does not load)."""
        root = self.root
        try:
            topics = os.listdir(root)
        except FileNotFoundError:
            return True
        for topic in topics:
            if not nm.is_legal(nm.check_any_topic, topic):
                # Left on disk as it is (an operator may want it), but never followed nor made a queue.
                log.warning("ignoring %r in %s: not a legal topic name", topic, root)
                continue
            try:
                tdir = path_under(root, topic)
            except UnsafePathError as e:
                log.warning("ignoring %r in %s: %s", topic, root, e)
                continue
            if not os.path.isdir(tdir):
                continue
            for qid in os.listdir(tdir):
                if not qid.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(topic, int(qid), root, self.file_size_of(topic))
                if not cq.load():
                    return False
                self._queues[(topic, int(qid))] = cq
        return True

    def recover(self) -> None:
        for cq in self._queues.values():
            cq.recover()

    def truncate_dirty(self, offset: int, *, every: bool = False) -> None:
        """Drop the entries that point at or past CommitLog ``offset`` (``every``: visit every queue, also
        those whose last entry points below it)."""
        for cq in self._queues.values():
            if every or cq.max_physic_offset > offset:
                cq.truncate_dirty(offset)

    def init_min_offset(self, min_phy: int) -> None:
        for cq in self._queues.values():
            cq.init_min_offset(min_phy)

    def max_physic_offset(self, default: int) -> int:
        """The end of the CommitLog the queues point into (``default`` with no queue)."""
        return max((cq.max_physic_offset for cq in self._queues.values()), default=default)

    def flush(self, least_pages: int) -> None:
        for cq in self.queues():
            cq.flush(least_pages)

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()

    def destroy(self) -> None:
        """Delete every queue's files and forget them."""
        for cq in self._queues.values():
            cq.destroy()
        self._queues.clear()

    def delete_topics(self, names: Iterable[str]) -> list[tuple[str, int]]:
        """Delete the ConsumeQueues of these topics; the (topic, queue id) of each deleted."""
        names = set(names)
        with self._lock:
            doomed = [(k, cq) for k, cq in self._queues.items() if k[0] in names]
            for k, _ in doomed:
                del self._queues[k]
        for _, cq in doomed:
            with cq.write_lock:
                cq.destroy()
        for name in names:
            try:
                doomed_dir = path_under(self.root, name)
            except UnsafePathError:
                log.error("not deleting %r: the name is not a safe path under the store", name)
                continue
            if not os.path.islink(doomed_dir):
                shutil.rmtree(doomed_dir, ignore_errors=True)
        return [k for k, _ in doomed]

    def delete_expired_files(self, min_phy: int) -> int:
        """The files of every queue whose entries all point below CommitLog ``min_phy``; how many."""
        with self._lock:
            queues = list(self._queues.values())
        return sum(cq.delete_expired_file(min_phy) for cq in queues)

    def first_unqueued(self, batch: DispatchBatch, first: int) -> int | None:
        """The CommitLog offset of the first record of ``batch`` (from row ``first``) whose ConsumeQueue entry
        is missing or points elsewhere, or None. Recovery after a process crash re-dispatches from there."""
        tx = batch.sysflags[first:] & sf.TRANSACTION_TYPE_MASK
        queued = first + np.flatnonzero((tx == sf.TRANSACTION_NOT_TYPE) | (tx == sf.TRANSACTION_COMMIT_TYPE))
        if not len(queued):
            return None
        keys = (batch.topic_ids[queued] << 32) | (batch.queue_ids[queued] & 0xFFFFFFFF)
        earliest: int | None = None
        for key in np.unique(keys).tolist():
            idx = queued[keys == key]
            queue_id = key & 0xFFFFFFFF
            queue_id = queue_id - (1 << 32) if queue_id >= 1 << 31 else queue_id
            cq = self._queues.get((batch.topic_names[key >> 32], queue_id))
            phys = batch.commit_log_offsets[idx]
            n = 0 if cq is None else cq.count_matching(batch.queue_offsets[idx], phys)
            if n < len(idx):
                miss = int(phys[n])
                earliest = miss if earliest is None else min(earliest, miss)
        return earliest

    # ------------------------------------------------------------------ the read API for services
    def queue_range(self, topic: str, queue_id: int) -> QueueRange:
        cq = self._queues.get((topic, queue_id))
        return QueueRange(0, 0) if cq is None else QueueRange(cq.min_offset_in_queue, cq.max_offset_in_queue)

    def read_queue(self, topic: str, queue_id: int, offset: int, max_n: int) -> QueueEntries:
        """Up to ``max_n`` entries from logical ``offset`` (read from the queue's min offset when
        ``offset`` is below it), never past one ConsumeQueue file: loop on ``next_offset`` while it is
        below ``queue_range().max_offset`` and the read was not empty."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return QueueEntries.empty(offset, offset)
        start = max(offset, cq.min_offset_in_queue)
        arr = cq.entries(start, max_n) if max_n > 0 and start < cq.max_offset_in_queue else None
        if arr is None:
            # No file holds ``start`` (retention took it): the next read starts at the next file.
            nxt = cq.roll_next_file(start) if max_n > 0 and start < cq.max_offset_in_queue else start
            return QueueEntries.empty(start, nxt)
        out = QueueEntries(start, start + len(arr), arr["offset"].astype(np.int64), arr["size"].astype(np.int64),
                           arr["tag"].astype(np.int64))
        del arr  # the view of the mapped file; the result holds copies
        return out

    def queue_entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """(CommitLog offset, size, tag code) of one entry; None outside the queue's range."""
        cq = self._queues.get((topic, queue_id))
        return cq.entry(offset) if cq is not None else None

    def queue_offset_at_or_after(self, topic: str, queue_id: int, commit_log_offset: int) -> int:
        """The first logical offset whose entry points at or past ``commit_log_offset`` (the max offset
        when none does): entries of a queue follow CommitLog order, so a binary search finds it."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            if e is None or e[0] >= commit_log_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int, min_phy: int,
                       store_timestamp_at: Callable[[int], int]) -> int:
        """Logical offset of the first message stored at or after ``timestamp_ms``; the max offset when
        there is none. Binary search over the queue, reading store times with ``store_timestamp_at``;
        entries below CommitLog ``min_phy`` (their records gone) count as older."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            ts = -1
            if e is not None and e[1] != BLANK_SIZE and e[0] >= min_phy:
                ts = store_timestamp_at(e[0])
            if ts < 0 or ts < timestamp_ms:  # unreadable entries only exist at the head: treat as older
                lo = mid + 1
            else:
                hi = mid - 1
        return lo
