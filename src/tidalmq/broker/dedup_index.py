"""The keys of the de-duplication window (broker/dedup.py) in numpy arrays, ~45 bytes each, so that a
window of ten million keys (a Spark write of 10^7 rows re-run) takes ~450 MB instead of the ~3 GB of
Python objects.

A key is its 64-bit BLAKE2b hash, mapped to the CommitLog offset of the record that holds it; the record
itself says the rest (queue, queue offset, the key in full, which the window compares before it takes a
send for a duplicate, so a hash collision costs a record read, never a message). The newest keys are a
dict; every ``segment_size`` of them are frozen into a segment (two numpy arrays, 16 bytes a key), and
every frozen key is also in one open-addressing table (``HashTable``), so that a send's keys are looked up
in one vectorised probe however many segments there are (a binary search a segment was memory-bound: ~90
ms a batch of 256 keys with 64 segments). Segments are immutable, so the window persists each once as a
file of its own (broker/dedup.py), and the bounds drop whole segments, oldest first:

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
    hashes: np.ndarray  # uint64
    phys: np.ndarray  # int64: the CommitLog offset of each hash's record
    newest_ts: int  # store time (ms) of its newest record
    low_phys: int  # its lowest CommitLog offset: a replay from here rebuilds it

    @property
    def name(self) -> str:
        return f"seg-{self.low_phys:020d}.npz"

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


_EMPTY, _GONE = 0, 1  # slot markers of HashTable; a hash below 2 is stored as hash + 2 (the record check
# after a hit makes that harmless)


class HashTable:
    """hash (uint64) -> CommitLog offset (int64), linear probing over numpy arrays, every operation
    vectorised over a batch of keys. A deleted entry leaves a marker until the table is rebuilt, which
    happens when entries and markers fill ``_MAX_LOAD`` of it (to ``_REBUILT_LOAD``)."""

    _MAX_LOAD, _REBUILT_LOAD, _MIN_CAPACITY = 0.65, 0.45, 1 << 12

    def __init__(self, capacity: int = _MIN_CAPACITY) -> None:
        self.keys = np.zeros(capacity, np.uint64)
        self.vals = np.zeros(capacity, np.int64)
        self.live = 0
        self.gone = 0

    @staticmethod
    def _stored(hashes: np.ndarray) -> np.ndarray:
        hashes = np.asarray(hashes, np.uint64)
        return np.where(hashes < 2, hashes + np.uint64(2), hashes)

    def _probe(self, stored: np.ndarray, *, val: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, slot) of each key (with ``val``: the slot holding exactly that entry)."""
        cap = np.uint64(len(self.keys))
        pos = stored % cap
        found = np.zeros(len(stored), bool)
        slot = np.zeros(len(stored), np.int64)
        todo = np.arange(len(stored))
        while len(todo):
            at = pos[todo].astype(np.int64)
            k = self.keys[at]
            hit = k == stored[todo]
            if val is not None:
                hit &= self.vals[at] == val[todo]
            found[todo[hit]] = True
            slot[todo[hit]] = at[hit]
            more = ~hit & (k != _EMPTY)  # past an entry of another key, or a deleted one: probe on
            todo = todo[more]
            pos[todo] = (pos[todo] + np.uint64(1)) % cap
        return found, slot

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, CommitLog offsets where found)."""
        found, slot = self._probe(self._stored(hashes))
        return found, self.vals[slot]

    def insert(self, hashes: np.ndarray, phys: np.ndarray) -> None:
        if (self.live + self.gone + len(hashes)) > self._MAX_LOAD * len(self.keys):
            self._rebuild(self.live + len(hashes))
        stored = self._stored(hashes)
        phys = np.asarray(phys, np.int64)
        cap = np.uint64(len(self.keys))
        pos = stored % cap
        todo = np.arange(len(stored))
        while len(todo):  # each free slot taken by one of the keys that reach it; the others probe on
            at = pos[todo].astype(np.int64)
            free = self.keys[at] == _EMPTY
            cand = todo[free]
            slots, first = np.unique(at[free], return_index=True)
            win = cand[first]
            self.keys[slots] = stored[win]
            self.vals[slots] = phys[win]
            placed = np.zeros(len(stored), bool)
            placed[win] = True
            todo = todo[~placed[todo]]
            pos[todo] = (pos[todo] + np.uint64(1)) % cap
        self.live += len(stored)

    def delete(self, hashes: np.ndarray, phys: np.ndarray) -> None:
        found, slot = self._probe(self._stored(hashes), val=np.asarray(phys, np.int64))
        slot = np.unique(slot[found])
        self.keys[slot] = _GONE
        self.live -= len(slot)
        self.gone += len(slot)

    def _rebuild(self, entries: int) -> None:
        keep = self.keys > _GONE
        keys, vals = self.keys[keep], self.vals[keep]
        self.keys = np.zeros(max(self._MIN_CAPACITY, int(entries / self._REBUILT_LOAD)), np.uint64)
        self.vals = np.zeros(len(self.keys), np.int64)
        self.live = self.gone = 0
        if len(keys):
            self.insert(keys, vals)  # stored values are >= 2 already: _stored leaves them as they are


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
        self.table = HashTable()

    def __len__(self) -> int:
        return len(self.recent) + self.segment_keys

    def clear(self) -> None:
        self.recent.clear()
        self.recent_newest_ts, self.recent_low_phys = 0, None
        self.segments.clear()
        self.segment_keys = 0
        self.table = HashTable()

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
        self.append(Segment(hashes, phys, self.recent_newest_ts, int(phys.min())))
        self.recent.clear()
        self.recent_newest_ts, self.recent_low_phys = 0, None

    def append(self, seg: Segment) -> None:
        self.segments.append(seg)
        self.segment_keys += len(seg.hashes)
        self.table.insert(seg.hashes, seg.phys)

    def lookup(self, hashes: Sequence[int]) -> list[int | None]:
        """The CommitLog offset of each hash's record, None where the window does not hold it."""
        recent = self.recent
        out: list[int | None] = [recent.get(h) for h in hashes]
        missing = [i for i, o in enumerate(out) if o is None]
        if not missing or not self.segments:
            return out
        found, phys = self.table.lookup(np.array([hashes[i] for i in missing], np.uint64))
        for i, p in zip(np.array(missing)[found].tolist(), phys[found].tolist(), strict=True):
            out[i] = p
        return out

    def evict(self) -> list[Segment]:
        """Drop the segments past the bounds; returns them."""
        horizon = int(self.clock() * 1000) - self.window_ms
        dropped: list[Segment] = []
        segs = self.segments
        while segs and (len(self) - len(segs[0].hashes) >= self.window_size or segs[0].newest_ts < horizon):
            seg = segs.pop(0)
            self.segment_keys -= len(seg.hashes)
            self.table.delete(seg.hashes, seg.phys)
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
