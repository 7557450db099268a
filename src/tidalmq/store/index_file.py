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
from collections.abc import Sequence
from operator import mul

import numpy as np

from tidalmq.common.fileutil import reserve_file_space, sync_mapped
from tidalmq.common.taghash import java_string_hash

log = logging.getLogger("tidalmq.store.index")

HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
# Entries' space is reserved this much ahead of the writes (see IndexFile._reserve_for).
RESERVE_CHUNK = 8 * 1024 * 1024
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


_MASK32 = 0xFFFFFFFF
#: ASCII keys up to this long are hashed by index_key_hash as one dot product of bytes and powers of 31
_SCALAR_MAX_LEN = 512
_SCALAR_WEIGHTS: dict[int, tuple[int, ...]] = {}  # key length n -> 31**(n-1-i) mod 2**32 for i < n


def index_key_hash(key: str) -> int:
    """RocketMQ's ``indexKeyHashMethod``: ``Math.abs(key.hashCode())``, and 0 where that overflows.

    ``Math.abs(Integer.MIN_VALUE)`` is ``Integer.MIN_VALUE`` (still negative), which RocketMQ maps to 0.
    """
    n = len(key)
    if n <= _SCALAR_MAX_LEN and key.isascii():  # one UTF-16 unit per byte: sum(c[i] * 31**(n-1-i))
        w = _SCALAR_WEIGHTS.get(n)
        if w is None:
            w = _SCALAR_WEIGHTS[n] = tuple(pow(31, n - 1 - i, 1 << 32) for i in range(n))
        h = sum(map(mul, key.encode("ascii"), w)) & _MASK32
    else:
        h = java_string_hash(key) & _MASK32
    if h < 0x80000000:
        return h
    return 0 if h == 0x80000000 else 0x100000000 - h


_INV31 = pow(31, -1, 1 << 32)  # 31 is odd, so it has an inverse mod 2**32
#: 31**k and 31**-k mod 2**32, grown on demand by _pow_tables
_POW31 = np.ones(1, dtype=np.uint32)
_INV31_POW = np.ones(1, dtype=np.uint32)
#: 31**(L-1-i) mod 2**32 for i < L as float64, per key length L (the weights of one row of the key matrix)
_ROW_WEIGHTS: dict[int, np.ndarray] = {}
#: widest all-ASCII key matrix hashed through float64 matmul: 127 * (2**32 - 1) * width stays below 2**53,
#: so every dot product is exact
_MATMUL_MAX_WIDTH = 8192
#: most UTF-16 units hashed in one prefix-sum pass (bounds the cached power tables)
_PREFIX_SUM_MAX_UNITS = 1 << 20


