"""ConsumeQueue: per (topic, queue id) array of 20-byte entries pointing into the CommitLog.

Entry: CommitLog offset (8) | size (4) | tag hash code (8), big-endian; files of
``mapped_file_size_consume_queue`` bytes under ``consumequeue/<topic>/<queueId>/``. Entry ``n`` of the
queue (its logical offset) lives at byte ``n * 20`` of the stream, so files are numpy arrays and a lookup
is arithmetic. A queue whose first entries were never written (it began after a restart at a later
offset) has them filled with RocketMQ's pre-blank entry (0, Integer.MAX_VALUE, 0).
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from tidalmq.common.fileutil import path_under
from tidalmq.store.config import CQ_STORE_UNIT_SIZE
from tidalmq.store.mapped_file import MappedFile, MappedFileQueue, pwrite_all

log = logging.getLogger("tidalmq.store")

CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tag", ">i8")])
assert CQ_DTYPE.itemsize == CQ_STORE_UNIT_SIZE

BLANK_SIZE = 0x7FFFFFFF  # size field of a pre-blank entry


def _valid(arr: np.ndarray) -> np.ndarray:
    return (arr["offset"] >= 0) & (arr["size"] > 0)


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: str, file_size: int) -> None:
        if file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"consume queue file size {file_size} is not a multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.per_file = file_size // CQ_STORE_UNIT_SIZE
        self.mfq = MappedFileQueue(path_under(root, topic, str(queue_id)), file_size)
        self.min_logic_offset = 0  # bytes
        self.max_physic_offset = -1  # end (offset + size) of the last entry's record
        self.write_lock = threading.Lock()

    # ------------------------------------------------------------------ offsets
    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        return self.mfq.max_offset() // CQ_STORE_UNIT_SIZE

    def entries(self, start: int, max_n: int) -> np.ndarray | None:
        """Up to ``max_n`` entries from logical offset ``start``, within one file (a view; callers copy
        what they keep). None when ``start`` has no file."""
        mf = self.mfq.find_mapped_file_by_offset(start * CQ_STORE_UNIT_SIZE)
        if mf is None:
            return None
        local = start - mf.file_from_offset // CQ_STORE_UNIT_SIZE
        end = min(local + max_n, mf.wrote_position // CQ_STORE_UNIT_SIZE)
        if end <= local:
            return mf.numpy(CQ_DTYPE)[local:local]
        return mf.numpy(CQ_DTYPE)[local:end]

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        if offset < self.min_offset_in_queue or offset >= self.max_offset_in_queue:
            return None
        arr = self.entries(offset, 1)
        if arr is None or len(arr) == 0:
            return None
        e = arr[0]
        return int(e["offset"]), int(e["size"]), int(e["tag"])

    def count_matching(self, queue_offsets: np.ndarray, phys: np.ndarray) -> int:
        """How many of the records (ascending queue offsets, their CommitLog offsets) have their entry in
        this queue, counted from the first until one is missing or points elsewhere."""
        n, total = 0, len(queue_offsets)
        lo, hi = self.min_offset_in_queue, self.max_offset_in_queue
        while n < total:
            q = int(queue_offsets[n])
            arr = self.entries(q, int(queue_offsets[-1]) - q + 1) if lo <= q < hi else None
            if arr is None or len(arr) == 0:
                return n
            rel = queue_offsets[n:] - q
            m = int(np.count_nonzero(rel < len(arr)))
            same = arr["offset"][rel[:m]] == phys[n : n + m]
            if not same.all():
                return n + int(np.argmin(same))
            n += m
        return n

    def roll_next_file(self, offset: int) -> int:
        return offset + self.per_file - offset % self.per_file

    # ------------------------------------------------------------------ write (reput thread)
    def put_entries(self, queue_offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> int:
        """Append entries (int64 arrays, in CommitLog order) for dispatched records of this queue.
        Entries the queue already holds (re-dispatch after recovery) are skipped. Returns the new max
        offset."""
        with self.write_lock:
            max_off = self.max_offset_in_queue
            # Skip what is already there (RocketMQ: "build consume queue repeatedly").
            held = (queue_offsets < max_off) | (phys + sizes <= self.max_physic_offset)
            i = int(np.argmin(held)) if len(held) else 0
            if i == len(held) or held[i]:
                return max_off
            first = int(queue_offsets[i])
            if self.mfq.last is None or (max_off == self.min_offset_in_queue and self.mfq.max_offset() == 0):
                self._start_at(first)
            elif first > max_off:
                log.error("consume queue %s-%d: gap %d..%d, filling with blank entries",
                          self.topic, self.queue_id, max_off, first)
                self._fill_blank(max_off, first)
            # Entries must be consecutive from here; a break in the sequence is written at its own offset.
            qoffs = queue_offsets[i:]
            breaks = (np.flatnonzero(np.diff(qoffs) != 1) + 1).tolist()
            for start, end in zip([0, *breaks], [*breaks, len(qoffs)], strict=True):
                run_first = int(qoffs[start])
                cur_max = self.max_offset_in_queue
                if run_first > cur_max:
                    self._fill_blank(cur_max, run_first)
                if run_first >= cur_max:
                    arr = np.empty(end - start, CQ_DTYPE)
                    arr["offset"] = phys[i + start : i + end]
                    arr["size"] = sizes[i + start : i + end]
                    arr["tag"] = tags[i + start : i + end]
                    self._append(arr)
                    self.max_physic_offset = int(phys[i + end - 1] + sizes[i + end - 1])
            return self.max_offset_in_queue

    def _append(self, arr: np.ndarray) -> None:
        # Written with pwrite, not stored through the mapping (which readers use, the same page cache): the
        # first store into a page of a new file's reserved (unwritten) extent faults, and that fault waits
        # for the filesystem's journal while holding the GIL, stopping the event loop with it. pwrite waits
        # with the GIL released (docs/benchmarks.md, 2026-12-03: a new topic's first deliveries).
        i = 0
        while i < len(arr):
            mf = self.mfq.get_last_mapped_file(self.mfq.max_offset())
            local = mf.wrote_position // CQ_STORE_UNIT_SIZE
            k = min(len(arr) - i, self.per_file - local)
            pwrite_all(mf.fd, [arr[i : i + k].data], mf.wrote_position, k * CQ_STORE_UNIT_SIZE)
            mf.wrote_position += k * CQ_STORE_UNIT_SIZE
            i += k

    def _fill_blank(self, start: int, end: int) -> None:
        arr = np.zeros(end - start, CQ_DTYPE)
        arr["size"] = BLANK_SIZE
        self._append(arr)

    def _start_at(self, first: int) -> None:
        """First entry of an empty queue at logical offset ``first`` (RocketMQ fills the file's earlier
        slots with pre-blank entries and sets the min offset there)."""
        byte_off = first * CQ_STORE_UNIT_SIZE
        if self.mfq.last is None:
            self.mfq.get_last_mapped_file(byte_off)
        last = self.mfq.last
        assert last is not None
        if last.file_from_offset > byte_off or last.file_from_offset + self.file_size <= byte_off:
            # The lone empty file is at the wrong place: replace it.
            self.mfq.remove_files(list(self.mfq.files))
            self.mfq.get_last_mapped_file(byte_off)
            last = self.mfq.last
            assert last is not None
        last.wrote_position = 0
        self.min_logic_offset = byte_off
        local = first - last.file_from_offset // CQ_STORE_UNIT_SIZE
        if local > 0:
            self._fill_blank(last.file_from_offset // CQ_STORE_UNIT_SIZE, first)
        self.mfq.flushed_where = last.file_from_offset

    # ------------------------------------------------------------------ load / recovery
    def load(self) -> bool:
        return self.mfq.load()

    def recover(self) -> None:
        """Find the end of valid entries in the last files (RocketMQ's ConsumeQueue.recover)."""
        files = self.mfq.files
        if not files:
            return
        process = files[0].file_from_offset
        start = max(0, len(files) - 3)
        for f in files[:start]:
            f.wrote_position = f.flushed_position = self.file_size
        for f in files[start:]:
            arr = f.numpy(CQ_DTYPE)
            bad = np.flatnonzero(~_valid(arr))
            n_valid = int(bad[0]) if len(bad) else self.per_file
            process = f.file_from_offset + n_valid * CQ_STORE_UNIT_SIZE
            if n_valid < self.per_file:
                break
        self.truncate_to(process)

    def truncate_to(self, byte_offset: int) -> None:
        self.mfq.truncate_dirty_files(byte_offset)
        for f in self.mfq.files:
            f.flushed_position = f.wrote_position
        self.mfq.flushed_where = self.mfq.max_offset()
        self._refresh_max_physic_offset()
        if self.min_logic_offset > self.mfq.max_offset():
            self.min_logic_offset = self.mfq.max_offset()

    def _refresh_max_physic_offset(self) -> None:
        self.max_physic_offset = -1
        for f in reversed(self.mfq.files):
            n = f.wrote_position // CQ_STORE_UNIT_SIZE
            if n == 0:
                continue
            arr = f.numpy(CQ_DTYPE)[:n]
            real = np.flatnonzero(arr["size"] != BLANK_SIZE)
            if len(real):
                e = arr[real[-1]]
                self.max_physic_offset = int(e["offset"]) + int(e["size"])
                return

    def truncate_dirty(self, phys_offset: int) -> None:
        """Drop entries pointing at or past ``phys_offset`` in the CommitLog, and any invalid entry
        (torn write) before them (RocketMQ's truncateDirtyLogicFiles)."""
        files = self.mfq.files
        for f in reversed(files):
            n = f.wrote_position // CQ_STORE_UNIT_SIZE
            arr = f.numpy(CQ_DTYPE)[:n]
            bad = (arr["offset"] >= phys_offset) & (arr["size"] != BLANK_SIZE)
            bad |= ~_valid(arr)
            idx = np.flatnonzero(bad)
            if len(idx) == 0:
                # This file is clean; any later (dirty) files are dropped by the truncation.
                self.truncate_to(f.file_from_offset + n * CQ_STORE_UNIT_SIZE)
                return
            first_bad = int(idx[0])
            if first_bad > 0 or f is files[0]:
                self.truncate_to(f.file_from_offset + first_bad * CQ_STORE_UNIT_SIZE)
                return
            # The whole file is dirty: it goes, and the previous file is examined.
        self.truncate_to(files[0].file_from_offset if files else 0)

    # ------------------------------------------------------------------ retention
    def correct_min_offset(self, min_phy: int) -> None:
        """Move the min logical offset to the first entry whose record is still in the CommitLog."""
        for f in self.mfq.files:
            n = f.wrote_position // CQ_STORE_UNIT_SIZE
            if n == 0:
                continue
            arr = f.numpy(CQ_DTYPE)[:n]
            ok = np.flatnonzero((arr["offset"] >= min_phy) & (arr["size"] != BLANK_SIZE) & (arr["size"] > 0))
            if len(ok):
                new_min = f.file_from_offset + int(ok[0]) * CQ_STORE_UNIT_SIZE
                if new_min > self.min_logic_offset:
                    self.min_logic_offset = new_min
                return
        self.min_logic_offset = max(self.min_logic_offset, self.mfq.max_offset())

    def delete_expired_file(self, min_phy: int) -> int:
        """Delete the oldest files whose last entry points below ``min_phy`` (never the last file)."""
        doomed: list[MappedFile] = []
        for f in self.mfq.files[:-1]:
            last = f.numpy(CQ_DTYPE)[self.per_file - 1]
            if int(last["size"]) != BLANK_SIZE and int(last["offset"]) < min_phy:
                doomed.append(f)
            else:
                break
        self.mfq.remove_files(doomed)
        self.correct_min_offset(min_phy)
        return len(doomed)

    def init_min_offset(self, min_phy: int) -> None:
        """After load: the first file's start, corrected to the first record still in the CommitLog."""
        first = self.mfq.first
        self.min_logic_offset = first.file_from_offset if first is not None else 0
        # Also steps over pre-blank entries at the head.
        self.correct_min_offset(max(min_phy, 0))

    # ------------------------------------------------------------------ flush / lifecycle
    def flush(self, least_pages: int = 0) -> bool:
        return self.mfq.flush(least_pages)

    def dirty(self) -> bool:
        return self.mfq.max_offset() > self.mfq.flushed_where

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        self.mfq.destroy()
        try:
            os.rmdir(os.path.dirname(self.mfq.store_path))
        except OSError:
            pass
