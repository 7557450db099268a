"""TimerLog: the append-only file of fixed-width timer index records, in fixed-size segment files.

One record is 48 bytes (RocketMQ's TimerLog unit is 52): it names a message in the CommitLog by offset and
size, its deliver time, the wheel slot it is filed in, and the previous record filed in the same slot, so each
slot is a linked list threaded through the log (newest first), headed by its TimerWheel cell.

Writes go through ``os.pwrite`` (one syscall per batch and segment, so a SIGKILL cannot tear a batch
mid-copy, and written pages stay in the page cache rather than in this process's resident set); reads go
through read-only mmaps viewed as numpy arrays.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tidalmq.common.fileutil import reserve_file_space

log = logging.getLogger(__name__)

RECORD_DTYPE = np.dtype(
    [
        ("deliver_ms", "<i8"),  # when to deliver (ms since the epoch)
        ("offset", "<i8"),  # CommitLog offset of the message (for a batch marker: the enqueue watermark)
        ("prev", "<i8"),  # previous record index filed in the same slot, -1 at the chain's end
        ("uhash", "<i8"),  # hash of realTopic+uniqKey, matched by delete markers
        ("filed_slot", "<i8"),  # wheel slot number (ms // slot_ms) this record is filed in; -1 for a marker
        ("size", "<i4"),  # message size in the CommitLog
        ("magic", "<i4"),  # signature in the high half, MAGIC_* flags in the low half; written last
    ]
)
RECORD_SIZE = RECORD_DTYPE.itemsize
assert RECORD_SIZE == 48
_WORDS = RECORD_SIZE // 8  # the record seen as int64 words, for the chain walk
_PREV_WORD = 2

# RocketMQ's TimerMessageStore flags, same values.
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
# Ours: closes a batch. A batch counts only once its marker is in the log, so recovery cuts a torn batch whole.
MAGIC_BATCH = 1 << 3
# A written record is told from zero-filled (preallocated) or half-written space by this high half.
MAGIC_SIGNATURE = 0x54490000  # "TI"
_SIGNATURE_MASK = np.int32(-65536)  # 0xFFFF0000 as int32


def valid_mask(magic: np.ndarray) -> np.ndarray:
    return (magic & _SIGNATURE_MASK) == np.int32(MAGIC_SIGNATURE)


class TimerLog:
    """Segments named by their first record index; record index = segment << shift | slot in segment."""

    def __init__(self, directory: str | os.PathLike[str], records_per_segment: int = 1 << 20) -> None:
        if records_per_segment & (records_per_segment - 1) or records_per_segment < 16:
            raise ValueError("records_per_segment must be a power of two >= 16")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.per_segment = records_per_segment
        self.shift = records_per_segment.bit_length() - 1
        self.mask = records_per_segment - 1
        self.segment_bytes = records_per_segment * RECORD_SIZE
        self.write_pos = 0
        self._fds: dict[int, int] = {}
        self._maps: dict[int, mmap.mmap] = {}
        self._arrays: dict[int, np.ndarray] = {}
        self._words: dict[int, memoryview] = {}
        self._dirty: set[int] = set()

    # ---- files ----

    def _path(self, seg: int) -> Path:
        return self.dir / f"{seg << self.shift:020d}"

    def segments(self) -> list[int]:
        return sorted(int(p.name) >> self.shift for p in self.dir.iterdir() if p.name.isdigit())

    def _fd(self, seg: int, create: bool) -> int | None:
        fd = self._fds.get(seg)
        if fd is None:
            path = self._path(seg)
            existed = path.exists()
            if not create and not existed:
                return None
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                # Preallocated, zeros read as "no record" (how the tail is found), and reserved so that a
                # full disk is a DiskFullError here rather than a failed write into a hole later.
                reserve_file_space(fd, self.segment_bytes)
            except BaseException:
                os.close(fd)
                if not existed:
                    path.unlink(missing_ok=True)
                raise
            self._fds[seg] = fd
        return fd

    def array(self, seg: int) -> np.ndarray | None:
        arr = self._arrays.get(seg)
        if arr is None:
            fd = self._fd(seg, create=False)
            if fd is None:
                return None
            mm = mmap.mmap(fd, self.segment_bytes, access=mmap.ACCESS_READ)
            self._maps[seg] = mm
            arr = self._arrays[seg] = np.frombuffer(mm, dtype=RECORD_DTYPE)
            self._words[seg] = memoryview(mm).cast("q")
        return arr

    # ---- write ----

    def append(self, recs: np.ndarray) -> int:
        """Write records at the tail; returns the index of the first. Caller fills ``prev`` beforehand."""
        start = pos = self.write_pos
        i = 0
        while i < len(recs):
            seg, off = pos >> self.shift, pos & self.mask
            n = min(len(recs) - i, self.per_segment - off)
            fd = self._fd(seg, create=True)
            assert fd is not None
            data = recs[i : i + n].tobytes()
            written = os.pwrite(fd, data, off * RECORD_SIZE)
            if written != len(data):
                raise OSError(f"short write to TimerLog segment {seg}: {written} of {len(data)}")
            self._dirty.add(seg)
            i += n
            pos += n
        self.write_pos = pos
        return start

    def zero(self, start: int, end: int) -> None:
        """Erase records [start, end) (a torn batch) so a later scan stops at ``start``."""
        pos = start
        while pos < end:
            seg, off = pos >> self.shift, pos & self.mask
            n = min(end - pos, self.per_segment - off)
            fd = self._fd(seg, create=False)
            if fd is not None:
                os.pwrite(fd, bytes(n * RECORD_SIZE), off * RECORD_SIZE)
                self._dirty.add(seg)
            pos += n

    def take_dirty(self) -> list[int]:
        """A duplicate of the descriptor of each segment written since the last call or flush, for a sync
        made without holding what guards the writes (the caller closes them; a segment deleted meanwhile
        is synced harmlessly). Forgets them: the caller owns their sync."""
        fds = [os.dup(self._fds[seg]) for seg in sorted(self._dirty) if seg in self._fds]
        self._dirty.clear()
        return fds

    def flush(self) -> None:
        for seg in sorted(self._dirty):
            fd = self._fds.get(seg)
            if fd is not None:
                os.fsync(fd)
        self._dirty.clear()

    # ---- read ----

    def gather(self, positions: np.ndarray) -> np.ndarray:
        """The records at the given indexes, in the given order (a copy)."""
        out = np.empty(len(positions), RECORD_DTYPE)
        if len(positions) == 0:
            return out
        segs = positions >> self.shift
        for seg in np.unique(segs):
            sel = segs == seg
            arr = self.array(int(seg))
            if arr is None:
                raise FileNotFoundError(f"TimerLog segment {int(seg)} is missing")
            out[sel] = arr[positions[sel] & self.mask]
        return out

    def chain(self, last: int) -> np.ndarray:
        """Record indexes of a slot's chain, newest first, walking ``prev`` from ``last``.

        Pointer chasing does not vectorise, but a batch filed into one slot is written contiguously, so its
        records link ``pos -> pos - 1``: such runs are found with numpy a window at a time, and the Python
        loop only steps between runs.

        A link at or past the written end, to a record never written (no signature) or not strictly older
        ends the chain with an error: the wheel or the log is damaged, and following it would read zeros as
        records (or loop). Recovery rebuilds cells that point past the log (TimerStore.load), so this is
        the last guard, not the repair."""
        out: list[np.ndarray] = []
        p = last
        shift, mask = self.shift, self.mask
        while p >= 0:
            if p >= self.write_pos:
                log.error("TimerLog chain from %d links to %d, past the log's end %d; chain cut", last, p,
                          self.write_pos)
                break
            seg = p >> shift
            arr = self.array(seg)
            if arr is None:
                break  # segment already deleted: nothing older in this slot can be live
            base = seg << shift
            off = hi = p & mask
            prev = int(self._words[seg][off * _WORDS + _PREV_WORD])
            if prev != p - 1 or off == 0:
                low, p = off, prev
            else:
                while True:
                    lo = max(0, off - 4096)
                    pv = arr["prev"][lo : off + 1]
                    bad = np.flatnonzero(pv != np.arange(base + lo - 1, base + off, dtype=np.int64))
                    if len(bad):
                        low = lo + int(bad[-1])  # last record of the run; its prev leaves the run
                        p = int(arr["prev"][low])
                        break
                    if lo == 0:
                        low, p = 0, base - 1  # the run continues into the previous segment
                        break
                    off = lo - 1
            ok = valid_mask(arr["magic"][low : hi + 1])
            if not ok.all():
                low = low + int(np.flatnonzero(~ok)[-1]) + 1  # keep the written records above the first hole
                log.error("TimerLog chain from %d reaches unwritten record %d; chain cut", last, base + low - 1)
                p = -1
            elif p >= base + low:
                log.error("TimerLog record %d links forward to %d; chain cut", base + low, p)
                p = -1
            out.append(np.arange(base + hi, base + low - 1, -1, dtype=np.int64))
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def records_below(self, end: int) -> Iterator[tuple[int, np.ndarray]]:
        """Each segment on disk as (index of its first record, its records below ``end``), oldest first:
        views into the mappings, valid until the segment is deleted."""
        for seg in self.segments():
            base = seg << self.shift
            arr = self.array(seg)
            if arr is None or base >= end:
                continue
            yield base, arr[: end - base]

    def scan_tail(self, start: int) -> np.ndarray:
        """The records written from ``start`` on, up to the first unwritten or torn one (a copy)."""
        parts: list[np.ndarray] = []
        pos = start
        while True:
            seg, off = pos >> self.shift, pos & self.mask
            arr = self.array(seg)
            if arr is None:
                break
            part = arr[off:]
            ok = valid_mask(part["magic"])
            n = len(part) if ok.all() else int(np.argmin(ok))
            parts.append(part[:n].copy())
            pos += n
            if n < len(part):
                break
        return np.concatenate(parts) if parts else np.empty(0, RECORD_DTYPE)

    # ---- retention ----

    def delete_segment(self, seg: int) -> None:
        self._release(seg)
        fd = self._fds.pop(seg, None)
        if fd is not None:
            os.close(fd)
        self._dirty.discard(seg)
        try:
            self._path(seg).unlink()
        except FileNotFoundError:
            pass

    def _release(self, seg: int) -> None:
        words = self._words.pop(seg, None)
        if words is not None:
            words.release()
        self._arrays.pop(seg, None)
        mm = self._maps.pop(seg, None)
        if mm is not None:
            mm.close()

    def close(self) -> None:
        self.flush()
        for seg in list(self._maps):
            self._release(seg)
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