def _pow_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(31**k, 31**-k) mod 2**32 as uint32, for k < n at least."""
    global _POW31, _INV31_POW
    if len(_POW31) < n:
        size = max(n, 2 * len(_POW31), 1024)
        p = np.full(size, 31, dtype=np.uint64)
        q = np.full(size, _INV31, dtype=np.uint64)
        p[0] = q[0] = 1
        with np.errstate(over="ignore"):  # uint64 wraps mod 2**64, which keeps the low 32 bits right
            pw = np.cumprod(p, dtype=np.uint64).astype(np.uint32)
            inv = np.cumprod(q, dtype=np.uint64).astype(np.uint32)
        _POW31, _INV31_POW = pw, inv
    return _POW31, _INV31_POW


def _row_weights(width: int) -> np.ndarray:
    w = _ROW_WEIGHTS.get(width)
    if w is None:
        if len(_ROW_WEIGHTS) >= 256:
            _ROW_WEIGHTS.clear()
        w = _ROW_WEIGHTS[width] = _pow_tables(width)[0][:width][::-1].astype(np.float64)
    return w


def string_hashes(keys: Sequence[str]) -> tuple[np.ndarray, int | np.ndarray]:
    """Java ``String.hashCode`` of each key mod 2**32 (uint32), and the keys' lengths in UTF-16 units
    (an int when all keys have that length, else an int64 array).

    All-ASCII keys of one length (the usual batch: 32-char unique keys) are hashed as an (n, L) byte
    matrix times the vector of 31**(L-1-i); anything else as prefix sums over the UTF-16 units weighted by
    31**-i: hash(units[a:b]) = 31**(b-1) * (S[b] - S[a]) mod 2**32, where S[j] = sum(u[i] * 31**-i, i < j).
    """
    n = len(keys)
    joined = "".join(keys)
    if joined.isascii():
        data = joined.encode("ascii")
        width = len(data) // n if n else 0
        if width * n == len(data) and width <= _MATMUL_MAX_WIDTH and min(map(len, keys), default=0) == width:
            m = np.frombuffer(data, dtype=np.uint8).reshape(n, width)
            return (m @ _row_weights(width)).astype(np.int64).astype(np.uint32), width
        units = np.frombuffer(data, dtype=np.uint8)
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    else:
        units = np.frombuffer(joined.encode("utf-16-be"), dtype=">u2")
        if len(units) == len(joined):  # BMP only: one UTF-16 unit per code point
            lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
        else:
            lengths = np.fromiter((len(k.encode("utf-16-be")) >> 1 for k in keys), dtype=np.int64, count=n)
    total = len(units)
    if total > _PREFIX_SUM_MAX_UNITS and n > 1:
        half = n // 2
        h1, _ = string_hashes(keys[:half])
        h2, _ = string_hashes(keys[half:])
        return np.concatenate((h1, h2)), lengths
    pw, inv = _pow_tables(total + 1)
    sums = np.empty(total + 1, dtype=np.uint32)
    sums[0] = 0
    terms = sums[1:]
    np.multiply(units, inv[:total], out=terms)
    np.add.accumulate(terms, out=terms)  # uint32 wraps: mod 2**32
    ends = np.add.accumulate(lengths)
    h = sums[ends]
    h -= sums[ends - lengths]
    h *= pw[ends - 1]  # an empty key has ends - 1 = -1 here, but a zero sum
    return h, lengths


def prefix_hash(prefix: str) -> int:
    """Java ``hashCode`` of ``prefix`` mod 2**32 (the state to continue hashing ``prefix + key`` from)."""
    return java_string_hash(prefix) & _MASK32


def index_hashes_with_prefix(
    prefix_hashes: int | np.ndarray, hashes: np.ndarray, lengths: int | np.ndarray
) -> np.ndarray:
    """:func:`index_key_hash` of ``prefix + key`` from the keys' :func:`string_hashes` and ``lengths`` and
    the prefixes' :func:`prefix_hash` (one int, or a uint32 array with one per key), as an int32 array.

    Uses hash(p + k) = hash(p) * 31**len(k) + hash(k) mod 2**32. Overwrites ``hashes``.
    """
    h = hashes
    if isinstance(lengths, int):
        p = pow(31, lengths, 1 << 32)
        if isinstance(prefix_hashes, int):
            if prefix_hashes:
                h += (prefix_hashes * p) & _MASK32
        else:
            h += prefix_hashes * np.uint32(p)
    else:
        try:
            pows = _POW31[lengths]
        except IndexError:  # lengths string_hashes did not make: grow the table
            pows = _pow_tables(int(lengths.max()) + 1)[0][lengths]
        if isinstance(prefix_hashes, int):
            if prefix_hashes:
                pows *= np.uint32(prefix_hashes)
                h += pows
        else:
            pows *= prefix_hashes
            h += pows
    v = h.view(np.int32)
    np.abs(v, out=v)  # Math.abs: MIN_VALUE stays MIN_VALUE ...
    np.maximum(v, 0, out=v)  # ... which RocketMQ maps to 0
    return v


def index_key_hashes(keys: Sequence[str], prefix: str = "") -> np.ndarray:
    """Vectorised :func:`index_key_hash` of ``prefix + key`` for each key (int32 array)."""
    h, lengths = string_hashes(keys)
    return index_hashes_with_prefix(prefix_hash(prefix), h, lengths)


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

        # Bytes from the start known to be backed by blocks. Reserved as entries are appended, a chunk
        # at a time, so an index file costs its slots plus what it holds, not 420 MB at once; a loaded
        # file (perhaps sparse, from an older version) is checked on its first write.
        self._reserved_to = 0
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if not create:
                actual = os.fstat(fd).st_size
                if actual != self.file_size:
                    raise ValueError(
                        f"index file {path} is {actual} bytes, expected {self.file_size} "
                        f"(hash_slot_num={hash_slot_num}, index_num={index_num})"
                    )
            if create:
                # Sized here, but blocks are reserved (``_reserve_for``) before anything is stored through
                # the mapping: a store into a hole on a full disk is a SIGBUS. The tail beyond the
                # reservation is never written until it is reserved in turn.
                os.ftruncate(fd, self.file_size)
                self._reserve_for(1)
            # None once unmapped (``closed``); every other method runs only on an open file.
            self._mm: mmap.mmap | None = mmap.mmap(
                fd, self.file_size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE
            )
        except BaseException:
            if create:
                os.unlink(path)
            raise
        finally:
            os.close(fd)
        self._slots = np.frombuffer(self._mm, dtype=">i4", count=hash_slot_num, offset=HEADER_SIZE)
        self._entries = np.frombuffer(self._mm, dtype=ENTRY_DTYPE, count=index_num, offset=self._entries_base)
        # per-field views, so that a batch writes each field with one strided copy
        self._e_key_hash = self._entries["key_hash"]
        self._e_phy_offset = self._entries["phy_offset"]
        self._e_time_diff = self._entries["time_diff"]
        self._e_prev_index = self._entries["prev_index"]
        # hashes are int32 or int64; numpy keeps the remainder in the hashes' type if the divisor fits it
        self._slot_mod = np.int32(hash_slot_num) if hash_slot_num <= INT_MAX else np.int64(hash_slot_num)

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
            self._write_header(self._mm)
        else:
            self._load_header(self._mm)
        self.dirty = create

    # ------------------------------------------------------------------ header

    def _load_header(self, mm: mmap.mmap) -> None:
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = _HEADER.unpack_from(mm, 0)
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

    def _write_header(self, mm: mmap.mmap) -> None:
        _HEADER.pack_into(mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                          self.end_phy_offset, self.hash_slot_count, self.index_count)

    # ------------------------------------------------------------------ state

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def closed(self) -> bool:
        return self._mm is None

    def _open_map(self) -> mmap.mmap:
        mm = self._mm
        assert mm is not None, "index file used after close"  # callers check ``closed`` first
        return mm

    def _reserve_for(self, entries: int) -> None:
        """Make sure the header, the slots and the first ``entries`` entries are backed by blocks before
        they are stored through the mapping; raises DiskFullError (nothing was written then)."""
        need = self._entries_base + entries * INDEX_SIZE
        if need <= self._reserved_to:
            return
        upto = min(self.file_size, max(need, self._reserved_to + RESERVE_CHUNK))
        fd = os.open(self.path, os.O_RDWR)
        try:
            reserve_file_space(fd, upto)
        finally:
            os.close(fd)
        self._reserved_to = upto

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
        self._reserve_for(idx + 1)
        mm = self._mm
        assert mm is not None, "index file used after close"  # inline: once per key (_put_scalar)
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
        self._write_header(mm)
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
        self._reserve_for(base + n)
        if n < len(key_hashes):
            key_hashes, phy_offsets, timestamps = key_hashes[:n], phy_offsets[:n], timestamps[:n]
        hashes = np.asarray(key_hashes)
        offs = np.asarray(phy_offsets, dtype=np.int64)
        tss = np.asarray(timestamps, dtype=np.int64)
        if base <= 1:
            self.begin_phy_offset = int(offs[0])
            self.begin_timestamp = int(tss[0])
        begin = self.begin_timestamp

        idx = np.arange(base, base + n, dtype=np.int32)  # entry numbers fit the header's i32 count
        slots = hashes % self._slot_mod
        slot_view = self._slots
        heads = slot_view[slots]
        slot_view[slots] = idx
        # The usual batch: no two entries share a slot, and every old head is 0 (empty) or an entry before
        # the batch, so RocketMQ's check (slotValue in (0, indexCount]) comes down to "not 0" and each
        # entry's predecessor is its slot's old head.
        if n <= 128:
            distinct = len(set(slots.tolist())) == n
        else:  # the slots just written read back as the entry numbers unless two entries share one
            distinct = not np.count_nonzero(slot_view[slots] != idx)
        if distinct and not np.count_nonzero(heads.view(">u4") >= base):  # as unsigned: negatives too
            prev = heads
            new_slots = n - int(np.count_nonzero(heads))
        else:
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
            # first one the slot's head before the batch (if valid at that point, as RocketMQ checks it)
            prev_sorted = np.empty(n, dtype=np.int64)
            prev_sorted[1:] = idx_sorted[:-1]
            first_heads = heads[order][is_first].astype(np.int64)
            valid = (first_heads > INVALID_INDEX) & (first_heads <= idx_sorted[is_first])
            first_heads[~valid] = INVALID_INDEX
            prev_sorted[is_first] = first_heads
            prev = np.empty(n, dtype=np.int64)
            prev[order] = prev_sorted
            slot_view[s_sorted[is_last]] = idx_sorted[is_last]
            new_slots = int(np.count_nonzero(~valid))

        end = base + n
        self._e_key_hash[base:end] = hashes
        self._e_phy_offset[base:end] = offs
        if begin <= 0:
            self._e_time_diff[base:end] = 0
        else:
            diffs = tss - begin
            diffs //= 1000
            np.maximum(diffs, 0, out=diffs)
            self._e_time_diff[base:end] = np.minimum(diffs, INT_MAX, out=diffs)
        self._e_prev_index[base:end] = prev

        self.hash_slot_count += new_slots
        self.index_count = end
        self.end_phy_offset = int(offs[-1])
        self.end_timestamp = int(tss[-1])
        self._write_header(self._open_map())
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
        mm = self._open_map()
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

    def write_header(self) -> None:
        """Put the header's current values into the mapping (the disk sees them at the next sync)."""
        if self._mm is not None:
            self._write_header(self._mm)

    def flush(self) -> None:
        if self._mm is None:
            return
        self.write_header()
        sync_mapped(self.path)
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
        mm = self._open_map()
        # Drop the numpy views, or the mapping cannot be closed. Deleted rather than set to None, so each
        # keeps one type; only an open file (``_mm`` not None) reads them.
        del self._slots, self._entries
        del self._e_key_hash, self._e_phy_offset, self._e_time_diff, self._e_prev_index
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
