"""The message-key index (RocketMQ's ``IndexService``): a list of :class:`IndexFile`, oldest first.

Each dispatched message is indexed under ``topic#uniqKey`` (when it has one) and ``topic#key`` for each of
its keys, in that order, as RocketMQ does. Index files are named by their creation time
(``yyyyMMddHHmmssSSS``, local time) in ``store_path_index``; only the newest one is written to, and a new
one is created when it is full.

Semantics kept from RocketMQ, which callers should know:

* A record whose CommitLog offset is below the newest indexed offset is skipped, so re-dispatching from
  an older position does not index things twice (the record *at* that offset may be indexed again;
  queries de-duplicate). This rule is switched off after ``load(last_exit_ok=False)`` without a
  checkpoint timestamp: then the CommitLog may have been truncated below the newest indexed offset and
  new records reuse those offsets, so everything re-dispatched is indexed (duplicates are harmless).
  Entries for a torn CommitLog tail stay in the index; callers must check that an offset still holds a
  message with the key (RocketMQ's clients do the same, because of hash collisions).
* Timestamps are stored as whole seconds after the file's first entry, so the time filter of a query sees
  ``begin + floor((ts - begin) / 1000) * 1000``, not the exact store timestamp.
* Lookups match on the key hash; distinct keys with equal Java ``hashCode`` share results.
* Walks stop at the first entry older than ``begin_ts`` (store timestamps are non-decreasing along the
  CommitLog).
* Rolled-back transactional messages are not filtered here: the caller must not pass them.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any, Protocol, cast

import numpy as np

from tidalmq.common.fileutil import sync_mapped
from tidalmq.common.message import KEY_SEPARATOR
from tidalmq.store.index_file import (
    IndexFile,
    index_file_size,
    index_hashes_with_prefix,
    index_key_hash,
    prefix_hash,
    string_hashes,
)

log = logging.getLogger("tidalmq.store.index")

_FILE_NAME = re.compile(r"^\d{17}$")

IndexItem = tuple[str, "list[str] | str | None", "str | None", int, int]

_LIST = {list}


def _human_time(ms: int) -> str:
    """RocketMQ's ``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


class IndexServiceLike(Protocol):
    """What the store asks of its index: an ``IndexService``, or one a test or tool hands it."""

    @property
    def max_index_commit_log_offset(self) -> int: ...
    def load(self, last_exit_ok: bool) -> bool: ...
    def build_index_batch(self, items: list[tuple[str, list[str] | None, str | None, int, int]]) -> None: ...
    def build_index_columns(self, topics: Sequence[str], keyss: Sequence[list[str] | None],
                            uniqs: Sequence[str | None], offsets: np.ndarray, timestamps: np.ndarray) -> None: ...
    def query_offsets(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]: ...
    def flush(self) -> None: ...
    def delete_expired(self, min_commit_log_offset: int) -> Any: ...
    def destroy(self) -> None: ...
    def close(self) -> None: ...


