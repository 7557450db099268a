"""One RocketMQ index file: a memory-mapped on-disk hash table from message keys to CommitLog offsets.

Layout (big-endian, as Java's ``ByteBuffer``), identical to RocketMQ's ``IndexFile``/``IndexHeader``::

    header   40 bytes   beginTimestamp i64 @0, endTimestamp i64 @8, beginPhyOffset i64 @16,
                        endPhyOffset i64 @24, hashSlotCount i32 @32, indexCount i32 @36
    slots    hashSlotNum x i32     slot -> number of the newest entry in that slot's chain (0 = empty)
    entries  indexNum x 20 bytes   keyHash i32, phyOffset i64, timeDiff i32 (seconds since
                                   beginTimestamp), prevIndex i32 (previous entry in the chain, 0 = end)

Entry numbers start at 1 (``indexCount`` starts at 1 and is the number the next entry gets), so entry 0 is
never written and a file holds ``indexNum - 1`` entries. The key itself is not stored; a lookup matches on
the 31-bit key hash only, so distinct keys with equal Java hash codes are reported together (RocketMQ's
clients filter by key after fetching the messages).

Known, deliberate difference from RocketMQ: RocketMQ computes the first entry's ``timeDiff`` of a rolled
file against the previous file's end timestamp and only then resets ``beginTimestamp`` to that entry's
timestamp, so that entry reads back shifted into the future. We set ``beginTimestamp`` first, so the first
entry always has ``timeDiff`` 0. Both are valid files for either implementation.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct

import numpy as np

from tidalmq.common.taghash import java_string_hash

log = logging.getLogger("tidalmq.store.index")

HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 0x7FFFFFFF

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")

ENTRY_DTYPE = np.dtype(
    {
        "names": ["key_hash", "phy_offset", "time_diff", "prev_index"],
        "formats": [">i4", ">i8", ">i4", ">i4"],
        "offsets": [0, 4, 12, 16],
        "itemsize": INDEX_SIZE,
    }
)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def index_key_hash(key: str) -> int:
    """RocketMQ's ``indexKeyHashMethod``: ``Math.abs(key.hashCode())``, and 0 where that overflows.

    ``Math.abs(Integer.MIN_VALUE)`` is ``Integer.MIN_VALUE`` (still negative), which RocketMQ maps to 0.
    """
    h = java_string_hash(key)
    if h == -0x80000000:
        return 0
    return -h if h < 0 else h


_POW31 = np.ones(1, dtype=np.uint64)


def _pow31(n: int) -> np.ndarray:
    """31**k mod 2**64 for k < n (uint64 arithmetic wraps, which keeps the value right mod 2**32)."""
    global _POW31
    if len(_POW31) < n:
        size = max(n, 2 * len(_POW31), 256)
        p = np.full(size, 31, dtype=np.uint64)
        p[0] = 1
        with np.errstate(over="ignore"):
            _POW31 = np.cumprod(p, dtype=np.uint64)
    return _POW31


def index_key_hashes(keys: list[str]) -> np.ndarray:
    """Vectorised :func:`index_key_hash` over many keys (int64 array); keys must be non-empty."""
    m = len(keys)
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    joined = "".join(keys)
    data = joined.encode("utf-16-be")
    units = np.frombuffer(data, dtype=">u2").astype(np.uint64)
    if len(units) == len(joined):  # BMP only: one UTF-16 unit per code point
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=m)
    else:
        lengths = np.fromiter((len(k.encode("utf-16-be")) // 2 for k in keys), dtype=np.int64, count=m)
    if not lengths.all():
        raise ValueError("index keys must be non-empty")
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # h = sum(c[i] * 31**(n-1-i)): exponent = distance of each unit from the end of its key
    exps = np.repeat(ends - 1, lengths) - np.arange(len(units), dtype=np.int64)
    with np.errstate(over="ignore"):
        terms = units * _pow31(int(lengths.max()))[exps]
        sums = np.add.reduceat(terms, starts)
    h = (sums & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
    h = np.abs(h)
    h[h == 0x80000000] = 0
    return h


class IndexFile:
    """A single index file. Not thread-safe by itself: :class:`IndexService` serialises access."""

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        *,
        create: bool,
    ) -> None:
        if hash_slot_num <= 0 or index_num <= 1:
            raise ValueError("hash_slot_num must be > 0 and index_num > 1")
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._entries_base = HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE

        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create:
                os.ftruncate(fd, self.file_size)  # sparse: nothing is written until used
            else:
                actual = os.fstat(fd).st_size
                if actual != self.file_size:
                    raise ValueError(
                        f"index file {path} is {actual} bytes, expected {self.file_size} "
                        f"(hash_slot_num={hash_slot_num}, index_num={index_num})"
                    )
            self._mm = mmap.mmap(
                fd, self.file_size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
            )
        finally:
            os.close(fd)
        self._slots = np.frombuffer(self._mm, dtype=">i4", count=hash_slot_num, offset=HEADER_SIZE)
        self._entries = np.frombuffer(self._mm, dtype=ENTRY_DTYPE, count=index_num, offset=self._entries_base)

        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        if create:
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
            self._write_header()
        else:
            self._load_header()
        self.dirty = create

    # ------------------------------------------------------------------ header

    def _load_header(self) -> None:
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = _HEADER.unpack_from(self._mm, 0)
        if self.index_count <= 0:
            self.index_count = 1
        if self.index_count > self.index_num:
            log.warning(
                "index file %s: indexCount %d > indexNum %d, clamped",
                self.path,
                self.index_count,
                self.index_num,
            )
            self.index_count = self.index_num

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    # ------------------------------------------------------------------ state

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def closed(self) -> bool:
        return self._mm is None

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def free_entries(self) -> int:
        return self.index_num - self.index_count

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    # ------------------------------------------------------------------ writes

    def _time_diff(self, ts: int) -> int:
        begin = self.begin_timestamp
        if begin <= 0:
            return 0
        d = (ts - begin) // 1000
        if d < 0:
            return 0
        return INT_MAX if d > INT_MAX else d

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        return self.put_hashed(index_key_hash(key), phy_offset, store_timestamp)

    def put_hashed(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Append one entry whose key hash is already computed; False when the file is full."""
        idx = self.index_count
        if idx >= self.index_num:
            return False
        mm = self._mm
        abs_slot = HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        slot_value = _SLOT.unpack_from(mm, abs_slot)[0]
        if slot_value <= INVALID_INDEX or slot_value > idx:
            slot_value = INVALID_INDEX
        if idx <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        _ENTRY.pack_into(
            mm,
            self._entries_base + idx * INDEX_SIZE,
            key_hash,
            phy_offset,
            self._time_diff(store_timestamp),
            slot_value,
        )
        _SLOT.pack_into(mm, abs_slot, idx)
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = idx + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        self.dirty = True
        return True

    def put_hashed_batch(
        self, key_hashes: np.ndarray, phy_offsets: np.ndarray, timestamps: np.ndarray
    ) -> int:
        """Append entries in order (vectorised); returns how many fit (the rest need a new file).

        Produces byte-for-byte what the same sequence of :meth:`put_hashed` calls would.
        """
        base = self.index_count
        n = min(len(key_hashes), self.index_num - base)
        if n <= 0:
            return 0
        hashes = np.asarray(key_hashes[:n], dtype=np.int64)
        offs = np.asarray(phy_offsets[:n], dtype=np.int64)
        tss = np.asarray(timestamps[:n], dtype=np.int64)
        if base <= 1:
            self.begin_phy_offset = int(offs[0])
            self.begin_timestamp = int(tss[0])
        begin = self.begin_timestamp
        if begin <= 0:
            diffs = np.zeros(n, dtype=np.int64)
        else:
            diffs = np.clip((tss - begin) // 1000, 0, INT_MAX)

        idx = np.arange(base, base + n, dtype=np.int64)
        slots = hashes % self.hash_slot_num
        order = np.argsort(slots, kind="stable")
        s_sorted = slots[order]
        idx_sorted = idx[order]
        boundary = s_sorted[1:] != s_sorted[:-1]
        is_first = np.empty(n, dtype=bool)
        is_first[0] = True
        is_first[1:] = boundary
        is_last = np.empty(n, dtype=bool)
        is_last[-1] = True
        is_last[:-1] = boundary
        # chain: an entry's predecessor is the previous entry of the batch in its slot, or for the
        # first one the slot's current head (if valid at that point, as RocketMQ checks it)
        prev_sorted = np.empty(n, dtype=np.int64)
        prev_sorted[1:] = idx_sorted[:-1]
        first_slots = s_sorted[is_first]
        heads = self._slots[first_slots].astype(np.int64)
        valid = (heads > INVALID_INDEX) & (heads <= idx_sorted[is_first])
        heads[~valid] = INVALID_INDEX
        prev_sorted[is_first] = heads
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_sorted

        out = self._entries[base : base + n]
        out["key_hash"] = hashes
        out["phy_offset"] = offs
        out["time_diff"] = diffs
        out["prev_index"] = prev
        self._slots[s_sorted[is_last]] = idx_sorted[is_last]

        self.hash_slot_count += int(np.count_nonzero(~valid))
        self.index_count = base + n
        self.end_phy_offset = int(offs[-1])
        self.end_timestamp = int(tss[-1])
        self._write_header()
        self.dirty = True
        return n

    # ------------------------------------------------------------------ reads

    def select_phy_offsets(
        self, out: list[int], seen: set[int], key_hash: int, max_num: int, begin: int, end: int
    ) -> None:
        """Append to ``out`` the offsets (newest first, skipping ``seen``) of entries with ``key_hash``
        whose reconstructed timestamp lies in [begin, end], until ``out`` holds ``max_num``."""
        count = self.index_count
        if count <= 1:
            return
        mm = self._mm
        nxt = _SLOT.unpack_from(mm, HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE)[0]
        if nxt <= INVALID_INDEX or nxt > count:
            return
        base = self._entries_base
        file_begin = self.begin_timestamp
        unpack = _ENTRY.unpack_from
        while len(out) < max_num:
            kh, off, diff, prev = unpack(mm, base + nxt * INDEX_SIZE)
            if diff < 0:
                break
            t = file_begin + diff * 1000
            if kh == key_hash and begin <= t <= end and off not in seen:
                seen.add(off)
                out.append(off)
            # chains only point backwards; anything else is a torn/corrupt file, stop rather than loop
            if prev <= INVALID_INDEX or prev >= nxt or t < begin:
                break
            nxt = prev

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        if self._mm is None:
            return
        self._write_header()
        self._mm.flush()
        self.dirty = False

    def close(self) -> None:
        if self._mm is None:
            return
        try:
            self.flush()
        except (OSError, ValueError):
            log.exception("flush of index file %s failed on close", self.path)
        self._unmap()

    def _unmap(self) -> None:
        mm = self._mm
        self._slots = None
        self._entries = None
        self._mm = None
        try:
            mm.close()
        except BufferError:  # a numpy view still alive somewhere (e.g. in a traceback): unmapped on GC
            log.warning("index file %s still has live views; unmapping deferred", self.path)

    def destroy(self) -> bool:
        if self._mm is not None:
            self._unmap()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        except OSError:
            log.exception("could not delete index file %s", self.path)
            return False
        return True

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.name}, count={self.index_count}/{self.index_num}, "
            f"ts=[{self.begin_timestamp},{self.end_timestamp}], "
            f"phy=[{self.begin_phy_offset},{self.end_phy_offset}])"
        )
