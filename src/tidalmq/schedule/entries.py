"""The entry arrays exchanged with the caller, and the pure numpy helpers that order, de-duplicate and cancel them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

# What the caller hands to enqueue() and gets back from pop_due(). ``flags`` carries MAGIC_DELETE for a cancel
# marker (a TIMER_DEL_UNIQKEY message); it is 0 on everything pop_due() returns.
ENTRY_DTYPE = np.dtype(
    [("deliver_ms", "<i8"), ("offset", "<i8"), ("uhash", "<i8"), ("size", "<i4"), ("flags", "<i4")]
)


_BLAKE2B_8 = hashlib.blake2b(digest_size=8)  # copied per key: cheaper than setting the parameters up again
_NO_KEY = bytes(8)  # hash 0: a message without a uniq key, which no cancel names


def _digest(key: str | bytes) -> bytes:
    h = _BLAKE2B_8.copy()
    h.update(key.encode() if isinstance(key, str) else key)
    return h.digest()


def uniq_hash(key: str) -> int:
    """A 64-bit hash of RocketMQ's delete key (``realTopic + "+" + uniqKey``), signed to fit an int64 column:
    blake2b with an 8-byte digest, read little-endian.

    A cancel matches on (deliver_ms, hash); with 64 bits a false match needs two keys colliding at the same
    millisecond, about 2**-64 per pair."""
    return int.from_bytes(_digest(key), "little", signed=True)


def uniq_hashes(keys: Iterable[str | bytes | None]) -> list[int]:
    """``uniq_hash`` of each key (text, or its UTF-8 bytes), 0 for None: the digests joined and read as
    int64s at once (the timer's enqueue hashes every parked message's key; one int conversion per key was a
    third of the cost)."""
    return np.frombuffer(b"".join([_NO_KEY if k is None else _digest(k) for k in keys]), "<i8").tolist()


def make_entries(
    rows: Iterable[Sequence[int]] | None = None,
    *,
    deliver_ms: Sequence[int] | np.ndarray | None = None,
    offset: Sequence[int] | np.ndarray | None = None,
    size: Sequence[int] | np.ndarray | int = 0,
    uhash: Sequence[int] | np.ndarray | int = 0,
    flags: Sequence[int] | np.ndarray | int = 0,
) -> np.ndarray:
    """Build an ENTRY_DTYPE array from tuples (deliver_ms, offset, size[, uhash[, flags]]) or from columns."""
    if rows is not None:
        rows = [tuple(r) for r in rows]
        out = np.zeros(len(rows), ENTRY_DTYPE)
        for name, col in zip(
            ("deliver_ms", "offset", "size", "uhash", "flags"), zip(*rows, strict=False), strict=False
        ):
            out[name] = col
        return out
    assert deliver_ms is not None and offset is not None
    d = np.asarray(deliver_ms, dtype=np.int64)
    out = np.zeros(len(d), ENTRY_DTYPE)
    out["deliver_ms"] = d
    out["offset"] = offset
    out["size"] = size
    out["uhash"] = uhash
    out["flags"] = flags
    return out


def sort_dedup(e: np.ndarray) -> np.ndarray:
    """Order by (deliver_ms, offset) and keep one of each (deliver_ms, offset).

    A duplicate is the same CommitLog message indexed twice (a roll redone after a crash, a replay): delivering
    it once is what the caller wants."""
    if len(e) < 2:
        return e.copy()
    order = np.lexsort((e["offset"], e["deliver_ms"]))
    s = e[order]
    keep = np.ones(len(s), dtype=bool)
    keep[1:] = (s["deliver_ms"][1:] != s["deliver_ms"][:-1]) | (s["offset"][1:] != s["offset"][:-1])
    return s[keep]


def drop_cancelled(e: np.ndarray, marker_ms: np.ndarray, marker_hash: np.ndarray) -> np.ndarray:
    """Remove the entries whose (deliver_ms, uhash) matches a delete marker (TIMER_DEL_UNIQKEY semantics)."""
    if len(e) == 0 or len(marker_ms) == 0:
        return e
    # Sort markers and entries together; inside a run of equal (ms, hash), markers sort first, so an entry is
    # cancelled when its run starts with a marker. Vectorised, exact (no combined-key hashing).
    n_m = len(marker_ms)
    ms = np.concatenate([marker_ms, e["deliver_ms"]])
    hs = np.concatenate([marker_hash, e["uhash"]])
    is_entry = np.concatenate([np.zeros(n_m, np.int8), np.ones(len(e), np.int8)])
    order = np.lexsort((is_entry, hs, ms))
    sm, sh, se = ms[order], hs[order], is_entry[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = (sm[1:] != sm[:-1]) | (sh[1:] != sh[:-1])
    run_id = np.cumsum(start) - 1
    run_has_marker = se[start] == 0
    cancelled_sorted = run_has_marker[run_id] & (se == 1)
    cancelled = np.zeros(len(order), dtype=bool)
    cancelled[order] = cancelled_sorted
    return e[~cancelled[n_m:]]
