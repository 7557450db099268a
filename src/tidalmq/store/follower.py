"""StoreFollower: a read-only view of a broker's store from another process (the schedule process,
docs/multicore.md).

It maps the CommitLog files and the ConsumeQueues it is told about READ-ONLY, MAP_SHARED: the page cache
shows it the broker's writes as they land, no copy, no second reader of the disk. It never writes a file
of the store, and it reads no further than the broker has *published* (``publish``): the ConsumeQueue
entries reput has dispatched, which point only at whole records, so it never sees a half-written entry.
What needs the broker's own state — appending (``put_messages``), the index (``query_message``),
waiting for reput — goes to an ``Upstream`` (the channel to the broker).

It offers the part of DefaultMessageStore's read API the timer service uses, with the same meanings.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from tidalmq.common.fileutil import path_under
from tidalmq.store.config import CQ_STORE_UNIT_SIZE
from tidalmq.store.consume_queue import CQ_DTYPE
from tidalmq.store.mapped_file import offset_to_file_name
from tidalmq.store.message_reader import OffsetLookup
from tidalmq.store.results import AppendResult, PutRequest, QueueEntries, QueueRange

log = logging.getLogger("tidalmq.store")

_I = struct.Struct(">i")


class Upstream(Protocol):
    """What only the broker can do."""

    def put_messages(self, requests: Sequence[PutRequest]) -> list[AppendResult]: ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[bytes]: ...

    def wait_reput(self, timeout: float) -> bool: ...


class ReadOnlyFiles:
    """The fixed-size files of one MappedFileQueue directory (named by start offset), each mapped
    read-only the first time it is read."""

    def __init__(self, path: str, file_size: int) -> None:
        self.path = path
        self.file_size = file_size
        self._maps: dict[int, mmap.mmap] = {}

    def view(self, offset: int, size: int) -> memoryview | None:
        """``size`` bytes at stream ``offset`` (within one file); None if no file holds them (yet)."""
        start = offset - offset % self.file_size
        pos = offset - start
        if size <= 0 or pos + size > self.file_size:
            return None
        mm = self._maps.get(start)
        if mm is None or len(mm) < pos + size:
            mm = self._map(start, pos + size)
            if mm is None:
                return None
        return memoryview(mm)[pos : pos + size]

    def _map(self, start: int, need: int) -> mmap.mmap | None:
        try:
            fd = os.open(os.path.join(self.path, offset_to_file_name(start)), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            # The broker reserves a file's full size before it writes into it; map what is there now
            # (a read past the end of a file would be a SIGBUS).
            length = min(os.fstat(fd).st_size, self.file_size)
            if length < need:
                return None
            mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self._drop(start)
        self._maps[start] = mm
        return mm

    def forget_below(self, offset: int) -> None:
        """Unmap the files wholly below ``offset`` (retention deleted them: a mapping would keep their
        blocks allocated)."""
        for start in [s for s in self._maps if s + self.file_size <= offset]:
            self._drop(start)

    def _drop(self, start: int) -> None:
        mm = self._maps.pop(start, None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # a slice is still alive: the collector unmaps it once the slice is gone

    def close(self) -> None:
        for start in list(self._maps):
            self._drop(start)


class StoreFollower(OffsetLookup):
    def __init__(self, commit_log_path: str, commit_log_file_size: int, consume_queue_root: str,
                 consume_queue_file_size: int, upstream: Upstream) -> None:
        self.commit_log = ReadOnlyFiles(commit_log_path, commit_log_file_size)
        self._cq_root = consume_queue_root
        self._cq_file_size = consume_queue_file_size
        self._cqs: dict[tuple[str, int], ReadOnlyFiles] = {}
        self._ranges: dict[tuple[str, int], QueueRange] = {}
        self.upstream = upstream
        self.max_phy_offset = 0
        self.min_phy_offset = 0
        self.has_index = False
        self._lock = threading.Lock()  # publish (channel thread) against the reads (timer thread)

    def publish(self, ranges: dict[tuple[str, int], QueueRange], min_phy: int, max_phy: int, has_index: bool) -> None:
        """The broker's word on what is dispatched: reads stay within it."""
        with self._lock:
            self._ranges.update(ranges)
            self.min_phy_offset, self.max_phy_offset, self.has_index = min_phy, max_phy, has_index
            self.commit_log.forget_below(min_phy)
            for key, r in ranges.items():
                cq = self._cqs.get(key)
                if cq is not None:
                    cq.forget_below(r.min_offset * CQ_STORE_UNIT_SIZE)

    def close(self) -> None:
        with self._lock:
            self.commit_log.close()
            for cq in self._cqs.values():
                cq.close()

    # ------------------------------------------------------------------ ConsumeQueues
    def has_queue(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self._ranges

    def queue_range(self, topic: str, queue_id: int) -> QueueRange:
        return self._ranges.get((topic, queue_id), QueueRange(0, 0))

    def _files(self, topic: str, queue_id: int) -> ReadOnlyFiles:
        key = (topic, queue_id)
        cq = self._cqs.get(key)
        if cq is None:
            cq = self._cqs[key] = ReadOnlyFiles(path_under(self._cq_root, topic, str(queue_id)), self._cq_file_size)
        return cq

    def _entries(self, topic: str, queue_id: int, start: int, max_n: int) -> np.ndarray | None:
        """Up to ``max_n`` published entries from ``start``, within one file (a copy)."""
        per_file = self._cq_file_size // CQ_STORE_UNIT_SIZE
        n = min(max_n, self.queue_range(topic, queue_id).max_offset - start, per_file - start % per_file)
        if n <= 0:
            return np.empty(0, CQ_DTYPE)
        with self._lock:
            view = self._files(topic, queue_id).view(start * CQ_STORE_UNIT_SIZE, n * CQ_STORE_UNIT_SIZE)
            if view is None:
                return None
            arr = np.frombuffer(view, CQ_DTYPE).copy()
            del view
        return arr

    def read_queue(self, topic: str, queue_id: int, offset: int, max_n: int) -> QueueEntries:
        """As ``DefaultMessageStore.read_queue``, within what the broker published."""
        rng = self.queue_range(topic, queue_id)
        start = max(offset, rng.min_offset)
        arr = self._entries(topic, queue_id, start, max_n) if max_n > 0 and start < rng.max_offset else None
        if arr is None:
            per_file = self._cq_file_size // CQ_STORE_UNIT_SIZE
            nxt = start + per_file - start % per_file if max_n > 0 and start < rng.max_offset else start
            return QueueEntries.empty(start, nxt)
        return QueueEntries(start, start + len(arr), arr["offset"].astype(np.int64), arr["size"].astype(np.int64),
                            arr["tag"].astype(np.int64))

    def queue_offset_at_or_after(self, topic: str, queue_id: int, commit_log_offset: int) -> int:
        """The first logical offset whose entry points at or past ``commit_log_offset`` (binary search)."""
        lo, hi = self.queue_range(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            e = self._entries(topic, queue_id, mid, 1)
            if e is None or len(e) == 0 or int(e["offset"][0]) >= commit_log_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # ------------------------------------------------------------------ the CommitLog
    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None:
        with self._lock:
            if size is None:
                head = self.commit_log.view(commit_log_offset, 4)
                if head is None:
                    return None
                size = _I.unpack(head)[0]
            if commit_log_offset < self.min_phy_offset or commit_log_offset + size > self.max_phy_offset:
                return None
            # Zero copy: a slice outliving its file's unmapping keeps the mapping alive (ReadOnlyFiles._drop).
            return self.commit_log.view(commit_log_offset, size)

    # ------------------------------------------------------------------ the broker's
    def put_messages(self, requests: Sequence[PutRequest]) -> list[AppendResult]:
        return self.upstream.put_messages(requests)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]:
        return [memoryview(r) for r in self.upstream.query_message(topic, key, max_num, begin_ts, end_ts)]

    def wait_reput(self, offset: int, timeout: float) -> bool:
        """Wait until the broker's reput dispatched what its CommitLog holds (``offset`` is the broker's
        to know: the follower's own max offset is only what was published)."""
        return self.upstream.wait_reput(timeout)
