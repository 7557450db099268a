"""The keys of the de-duplication window (broker/dedup.py), 16 bytes each, so that a window of ten
million keys (a Spark write of 10^7 rows re-run) takes ~160 MB instead of the ~3 GB of Python objects.

A key is its 64-bit BLAKE2b hash, mapped to the CommitLog offset of the record that holds it; the record
itself says the rest (queue, queue offset, the key in full, which the window compares before it takes a
send for a duplicate, so a hash collision costs a record read, never a message). The newest keys are a
dict; every ``segment_size`` of them are frozen into a segment, two numpy arrays sorted by hash, looked up
with ``searchsorted``. Segments are immutable, so the window persists each once as a file of its own
(broker/dedup.py), and the bounds drop whole segments, oldest first:

- by count: the oldest segment goes once the others hold ``window_size`` keys, so the window always
  holds at least the newest ``window_size`` keys (and at most one segment more);
- by age: a segment goes once its newest key is older than the window's seconds.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SEGMENT_MIN = 1 << 16  # keys a segment holds at least in a large window (a lookup visits every segment)
SEGMENTS = 64  # a full window is about this many segments


def key_hash(key: str) -> int:
    """The key's 64-bit hash, the same in every process and after a restart (``hash()`` is salted)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class Segment:
    hashes: np.ndarray  # uint64, sorted
    phys: np.ndarray  # int64: the CommitLog offset of each hash's record
    newest_ts: int  # store time (ms) of its newest record
    low_phys: int  # its lowest CommitLog offset: a replay from here rebuilds it

    @property
    def name(self) -> str:
        return f"seg-{self.low_phys:020d}.npz"

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, CommitLog offsets where found) of ``hashes``."""
        at = np.searchsorted(self.hashes, hashes)
        at = np.minimum(at, len(self.hashes) - 1)
        found = self.hashes[at] == hashes
        return found, self.phys[at]

    def save(self, directory: str) -> None:
        """Written once (a temp file renamed, fsync'd): segments never change."""
        path = os.path.join(directory, self.name)
        if os.path.exists(path):
            return
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            np.savez(f, hashes=self.hashes, phys=self.phys, meta=np.array([self.newest_ts, self.low_phys], np.int64))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @staticmethod
    def load(path: str) -> Segment:
        with np.load(path) as z:
            meta = z["meta"]
            return Segment(z["hashes"], z["phys"], int(meta[0]), int(meta[1]))


def segment_size_for(window_size: int) -> int:
    """1/64 of the window, but at least 65,536 keys (or a quarter of a smaller window)."""
    return max(1, window_size // SEGMENTS, min(SEGMENT_MIN, window_size // 4))


class KeyIndex:
    """hash -> CommitLog offset, bounded by count and age (see the module's docstring)."""

    def __init__(self, window_size: int, window_ms: int, clock: Callable[[], float]) -> None:
        self.window_size = window_size
        self.window_ms = window_ms
        self.clock = clock
        self.segment_size = segment_size_for(window_size)
        self.recent: dict[int, int] = {}
        self.recent_newest_ts = 0
        self.recent_low_phys: int | None = None
        self.segments: list[Segment] = []
        self.segment_keys = 0

    def __len__(self) -> int:
        return len(self.recent) + self.segment_keys

    def clear(self) -> None:
        self.recent.clear()
        self.recent_newest_ts, self.recent_low_phys = 0, None
        self.segments.clear()
        self.segment_keys = 0

    def add(self, h: int, phys: int, store_ts: int) -> None:
        recent = self.recent
        if h in recent:
            return
        recent[h] = phys
        if store_ts > self.recent_newest_ts:
            self.recent_newest_ts = store_ts
        if self.recent_low_phys is None or phys < self.recent_low_phys:
            self.recent_low_phys = phys
        if len(recent) >= self.segment_size:
            self.freeze()

    def freeze(self) -> None:
        """The newest keys into a segment."""
        if not self.recent:
            return
        hashes = np.fromiter(self.recent.keys(), np.uint64, len(self.recent))
        phys = np.fromiter(self.recent.values(), np.int64, len(self.recent))
        order = np.argsort(hashes, kind="stable")
        self.append(Segment(hashes[order], phys[order], self.recent_newest_ts, int(phys.min())))
        self.recent.clear()
        self.recent_newest_ts, self.recent_low_phys = 0, None

    def append(self, seg: Segment) -> None:
        self.segments.append(seg)
        self.segment_keys += len(seg.hashes)

    def lookup(self, hashes: Sequence[int]) -> list[int | None]:
        """The CommitLog offset of each hash's record, None where the window does not hold it."""
        recent = self.recent
        out: list[int | None] = [recent.get(h) for h in hashes]
        missing = [i for i, o in enumerate(out) if o is None]
        if not missing or not self.segments:
            return out
        want = np.array([hashes[i] for i in missing], np.uint64)
        idx = np.array(missing)
        for seg in reversed(self.segments):  # newest first: a key stored twice answers with its newest copy
            found, phys = seg.lookup(want)
            if found.any():
                for i, p in zip(idx[found].tolist(), phys[found].tolist(), strict=True):
                    out[i] = p
                keep = ~found
                want, idx = want[keep], idx[keep]
                if not len(want):
                    break
        return out

    def evict(self) -> list[Segment]:
        """Drop the segments past the bounds; returns them."""
        horizon = int(self.clock() * 1000) - self.window_ms
        dropped: list[Segment] = []
        segs = self.segments
        while segs and (len(self) - len(segs[0].hashes) >= self.window_size or segs[0].newest_ts < horizon):
            seg = segs.pop(0)
            self.segment_keys -= len(seg.hashes)
            dropped.append(seg)
        if not segs and self.recent and self.recent_newest_ts < horizon:
            self.recent.clear()
            self.recent_newest_ts, self.recent_low_phys = 0, None
        return dropped

    def replay_start(self, end: int) -> int:
        """Where a replay must start to rebuild what the saved segments (all but the newest) lack."""
        if self.segments:
            return min(self.segments[-1].low_phys, self.recent_low_phys if self.recent_low_phys is not None else end)
        return self.recent_low_phys if self.recent_low_phys is not None else end

    def saved(self) -> list[Segment]:
        """The segments a snapshot lists: all but the newest, which the replay from ``replay_start``
        rebuilds (so a record settled out of order around a freeze is never left out)."""
        return self.segments[:-1]

    def load(self, segments: Iterable[Segment]) -> None:
        for seg in segments:
            self.append(seg)
