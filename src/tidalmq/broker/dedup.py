"""Idempotent produce: the broker's de-duplication window (``duplicationEnable``, docs/spark.md).

RocketMQ has none (a producer's retry after a lost answer stores the message twice); Pulsar's message
deduplication and Kafka's idempotent producer are the models. The key is the message's client id,
``UNIQ_KEY``: every client sets it once per message and keeps it across its own retries, so the common
duplicate (a send whose answer was lost, sent again) is caught without a client change, and a writer that
derives the key deterministically (the Spark sink: query, batch, partition, row) makes re-runs idempotent.

- A send whose key is in the window is answered with the original's SEND_OK result (its offset msgId,
  queueId, queueOffset) and not stored again. A batch whose every key is known is answered the same way;
  a batch with some known keys stores only the others.
- A send whose original is still being stored (between append request and answer) is answered
  SYSTEM_BUSY: the client backs off and its retry then gets the original's answer.
- Bounded: the oldest keys go a segment at a time past ``duplicationWindowSize`` keys or
  ``duplicationWindowSeconds`` (broker/dedup_index.py holds the keys: ~45 bytes each).
- Persisted: each frozen segment is saved once as a file (``<storePathRootDir>/config/duplication/``),
  and ``duplication.json`` lists the saved ones and the CommitLog offset where the newest segment begins;
  at load they are read and the CommitLog from there to its end is replayed through the same bounds (a
  crash leaves an older snapshot: more is replayed). Written at load, at each new segment, every
  ``duplicationSnapshotIntervalSeconds`` and at shutdown. Without one the replay starts at the start of
  the CommitLog file that holds the last ``_REBUILD_BYTES`` (a file starts with a record).

Pure bookkeeping here; the send processor calls ``screen`` before a put and ``settle`` after it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from tidalmq.broker.dedup_index import KeyIndex, Segment, key_hash
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.record import (
    DispatchProperties,
    RecordError,
    dispatch_properties,
    properties_span,
    view_record,
)
from tidalmq.common.record_batch import RecordBatch
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import SendMessageResponseHeader
from tidalmq.store.results import AppendResult, PutRequest, PutStatus

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.store.api import MessageStore
    from tidalmq.store.config import MessageStoreConfig

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "duplication.json"
SEGMENT_DIR = "duplication"  # the window's saved segments (broker/dedup_index.py), beside the snapshot
_REBUILD_BYTES = 64 << 20  # replayed when there is no snapshot (a first start with dedup, a lost file)
_REPLAY_CHUNK = 8 << 20
_UNIQ = b"UNIQ_KEY"
_CANCEL_MARKER = mc.property_key(mc.TIMER_DEL_UNIQKEY).encode()
IN_FLIGHT_REMARK = ("[DUPLICATE_IN_FLIGHT]the original of this message ({}) is being stored; retry for its "
                    "result")

Respond = Callable[[RemotingCommand], object]


class Original(NamedTuple):
    """Where the first copy of a key was stored: what its SEND_OK said."""

    phys: int
    queue_id: int
    queue_offset: int
    store_ts: int


def _uniq_in(found: DispatchProperties) -> str | None:
    for name, value in found:
        if name == _UNIQ:
            return value.decode("utf-8", "replace")
    return None


def window_key(topic: str, uniq: str) -> str:
    """A window entry's key: per topic, since forwarding a consumed message to another topic keeps its
    UNIQ_KEY (clients set one only where there is none)."""
    return f"{topic}/{uniq}"


def put_keys(put: PutRequest) -> list[str | None]:
    """The window key of each record of a put (None where a record has no UNIQ_KEY, or is a timer cancel,
    which carries its target's UNIQ_KEY)."""
    recs = put.records
    topic = put.topic
    if isinstance(recs, RecordBatch):  # a batch cannot carry a cancel (BATCH_FORBIDDEN_PROPERTIES)
        uniqs = [_uniq_in(f) for f in recs.dispatch_properties]
    else:
        uniqs = []
        for rec in recs:
            at, n = properties_span(rec)
            props = memoryview(rec)[at - 1 : at + n]
            uniqs.append(None if _CANCEL_MARKER in props.tobytes() else _uniq_in(dispatch_properties(rec, at, at + n)))
    return [window_key(topic, u) if u else None for u in uniqs]


def _record_offsets(put: PutRequest, res: AppendResult) -> list[int]:
    recs = put.records
    if isinstance(recs, RecordBatch):
        return (recs.starts + res.wrote_offset).tolist()
    out, at = [], res.wrote_offset
    for r in recs:
        out.append(at)
        at += len(r)
    return out


def _skipped_topic(topic: str) -> bool:
    """Re-sends by design keep the original's UNIQ_KEY (consumer send-back, DLQ): never deduplicated."""
    return topic.startswith((nm.RETRY_GROUP_TOPIC_PREFIX, nm.DLQ_GROUP_TOPIC_PREFIX))


class DuplicationWindow:
    def __init__(self, store: MessageStore, config_dir: str, *, window_seconds: int, window_size: int,
                 snapshot_interval_s: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.path = os.path.join(config_dir, SNAPSHOT_FILE)
        self.segment_dir = os.path.join(config_dir, SEGMENT_DIR)
        self.window_ms = window_seconds * 1000
        self.window_size = window_size
        self.snapshot_interval_s = snapshot_interval_s
        self.clock = clock
        self.index = KeyIndex(window_size, self.window_ms, clock)
        self.in_flight: dict[int, list[str | None]] = {}  # id(put) -> its keys, until settled
        self._in_flight_keys: set[str] = set()
        self.duplicates = 0  # sends (records) answered from the window
        self._loaded = False
        self._last_snapshot = 0.0
        self._snapshot_lock = threading.Lock()

    def __contains__(self, key: str) -> bool:
        return self.original(key) is not None

    def original(self, key: str) -> Original | None:
        """Where the window's copy of ``key`` was stored, or None."""
        return self._originals([key])[0]

    # ---- load and snapshot ----------------------------------------------------------------------
    def ensure_loaded(self) -> None:
        """Load the saved segments and replay the CommitLog from where they end; before the first put of
        this boot. Without a snapshot the replay starts at the CommitLog file that holds the last
        ``_REBUILD_BYTES`` (a file starts with a record; an offset inside one may not)."""
        if self._loaded:
            return
        self._loaded = True
        first, end = self.store.commit_log_range()
        file_size = self.store.config.mapped_file_size_commit_log
        tail = max(first, end - _REBUILD_BYTES)
        start = max(first, tail - tail % file_size) if first >= 0 else end  # (first -1: no CommitLog file yet)
        segments: list[Segment] = []
        try:
            with open(self.path, encoding="utf-8") as f:
                snap = json.load(f)
            segments = [Segment.load(os.path.join(self.segment_dir, name)) for name in snap.get("segments", [])]
            start = max(first, min(int(snap["start"]), end))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as e:
            segments = []
            log.warning("duplication snapshot %s unreadable (%s): rebuilding from the CommitLog tail", self.path, e)
        began = time.monotonic()
        self.index.load(segments)
        self._replay(start)
        log.info("duplication window: %d keys (%d saved segments, replayed the CommitLog from %d in %.2f s)",
                 len(self.index), len(segments), start, time.monotonic() - began)
        self.snapshot()  # from now on a crash finds where this boot's window starts

    def forget(self) -> None:
        """Drop the window so that the next put rebuilds it from the CommitLog: a replica promoted to master
        at runtime (controller mode) holds the old master's records, replicated after any window it built
        while a slave (a send refused there still loads it)."""
        self.index.clear()
        self._loaded = False

    def _replay(self, start: int) -> None:
        _first, end = self.store.commit_log_range()
        offset = start
        index = self.index
        while offset < end:
            batch, nxt = self.store.read_commit_log_records(offset, _REPLAY_CHUNK)
            names = batch.topic_names
            for t, phys, ts, key in zip(batch.topic_ids.tolist(), batch.commit_log_offsets.tolist(),
                                        batch.store_timestamps.tolist(), batch.uniq_keys, strict=True):
                if key and not _skipped_topic(names[t]):
                    index.add(key_hash(window_key(names[t], key)), phys, ts)
            index.evict()
            if nxt <= offset:
                break
            offset = nxt

    def snapshot(self, *, background: bool = False) -> None:
        """Save the segments not saved yet and write which are the window's and where the replay starts
        (atomically: temp files renamed; by a worker thread when ``background``). Nothing before the
        window is loaded: its keys are not known yet, and the last snapshot still says where they are."""
        if not self._loaded:
            return
        start = self.index.replay_start(self.store.commit_log_range()[1])
        saved = list(self.index.saved())
        self._last_snapshot = time.monotonic()
        if background:
            asyncio.get_running_loop().run_in_executor(None, self._write, start, saved)
        else:
            self._write(start, saved)

    def _write(self, start: int, saved: list[Segment]) -> None:
        with self._snapshot_lock:
            os.makedirs(self.segment_dir, exist_ok=True)
            for seg in saved:
                seg.save(self.segment_dir)
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"start": start, "segments": [seg.name for seg in saved]}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            keep = {seg.name for seg in saved}
            for name in os.listdir(self.segment_dir):  # evicted segments, and temp files of a crash
                if name not in keep:
                    os.remove(os.path.join(self.segment_dir, name))

    def snapshot_due(self) -> bool:
        return self._loaded and time.monotonic() - self._last_snapshot >= self.snapshot_interval_s

    # ---- the send path ----------------------------------------------------------------------------
    def _originals(self, keys: list[str | None]) -> list[Original | None]:
        """The stored original of each key (None: not in the window). A hash the window holds is checked
        against the record it points at, which also says the original's queue and queue offset."""
        hashes = [key_hash(k) if k is not None else 0 for k in keys]
        out: list[Original | None] = []
        for k, phys in zip(keys, self.index.lookup(hashes), strict=True):
            out.append(None if k is None or phys is None else self._original_at(phys, k))
        return out

    def _original_at(self, phys: int, key: str) -> Original | None:
        raw = self.store.select_one_message_by_offset(phys)
        if raw is None:
            return None
        try:
            v = view_record(raw)
            topic, _, uniq = key.partition("/")
            if v.topic != topic or v.properties.get(mc.UNIQ_KEY) != uniq:
                return None  # another key with the same hash
        except RecordError:
            return None
        return Original(phys, v.queue_id, v.queue_offset, v.store_timestamp)

    def _evict(self) -> None:
        if self.index.evict() and self._loaded:
            self._last_snapshot = 0.0  # segments went: the next settle writes a snapshot without them

    def _answer(self, req: RemotingCommand, originals: list[Original]) -> RemotingCommand:
        first = originals[0]
        ext = SendMessageResponseHeader(
            msg_id=",".join(self.store.offset_msg_id(o.phys) for o in originals), queue_id=first.queue_id,
            queue_offset=first.queue_offset, msg_region="DefaultRegion", trace_on="true",
        ).to_ext()
        return req.make_response(ResponseCode.SUCCESS, None, ext)

    def screen(self, req: RemotingCommand, put: PutRequest, reply: Respond) -> PutRequest | None:
        """The put to store (``put`` itself, or a batch without its known records), or None when the
        request was answered here (a duplicate, or one whose original is in flight)."""
        self.ensure_loaded()
        if _skipped_topic(put.topic):
            return put
        keys = put_keys(put)
        flying = self._in_flight_keys
        for k in keys:
            if k is not None and k in flying:
                reply(req.make_response(ResponseCode.SYSTEM_BUSY, IN_FLIGHT_REMARK.format(k)))
                return None
        known = self._originals(keys)
        found = sum(o is not None for o in known)
        if found and found == len(known):
            self.duplicates += found
            reply(self._answer(req, [o for o in known if o is not None]))
            return None
        if found and isinstance(put.records, RecordBatch):
            keep = [i for i, o in enumerate(known) if o is None]
            self.duplicates += found
            put = PutRequest(put.topic, put.queue_id, put.records.select(keep))
            keys = [keys[i] for i in keep]
        # (The same key twice in one batch is the client's mistake: both are stored, the first is kept.)
        self.in_flight[id(put)] = keys
        self._in_flight_keys.update(k for k in keys if k)
        return put

    def settle(self, put: PutRequest, res: AppendResult | None) -> None:
        """After the put: its keys enter the window if it was stored."""
        keys = self.in_flight.pop(id(put), None)
        if keys is None:
            return
        self._in_flight_keys.difference_update(k for k in keys if k)
        if res is None or res.status != PutStatus.PUT_OK:
            return
        index = self.index
        frozen = len(index.segments)
        ts = res.store_timestamp
        for key, phys in zip(keys, _record_offsets(put, res), strict=True):
            if key:
                index.add(key_hash(key), phys, ts)
        self._evict()
        if len(index.segments) != frozen:
            self._last_snapshot = 0.0  # a new segment: saved at once, not at the next interval
        if self.snapshot_due():
            self.snapshot(background=True)


def window_for(cfg: BrokerConfig, store_config: MessageStoreConfig,
               store: MessageStore) -> DuplicationWindow | None:
    """The broker's window when ``duplicationEnable`` is set (a slave stores no client sends)."""
    if not cfg.duplication_enable:
        return None
    return DuplicationWindow(store, os.path.join(store_config.store_path_root_dir, "config"),
                             window_seconds=cfg.duplication_window_seconds, window_size=cfg.duplication_window_size,
                             snapshot_interval_s=cfg.duplication_snapshot_interval_seconds)