class IndexService:
    #: rounds of fewer records than this, or with fewer index entries, take the per-entry path, which
    #: beats numpy's fixed cost per call there
    vector_threshold = 8

    def __init__(
        self, store_path_index: str, max_hash_slot_num: int = 5_000_000, max_index_num: int = 20_000_000
    ) -> None:
        if max_hash_slot_num <= 0 or max_index_num <= 1:
            raise ValueError("max_hash_slot_num must be > 0 and max_index_num > 1")
        self.store_path = store_path_index
        self.hash_slot_num = max_hash_slot_num
        self.index_num = max_index_num
        self.file_size = index_file_size(max_hash_slot_num, max_index_num)
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()
        self._loaded = False
        self._closed = False
        self._flushed_index_msg_timestamp = 0
        self._skip_indexed = True  # RocketMQ's "offset < endPhyOffset -> already indexed" rule
        self._topic_hashes: dict[str, int] = {}  # topic -> prefix_hash(topic + "#")

    # ------------------------------------------------------------------ lifecycle

    def load(self, last_exit_ok: bool, index_msg_timestamp: int | None = None) -> bool:
        """Open the index files on disk, oldest first. Returns False if one cannot be opened.

        After an unclean exit RocketMQ drops the files whose end timestamp is after the checkpoint's
        index timestamp; pass ``index_msg_timestamp`` to do the same. Without it all files are kept and
        the store's re-dispatch fills the gap (see the class notes on duplicates).
        """
        with self._lock:
            return self._load_locked(last_exit_ok, index_msg_timestamp)

    def _load_locked(self, last_exit_ok: bool, index_msg_timestamp: int | None) -> bool:
        self._close_files()
        self._closed = False
        self._loaded = True
        self._skip_indexed = last_exit_ok or index_msg_timestamp is not None
        try:
            names = sorted(os.listdir(self.store_path))
        except FileNotFoundError:
            return True
        for name in names:
            path = os.path.join(self.store_path, name)
            if not _FILE_NAME.match(name) or not os.path.isfile(path):
                log.warning("ignoring %s in the index directory", path)
                continue
            try:
                f = IndexFile(path, self.hash_slot_num, self.index_num, create=False)
            except (OSError, ValueError):
                log.exception("load index file %s failed", path)
                self._close_files()
                return False
            if not last_exit_ok and index_msg_timestamp is not None and f.end_timestamp > index_msg_timestamp:
                log.info("dropping index file %s written after the checkpoint", path)
                f.destroy()
                continue
            log.info("loaded index file %r", f)
            self._files.append(f)
        return True

    def flush(self) -> None:
        """Make every index file written since the last flush durable (header written, file synced).

        The files are picked and their headers written under the lock; the syncs run outside it, since
        the reput thread (and the event loop's inline dispatch) takes the lock to index every round: a
        write-back of many MiB would hold them all that long. Entries indexed while a sync runs may or may
        not be in it; the next flush has them (the file is dirty again). A file deleted by retention
        meanwhile needs no sync."""
        with self._lock:
            picked: list[tuple[IndexFile, bool, int]] = []
            for f in self._files:
                if f.dirty and not f.closed:
                    picked.append((f, f.is_write_full(), f.end_timestamp))
                    f.write_header()
                    f.dirty = False
        for i, (f, full, end_ts) in enumerate(picked):
            try:
                sync_mapped(f.path)
            except FileNotFoundError:
                continue
            except OSError:
                with self._lock:  # this file and those after it: synced by the next flush
                    for g, _, _ in picked[i:]:
                        g.dirty = True
                raise
            if full:
                self._flushed_index_msg_timestamp = max(self._flushed_index_msg_timestamp, end_ts)

    def close(self) -> None:
        with self._lock:
            self._close_files()
            self._closed = True

    def destroy(self) -> None:
        """Delete every index file (the directory itself is left)."""
        with self._lock:
            for f in self._files:
                f.destroy()
            self._files.clear()

    def _close_files(self) -> None:
        for f in self._files:
            try:
                f.close()
            except Exception:
                log.exception("closing index file %s failed", f.path)
        self._files.clear()

    def _ensure_loaded(self) -> None:
        if self._closed:
            raise RuntimeError("IndexService is closed")
        if not self._loaded:
            # forgiving default: never shadow files already on disk with a fresh one
            self._load_locked(True, None)

    # ------------------------------------------------------------------ state for recovery / admin

    @property
    def max_index_commit_log_offset(self) -> int:
        """endPhyOffset of the newest index file (0 when there is none)."""
        with self._lock:
            return self._files[-1].end_phy_offset if self._files else 0

    @property
    def end_timestamp(self) -> int:
        """endTimestamp of the newest index file (0 when there is none)."""
        with self._lock:
            return self._files[-1].end_timestamp if self._files else 0

    @property
    def index_msg_timestamp(self) -> int:
        """End timestamp of the newest *full* file flushed by :meth:`flush` (RocketMQ's checkpoint value)."""
        return self._flushed_index_msg_timestamp

    @property
    def file_paths(self) -> list[str]:
        with self._lock:
            return [f.path for f in self._files]

    @property
    def total_size(self) -> int:
        with self._lock:
            return self.file_size * len(self._files)

    # ------------------------------------------------------------------ files

    def _writable_file(self) -> IndexFile:
        """The newest file if it has room, else a new one (continuing the previous one's end)."""
        last = self._files[-1] if self._files else None
        if last is not None and not last.is_write_full():
            return last
        os.makedirs(self.store_path, exist_ok=True)
        name = _human_time(int(time.time() * 1000))
        if last is not None and name <= last.name:
            name = f"{int(last.name) + 1:017d}"
        while os.path.exists(os.path.join(self.store_path, name)):
            name = f"{int(name) + 1:017d}"
        end_phy = last.end_phy_offset if last is not None else 0
        end_ts = last.end_timestamp if last is not None else 0
        f = IndexFile(
            os.path.join(self.store_path, name),
            self.hash_slot_num,
            self.index_num,
            end_phy,
            end_ts,
            create=True,
        )
        if last is not None:
            log.info("index file %s is full, rolled to %s", last.name, name)
        self._files.append(f)
        return f

    # ------------------------------------------------------------------ build

    def build_index(
        self,
        topic: str,
        keys: list[str] | str | None,
        uniq_key: str | None,
        commit_log_offset: int,
        store_timestamp: int,
    ) -> None:
        self.build_index_batch([(topic, keys, uniq_key, commit_log_offset, store_timestamp)])

    def build_index_columns(self, topics: Sequence[str], keyss: Sequence[list[str] | None], uniqs: Sequence[str | None],
                            offsets: np.ndarray, timestamps: np.ndarray) -> None:
        """``build_index_batch`` for a round already held column by column (the store's dispatch)."""
        with self._lock:
            self._ensure_loaded()
            skip = self._skip_indexed
            last_off = self._files[-1].end_phy_offset if self._files and skip else -(2**63)
            if len(offsets) >= self.vector_threshold:
                batch = self._columns_of(topics, keyss, uniqs, offsets.tolist(), timestamps.tolist(), skip, last_off,
                                         offsets, timestamps)
                if batch is not None:
                    self._put_vector(*batch)
                    return
        self.build_index_batch(list(zip(topics, keyss, uniqs, offsets.tolist(), timestamps.tolist(), strict=True)))

    def build_index_batch(self, items: Iterable[IndexItem]) -> None:
        """Index many dispatched records, in CommitLog order. ``keys`` may be a list or RocketMQ's
        space-separated KEYS string; empty keys are ignored."""
        if not isinstance(items, list | tuple):
            items = list(items)
        with self._lock:
            self._ensure_loaded()
            skip = self._skip_indexed
            last_off = self._files[-1].end_phy_offset if self._files and skip else -(2**63)
            if len(items) >= self.vector_threshold:
                batch = self._columns(items, skip, last_off)
                if batch is not None:
                    self._put_vector(*batch)
                    return
            collected = self._collect(items, skip, last_off)
            if collected is None:
                return
            keys, topics, offs, tss = collected
            if len(keys) < self.vector_threshold:
                self._put_scalar(keys, topics, offs, tss)
            else:
                h, lengths = string_hashes(keys)
                hashes = index_hashes_with_prefix(self._prefix_hashes(topics), h, lengths)
                self._put_vector(hashes, np.array(offs, dtype=np.int64), np.array(tss, dtype=np.int64))

    def _columns(
        self, items: list[IndexItem] | tuple[IndexItem, ...], skip: bool, last_off: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Key hashes, offsets and timestamps of a round's index entries, in index order, computed column
        by column without a Python step per record. Handles the rounds the reput thread makes: every
        record has a unique key, ``keys`` are lists (or empty) without empty strings, and no record is
        skipped. Returns None for any other round (then :meth:`_collect` goes through it record by record).
        """
        try:  # (not strict: that costs a third more, and short items still fail the unpacking)
            topics, keyss, uniqs, offs, tss = zip(*items)  # noqa: B905
        except (TypeError, ValueError):
            return None
        return self._columns_of(topics, keyss, uniqs, offs, tss, skip, last_off)

    def _columns_of(
        self, topics: Sequence[str], keyss: Sequence[list[str] | str | None], uniqs: Sequence[str | None],
        offs: Sequence[int],
        tss: Sequence[int], skip: bool, last_off: int, off_arr: np.ndarray | None = None,
        ts_arr: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`_columns` once the round is in columns."""
        if None in uniqs:
            return None
        # Both checked here, once per round: no unique key is None, and (when any record has keys) every
        # record's keys are a list; other rounds go the per-record way.
        uniq_keys = cast("Sequence[str]", uniqs)
        key_lists = cast("Sequence[list[str]]", keyss)
        no_keys = not any(keyss)
        if not no_keys and (
            set(map(type, keyss)) != _LIST or "" in (flat := list(chain.from_iterable(key_lists)))
        ):
            return None
        n = len(offs)
        if off_arr is None:
            off_arr = np.fromiter(offs, dtype=np.int64, count=n)
        if skip and (offs[0] < last_off or np.count_nonzero(off_arr[1:] < off_arr[:-1])):
            return None
        if ts_arr is None:
            ts_arr = np.fromiter(tss, dtype=np.int64, count=n)
        prefixes = self._prefix_hashes(topics)
        hashes = index_hashes_with_prefix(prefixes, *string_hashes(uniq_keys))
        if no_keys:
            return hashes, off_arr, ts_arr
        # each record: its unique key's entry, then one per key
        m = len(flat)
        counts = list(map(len, key_lists))
        c = counts[0]
        if counts.count(c) == n:  # the same number of keys in every record (usually 1)
            key_prefixes = prefixes if isinstance(prefixes, int) else np.repeat(prefixes, c)
            key_hashes = index_hashes_with_prefix(key_prefixes, *string_hashes(flat))
            out = np.empty((n, c + 1), dtype=np.int32)
            out[:, 0] = hashes
            out[:, 1:] = key_hashes.reshape(n, c)
            return out.reshape(n * (c + 1)), np.repeat(off_arr, c + 1), np.repeat(ts_arr, c + 1)
        per = np.array(counts, dtype=np.int64)
        key_prefixes = prefixes if isinstance(prefixes, int) else np.repeat(prefixes, per)
        key_hashes = index_hashes_with_prefix(key_prefixes, *string_hashes(flat))
        per += 1
        firsts = np.cumsum(per)
        firsts -= per
        merged = np.empty(n + m, dtype=np.int32)
        merged[firsts] = hashes
        is_key = np.ones(n + m, dtype=bool)
        is_key[firsts] = False
        merged[is_key] = key_hashes
        return merged, np.repeat(off_arr, per), np.repeat(ts_arr, per)

    @staticmethod
    def _collect(
        items: list[IndexItem] | tuple[IndexItem, ...], skip: bool, last_off: int
    ) -> tuple[list[str], list[str], list[int], list[int]] | None:
        """The index keys of the records not skipped (without their ``topic#`` prefix), in index order,
        and per key its topic, offset and timestamp. None when there is nothing to index."""
        idx_keys: list[str] = []
        topics: list[str] = []
        offs: list[int] = []
        tss: list[int] = []
        append_key = idx_keys.append
        extend_keys = idx_keys.extend
        for topic, keys, uniq_key, off, ts in items:
            if off < last_off:
                continue
            if keys:
                if isinstance(keys, str):
                    keys = keys.split(KEY_SEPARATOR)
                if "" in keys:
                    keys = [k for k in keys if k]
                if uniq_key is not None:
                    append_key(uniq_key)
                    extend_keys(keys)
                    n = len(keys) + 1
                else:
                    n = len(keys)
                    if not n:
                        continue
                    extend_keys(keys)
            elif uniq_key is not None:
                append_key(uniq_key)
                n = 1
            else:
                continue
            if skip:
                last_off = off
            if n == 1:
                topics.append(topic)
                offs.append(off)
                tss.append(ts)
            else:
                topics.extend([topic] * n)
                offs.extend([off] * n)
                tss.extend([ts] * n)
        return (idx_keys, topics, offs, tss) if idx_keys else None

    def _put_scalar(
        self, keys: Sequence[str], topics: Sequence[str], offs: Sequence[int], tss: Sequence[int]
    ) -> None:
        f = self._writable_file()
        for key, topic, off, ts in zip(keys, topics, offs, tss, strict=True):
            h = index_key_hash(topic + "#" + key)
            if not f.put_hashed(h, off, ts):
                f = self._writable_file()
                if not f.put_hashed(h, off, ts):  # pragma: no cover - a fresh file always has room
                    raise RuntimeError(f"cannot put key into fresh index file {f.path}")

    def _prefix_hashes(self, topics: Sequence[str]) -> int | np.ndarray:
        """Java hash state of ``topic#`` for the keys' topics: one int when they share one topic (the usual
        round), else a uint32 array with one per key."""
        cache = self._topic_hashes
        first = topics[0]
        if topics.count(first) == len(topics):
            h = cache.get(first)
            if h is None:
                if len(cache) > 65_536:
                    cache.clear()
                h = cache[first] = prefix_hash(first + "#")
            return h
        if len(cache) > 65_536:
            cache.clear()
        for t in set(topics):
            if t not in cache:
                cache[t] = prefix_hash(t + "#")
        return np.fromiter(map(cache.__getitem__, topics), dtype=np.uint32, count=len(topics))

    def _put_vector(self, hashes: np.ndarray, offs: np.ndarray, tss: np.ndarray) -> None:
        i, n = 0, len(hashes)
        while i < n:
            f = self._writable_file()
            if i:
                written = f.put_hashed_batch(hashes[i:], offs[i:], tss[i:])
            else:
                written = f.put_hashed_batch(hashes, offs, tss)
            if written == 0:  # pragma: no cover - _writable_file never returns a full file
                raise RuntimeError(f"cannot put keys into index file {f.path}")
            i += written

    # ------------------------------------------------------------------ query

    def query_offsets(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]:
        """CommitLog offsets of messages indexed under ``topic#key`` with (second-granular) timestamp
        in [begin_ts, end_ts]: newest first, de-duplicated, at most ``max_num``."""
        if max_num <= 0 or begin_ts > end_ts:
            return []
        key_hash = index_key_hash(topic + "#" + key)
        out: list[int] = []
        seen: set[int] = set()
        with self._lock:
            if self._closed:
                return []
            self._ensure_loaded()
            for f in reversed(self._files):
                if f.is_time_matched(begin_ts, end_ts):
                    f.select_phy_offsets(out, seen, key_hash, max_num, begin_ts, end_ts)
                if f.begin_timestamp < begin_ts or len(out) >= max_num:
                    break
        return out

    # ------------------------------------------------------------------ retention

    def delete_expired(self, min_commit_log_offset: int) -> int:
        """Delete the oldest files whose endPhyOffset is below ``min_commit_log_offset``; never the newest.
        Returns how many were deleted."""
        deleted = 0
        with self._lock:
            while len(self._files) > 1 and self._files[0].end_phy_offset < min_commit_log_offset:
                f = self._files.pop(0)
                if f.destroy():
                    log.info("deleted expired index file %s", f.path)
                    deleted += 1
        return deleted
