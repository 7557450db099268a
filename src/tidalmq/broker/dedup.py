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
- Bounded: the oldest entries go past ``duplicationWindowSize`` keys or ``duplicationWindowSeconds``.
- Persisted without copying it: the window's entries are the CommitLog's keyed records in order, so
  the CommitLog offset of its oldest entry is all that is written (``<storePathRootDir>/config/
  duplication.json``, every ``duplicationSnapshotIntervalSeconds``); at load the CommitLog from there to
  its end is replayed through the same bounds, which rebuilds the window (a crash leaves an older offset:
  more is replayed, the bounds drop it again). Without the file the last ``_REBUILD_BYTES`` are replayed.

Pure bookkeeping here; the send processor calls ``screen`` before a put and ``settle`` after it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.record import DispatchProperties, dispatch_properties, properties_span
from tidalmq.common.record_batch import RecordBatch
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.store.results import AppendResult, PutRequest, PutStatus

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "duplication.json"
_REBUILD_BYTES = 64 << 20  # replayed when there is no snapshot (a first start with dedup, a lost file)
_REPLAY_CHUNK = 8 << 20
_UNIQ = b"UNIQ_KEY"
_CANCEL_MARKER = mc.TIMER_DEL_UNIQKEY.encode() + b"\x01"
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
    def __init__(self, store: DefaultMessageStore, config_dir: str, *, window_seconds: int, window_size: int,
                 snapshot_interval_s: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.path = os.path.join(config_dir, SNAPSHOT_FILE)
        self.window_ms = window_seconds * 1000
        self.window_size = window_size
        self.snapshot_interval_s = snapshot_interval_s
        self.clock = clock
        self.entries: OrderedDict[str, Original] = OrderedDict()
        self.in_flight: dict[int, list[str | None]] = {}  # id(put) -> its keys, until settled
        self._in_flight_keys: set[str] = set()
        self.duplicates = 0  # sends (records) answered from the window
        self._loaded = False
        self._last_snapshot = 0.0
        self._snapshot_lock = threading.Lock()

    # ---- load and snapshot ----------------------------------------------------------------------
    def ensure_loaded(self) -> None:
        """Replay the CommitLog from the oldest entry's offset; before the first put of this boot."""
        if self._loaded:
            return
        self._loaded = True
        first, end = self.store.commit_log_range()
        start = max(first, end - _REBUILD_BYTES)
        try:
            with open(self.path, encoding="utf-8") as f:
                start = max(first, min(int(json.load(f)["start"]), end))
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as e:
            log.warning("duplication snapshot %s unreadable (%s): rebuilding from the CommitLog tail", self.path, e)
        self._replay(start)
        self._last_snapshot = time.monotonic()
        log.info("duplication window: %d keys (replayed the CommitLog from %d)", len(self.entries), start)

    def forget(self) -> None:
        """Drop the window so that the next put rebuilds it from the CommitLog: a replica promoted to master
        at runtime (controller mode) holds the old master's records, replicated after any window it built
        while a slave (a send refused there still loads it)."""
        self.entries.clear()
        self._loaded = False

    def _replay(self, start: int) -> None:
        _first, end = self.store.commit_log_range()
        offset = start
        entries = self.entries
        while offset < end:
            batch, nxt = self.store.read_commit_log_records(offset, _REPLAY_CHUNK)
            names = batch.topic_names
            for t, q, phys, qoff, ts, key in zip(batch.topic_ids.tolist(), batch.queue_ids.tolist(),
                                                 batch.commit_log_offsets.tolist(), batch.queue_offsets.tolist(),
                                                 batch.store_timestamps.tolist(), batch.uniq_keys, strict=True):
                if key and not _skipped_topic(names[t]):
                    entries.setdefault(window_key(names[t], key), Original(phys, q, qoff, ts))
            self._evict()
            if nxt <= offset:
                break
            offset = nxt

    def snapshot(self, *, background: bool = False) -> None:
        """Write where the window starts in the CommitLog (atomically: a temp file renamed; fsync'd by a
        worker thread when ``background``)."""
        first = next(iter(self.entries.values()), None)
        start = first.phys if first is not None else self.store.commit_log_range()[1]
        self._last_snapshot = time.monotonic()
        if background:
            asyncio.get_running_loop().run_in_executor(None, self._write, start)
        else:
            self._write(start)

    def _write(self, start: int) -> None:
        with self._snapshot_lock:
            tmp = self.path + ".tmp"
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"start": start}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def snapshot_due(self) -> bool:
        return self._loaded and time.monotonic() - self._last_snapshot >= self.snapshot_interval_s

    # ---- the send path ----------------------------------------------------------------------------
    def _evict(self) -> None:
        entries = self.entries
        while len(entries) > self.window_size:
            entries.popitem(last=False)
        horizon = int(self.clock() * 1000) - self.window_ms
        while entries:
            first = next(iter(entries.values()))
            if first.store_ts >= horizon:
                break
            entries.popitem(last=False)

    def _answer(self, req: RemotingCommand, originals: list[Original]) -> RemotingCommand:
        first = originals[0]
        ext = {
            "msgId": ",".join(self.store.offset_msg_id(o.phys) for o in originals),
            "queueId": str(first.queue_id),
            "queueOffset": str(first.queue_offset),
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        }
        return req.make_response(ResponseCode.SUCCESS, None, ext)

    def screen(self, req: RemotingCommand, put: PutRequest, reply: Respond) -> PutRequest | None:
        """The put to store (``put`` itself, or a batch without its known records), or None when the
        request was answered here (a duplicate, or one whose original is in flight)."""
        self.ensure_loaded()
        if _skipped_topic(put.topic):
            return put
        keys = put_keys(put)
        entries, flying = self.entries, self._in_flight_keys
        known: list[Original | None] = []
        found = 0
        for k in keys:  # one pass: most sends are new keys, and nothing else is done for them
            o = None
            if k is not None:
                if k in flying:
                    reply(req.make_response(ResponseCode.SYSTEM_BUSY, IN_FLIGHT_REMARK.format(k)))
                    return None
                o = entries.get(k)
                found += o is not None
            known.append(o)
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
        entries = self.entries
        qid, qoff, ts = put.queue_id, res.queue_offset, res.store_timestamp
        for i, (key, phys) in enumerate(zip(keys, _record_offsets(put, res), strict=True)):
            if key and key not in entries:
                entries[key] = Original(phys, qid, qoff + i, ts)
        self._evict()
        if self.snapshot_due():
            self.snapshot(background=True)


def window_for(cfg: BrokerConfig, store: DefaultMessageStore) -> DuplicationWindow | None:
    """The broker's window when ``duplicationEnable`` is set (a slave stores no client sends)."""
    if not cfg.duplication_enable:
        return None
    return DuplicationWindow(store, os.path.join(store.config.store_path_root_dir, "config"),
                             window_seconds=cfg.duplication_window_seconds, window_size=cfg.duplication_window_size,
                             snapshot_interval_s=cfg.duplication_snapshot_interval_seconds)
