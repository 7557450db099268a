"""TimerWheel: the ring of slot cells, mmap'd, one cell per slot of ``slot_ms``.

A cell is RocketMQ's Slot (32 bytes): the slot number it currently belongs to (the ring is reused every
revolution, so a cell whose tag is not the slot asked for is empty), the first and last TimerLog record filed
in it, and counts. Filing is only ever allowed within one revolution ahead of the read cursor, so the live cells
always carry distinct tags.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from tidalmq.common.fileutil import reserve_file_space, sync_mapped
from tidalmq.schedule.timer_log import MAGIC_DELETE, MAGIC_ROLL

CELL_DTYPE = np.dtype(
    [
        ("slot", "<i8"),  # slot number (time_ms // slot_ms) the cell holds, the revolution tag
        ("first", "<i8"),  # first record filed (RocketMQ's firstPos; kept for inspection tools)
        ("last", "<i8"),  # head of the chain: the newest record filed
        ("num", "<i4"),  # normal records minus delete markers (RocketMQ's slot.num)
        ("rolls", "<i4"),  # rolled records (deliver beyond the wheel) minus rolled delete markers
    ]
)
assert CELL_DTYPE.itemsize == 32


def _counts(magic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sign = np.where(magic & MAGIC_DELETE, -1, 1).astype(np.int32)
    roll = (magic & MAGIC_ROLL) != 0
    return np.where(roll, 0, sign), np.where(roll, sign, 0)


class TimerWheel:
    def __init__(self, path: str | os.PathLike[str], slots: int) -> None:
        self.path = Path(path)
        self.slots = slots
        size = slots * CELL_DTYPE.itemsize
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            have = os.fstat(fd).st_size
            if have not in (0, size):
                raise ValueError(f"{self.path}: {have} bytes, expected {size} for {slots} slots")
            # Reserved, never sparse: cells are stored through the mapping, and a store into a hole on
            # a full disk is a SIGBUS. A refusal raises DiskFullError.
            reserve_file_space(fd, size)
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.cells = np.frombuffer(self._mm, dtype=CELL_DTYPE)
        self._ramp = np.arange(slots, dtype=np.int64)

    def head(self, n: int) -> int:
        cell = self.cells[n % self.slots]
        return int(cell["last"]) if int(cell["slot"]) == n else -1

    def live(self, n: int) -> bool:
        return self.head(n) >= 0

    def link(self, filed: np.ndarray, pos: np.ndarray, magic: np.ndarray) -> np.ndarray:
        """Thread a batch into the chains: returns ``prev`` for each record (records in ``pos`` order) and
        updates nothing; call ``commit`` once the batch is in the TimerLog."""
        order = np.argsort(filed, kind="stable")
        f, p = filed[order], pos[order]
        first = np.ones(len(f), dtype=bool)
        first[1:] = f[1:] != f[:-1]
        prev_sorted = np.empty(len(f), np.int64)
        prev_sorted[1:] = p[:-1]
        idx = f[first] % self.slots
        cells = self.cells[idx]
        prev_sorted[first] = np.where(cells["slot"] == f[first], cells["last"], -1)
        prev = np.empty(len(f), np.int64)
        prev[order] = prev_sorted
        return prev

    def commit(self, filed: np.ndarray, pos: np.ndarray, magic: np.ndarray) -> None:
        """Point the cells at the batch's records (after they are in the TimerLog, so a cell never leads to
        a record that recovery would cut). Records already linked (pos <= cell.last) are skipped, which makes
        this the recovery 'revise' step too."""
        if len(filed) == 0:
            return
        order = np.lexsort((pos, filed))
        f, p, m = filed[order], pos[order], magic[order]
        idx = f % self.slots
        tag = self.cells["slot"][idx]
        stale = tag < f  # an older revolution: the slot starts afresh
        dead = tag > f  # filed into a slot the ring already reused: can only be a dead record on recovery
        last = np.where(stale, -1, self.cells["last"][idx])
        apply = (p > last) & ~dead
        if not apply.any():
            return
        f, p, m, idx, stale = f[apply], p[apply], m[apply], idx[apply], stale[apply]
        num, rolls = _counts(m)
        start = np.ones(len(f), dtype=bool)
        start[1:] = f[1:] != f[:-1]
        starts = np.flatnonzero(start)
        ends = np.append(starts[1:], len(f)) - 1
        gi = idx[starts]
        reset = stale[starts]
        cells = self.cells
        cells["num"][gi] = np.where(reset, 0, cells["num"][gi]) + np.add.reduceat(num, starts)
        cells["rolls"][gi] = np.where(reset, 0, cells["rolls"][gi]) + np.add.reduceat(rolls, starts)
        cells["first"][gi] = np.where(reset, p[starts], cells["first"][gi])
        cells["last"][gi] = p[ends]
        cells["slot"][gi] = f[starts]

    def reset_dangling(self, end: int, first_slot: int) -> np.ndarray:
        """Empty every cell of a slot in [first_slot, first_slot + slots) whose chain starts at or past
        TimerLog index ``end`` (the log's valid end); returns their indexes for the caller to rebuild from
        the log. Cells tagged outside that window hold nothing live (a fresh one is all zeros).

        The cells are stored through an mmap the kernel may write back at any time, the TimerLog through
        pwrite synced only at a flush: after a power cut the wheel can be newer than the log. Such a cell
        cannot be trusted at all (its older records may be a prefix of the chain, or of an older revolution),
        so it is emptied: tag -1 is no slot, and the next commit into it starts afresh."""
        cells = self.cells
        tag = cells["slot"]
        live = (tag >= first_slot) & (tag < first_slot + self.slots)
        idx = np.flatnonzero(live & ((cells["last"] >= end) | (cells["first"] >= end)))
        if len(idx):
            cells["slot"][idx] = -1
            cells["first"][idx] = cells["last"][idx] = -1
            cells["num"][idx] = cells["rolls"][idx] = 0
        return idx

    def next_live(self, after: int, limit: int | None = None) -> int | None:
        """The first slot n in (after, after + slots) whose cell holds records, or None.

        Searched in growing windows: the next live slot is usually near, and a full pass over the ring
        (600k cells for 7 days of seconds) costs a few ms."""
        end = after + self.slots if limit is None else min(after + self.slots, limit + 1)
        lo = after + 1
        width = 1024
        while lo < end:
            hi = min(end, lo + width)
            n = np.arange(lo, hi, dtype=np.int64)
            cells = self.cells[n % self.slots]
            hit = np.flatnonzero((cells["slot"] == n) & (cells["last"] >= 0))
            if len(hit):
                return lo + int(hit[0])
            lo = hi
            width *= 8
        return None

    def live_cells(self, after: int) -> np.ndarray:
        """All cells of slots in (after, after + slots) holding records (a copy), in index order.

        Cell i can only hold slot ``after + 1 + (i - after - 1) % slots`` of that window; the cell of
        ``after`` itself would be ``after + slots``, outside it. Comparing in place copies only the live
        cells: gathering the whole wheel first (32 bytes a slot, 19 MB for a 7-day wheel) made each
        runtime-info view cost the timer thread ~90 ms, and deliveries due meanwhile waited."""
        start = after + 1
        cells = self.cells
        # The slot cell i may hold is (start - k) + i for i >= k = start % slots, one revolution more below
        # k: two compares of (tag - i) with a constant, not a modulo over the whole ring (half the time).
        k = start % self.slots
        base = start - k
        gap = cells["slot"] - self._ramp
        live = np.empty(self.slots, dtype=bool)
        np.equal(gap[k:], base, out=live[k:])
        np.equal(gap[:k], base + self.slots, out=live[:k])
        live &= cells["last"] >= 0
        live[after % self.slots] = False
        return cells[live]

    def flush(self) -> None:
        sync_mapped(self.path)

    def close(self) -> None:
        self.flush()
        del self.cells
        self._mm.close()
