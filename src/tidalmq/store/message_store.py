"""DefaultMessageStore: the store's facade (RocketMQ's DefaultMessageStore), synchronous and thread-safe.

Threads once started: a flush service (GroupCommitService in SYNC_FLUSH, FlushRealTimeService in
ASYNC_FLUSH), FlushConsumeQueueService, ReputMessageService and CleanService. The broker calls
``put_messages`` / ``get_message`` from its own thread; callbacks and arrival listeners run on the
store's threads.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from tidalmq.common import naming as nm
from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import DiskFullError, UnsafePathError, path_under
from tidalmq.common.message import KEY_SEPARATOR
from tidalmq.common.record import RecordError, StoredMessage, decode_record
from tidalmq.store.checkpoint import StoreCheckpoint
from tidalmq.store.clean import CleanCommitLogService, CleanConsumeQueueService, CleanService
from tidalmq.store.commit_log import CommitLog
from tidalmq.store.config import CQ_STORE_UNIT_SIZE, MessageStoreConfig
from tidalmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from tidalmq.store.disk_space import COMMIT_LOG, CONSUME_QUEUE, INDEX, DiskSpaceGuard
from tidalmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from tidalmq.store.index_service import IndexService
from tidalmq.store.mapped_file import fsync_dir
from tidalmq.store.reput import ReputMessageService
from tidalmq.store.results import (
    AppendResult,
    DispatchBatch,
    GetMessageResult,
    GetStatus,
    PutRequest,
    PutStatus,
    QueueEntries,
    QueueRange,
)

__all__ = [
    "AppendResult",
    "DefaultMessageStore",
    "GetMessageResult",
    "GetStatus",
    "MessageStoreConfig",
    "PutRequest",
    "PutStatus",
    "QueueEntries",
    "QueueRange",
]

log = logging.getLogger("tidalmq.store")

MAX_PULL_MSG_SIZE = 128 * 1024 * 1024
_NOT_TX = (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE)


class IndexServiceLike(Protocol):
    def load(self, last_exit_ok: bool) -> bool: ...
    def build_index_batch(self, items: list[tuple[str, list[str] | None, str | None, int, int]]) -> None: ...
    def build_index_columns(self, topics: Sequence[str], keyss: Sequence[list[str] | None],
                            uniqs: Sequence[str | None], offsets: np.ndarray, timestamps: np.ndarray) -> None: ...
    def query_offsets(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]: ...
    def flush(self) -> None: ...
    def delete_expired(self, min_commit_log_offset: int) -> Any: ...
    def destroy(self) -> None: ...
    def close(self) -> None: ...


def _ms_clock() -> int:
    return time.time_ns() // 1_000_000


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024 ** 3


class DefaultMessageStore:
    def __init__(self, config: MessageStoreConfig, store_host: tuple[str, int] = ("127.0.0.1", 10911),
                 clock: Callable[[], int] = _ms_clock, *, index_service: IndexServiceLike | None = None) -> None:
        self.config = config
        self.clock = clock
        self.store_host = store_host
        self.commit_log = CommitLog(config, clock, store_host)
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_lock = threading.Lock()
        if index_service is None and config.message_index_enable:
            index_service = IndexService(config.index_path, config.max_hash_slot_num, config.max_index_num)
        self.index_service: IndexServiceLike | None = index_service if config.message_index_enable else None
        self.checkpoint: StoreCheckpoint | None = None
        self._listeners: list[Callable[[dict[tuple[str, int], int]], None]] = []
        self.reput = ReputMessageService(self.commit_log, self._dispatch, self._listeners)
        self.commit_log.on_written = self.reput.wakeup
        self.flush_service: GroupCommitService | FlushRealTimeService | None = None
        self.flush_cq_service: FlushConsumeQueueService | None = None
        self.clean_service: CleanService | None = None
        self.clean_commit_log = CleanCommitLogService(self)
        self.clean_consume_queue = CleanConsumeQueueService(self)
        self._clean_lock = threading.Lock()
        self._flush_cq_lock = threading.Lock()
        self.disk_space = DiskSpaceGuard(clock)
        self.commit_log.on_no_space = lambda e: self.disk_space.set(COMMIT_LOG, str(e))
        # The CommitLog offset below which every message has been consumed by every group that reads its
        # topic (the broker knows the groups; a store alone knows none, so nothing counts as consumed).
        # Cleanup over diskSpaceCleanForciblyRatio deletes unexpired files only below it.
        self.consumed_commit_log_offset: Callable[[], tuple[int, str]] = (
            lambda: (self.commit_log.min_offset, "no consumer progress known to the store"))
        self.last_exit_ok = True
        self._loaded = False
        self._started = False
        self._shutdown = False
        self._memory = _total_physical_memory() * config.access_message_in_memory_max_ratio // 100
        self._stats = {"putMessageTimesTotal": 0, "putMessageSizeTotal": 0, "getMessageTimesTotalFound": 0,
                       "getMessageTimesTotalMiss": 0, "getMessageTransferedMsgCount": 0}

    # ================================================================== lifecycle
    def load(self) -> bool:
        cfg = self.config
        os.makedirs(cfg.store_path_root_dir, exist_ok=True)
        # Retention reads disk usage at these paths; a missing one reads as "full" (as in RocketMQ).
        os.makedirs(cfg.commit_log_path, exist_ok=True)
        os.makedirs(cfg.consume_queue_path, exist_ok=True)
        self.last_exit_ok = not os.path.exists(cfg.abort_path)
        log.info("store load: last exit %s", "ok" if self.last_exit_ok else "ABNORMAL")
        ok = self.commit_log.mfq.load()
        ok = ok and self._load_consume_queues()
        self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
        if self.index_service is not None:
            try:
                ok = bool(self.index_service.load(self.last_exit_ok)) and ok
            except Exception:
                log.exception("index load failed")
                ok = False
        if not ok:
            return False
        self._recover(self.last_exit_ok)
        self._loaded = True
        return True

    def _load_consume_queues(self) -> bool:
        root = self.config.consume_queue_path
        try:
            topics = os.listdir(root)
        except FileNotFoundError:
            return True
        for topic in topics:
            if not nm.is_legal(nm.check_any_topic, topic):
                # Left on disk as it is (an operator may want it), but never followed nor made a queue.
                log.warning("ignoring %r in %s: not a legal topic name", topic, root)
                continue
            try:
                tdir = path_under(root, topic)
            except UnsafePathError as e:
                log.warning("ignoring %r in %s: %s", topic, root, e)
                continue
            if not os.path.isdir(tdir):
                continue
            for qid in os.listdir(tdir):
                if not qid.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(topic, int(qid), root, self.config.mapped_file_size_consume_queue)
                if not cq.load():
                    return False
                self._cqs[(topic, int(qid))] = cq
        return True

    def _recover(self, last_exit_ok: bool) -> None:
        for cq in self._cqs.values():
            cq.recover()
        assert self.checkpoint is not None
        if last_exit_ok:
            process = self.commit_log.recover_normally()
            cut = process
            rebuild_from = None
        else:
            cp = self.checkpoint
            min_ts = cp.min_timestamp_index() if self.config.message_index_safe else cp.min_timestamp()
            process, rebuild_from = self.commit_log.recover_abnormally(min_ts)
            cut = rebuild_from
            log.info("abnormal recovery: CommitLog valid to %d, re-dispatching from %d", process, rebuild_from)
        min_phy = self.commit_log.min_offset
        if min_phy < 0:
            # No CommitLog at all: the queues point at nothing (RocketMQ destroys them too).
            for cq in self._cqs.values():
                cq.destroy()
            self._cqs.clear()
            min_phy = 0
        for cq in self._cqs.values():
            if rebuild_from is not None or cq.max_physic_offset > cut:
                cq.truncate_dirty(cut)
            cq.init_min_offset(min_phy)
        if rebuild_from is None:
            reput_from = max((cq.max_physic_offset for cq in self._cqs.values()), default=min_phy)
        else:
            reput_from = rebuild_from
        reput_from = min(max(reput_from, min_phy), process)
        self.reput.reput_from_offset = reput_from
        # Rebuild synchronously, so queue offsets and reads are right before the broker starts.
        self.reput.do_reput()
        self._recover_topic_queue_table()

    def _recover_topic_queue_table(self) -> None:
        table = {key: cq.max_offset_in_queue for key, cq in self._cqs.items()}
        self.commit_log.topic_queue_table = table

    def start(self) -> None:
        if not self._loaded:
            raise RuntimeError("load() the store before start()")
        if self._started:
            return
        cfg = self.config
        with open(cfg.abort_path, "wb") as f:
            os.fsync(f.fileno())
        fsync_dir(cfg.store_path_root_dir)
        if cfg.sync_flush:
            self.flush_service = GroupCommitService(self.commit_log, cfg.sync_flush_timeout, self._on_cl_flushed)
        else:
            self.flush_service = FlushRealTimeService(
                self.commit_log, cfg.flush_interval_commit_log, cfg.flush_commit_log_least_pages,
                cfg.flush_commit_log_thorough_interval, self._on_cl_flushed)
        self.flush_cq_service = FlushConsumeQueueService(
            self.flush_consume_queues, cfg.flush_interval_consume_queue, cfg.flush_consume_queue_least_pages,
            cfg.flush_consume_queue_thorough_interval)
        self.clean_service = CleanService(self._clean_periodically, cfg.clean_resource_interval)
        for t in (self.flush_service, self.flush_cq_service, self.reput, self.clean_service):
            t.start()
        self._started = True

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        if self._started:
            assert self.clean_service and self.flush_service and self.flush_cq_service
            self.clean_service.shutdown()
            self.reput.shutdown(30)
            self.flush_service.shutdown(30)
            self.flush_cq_service.shutdown()
        elif self._loaded:
            self.reput.do_reput()
        clean = False
        if self._loaded:
            try:
                self.commit_log.flush(0)
                self.flush_consume_queues(0)
                clean = self.reput.behind() == 0
            except OSError:
                log.exception("final flush failed")
        if clean and os.path.exists(self.config.abort_path):
            os.unlink(self.config.abort_path)
            fsync_dir(self.config.store_path_root_dir)
        elif self._started:
            log.warning("shutdown not clean (dispatch behind %d): keeping the abort file", self.reput.behind())
        self._close()

    def _close(self) -> None:
        self.commit_log.close()
        for cq in self._cqs.values():
            cq.close()
        if self.index_service is not None:
            try:
                self.index_service.close()
            except Exception:
                log.exception("index close failed")
        if self.checkpoint is not None:
            self.checkpoint.close()
            self.checkpoint = None

    def destroy(self) -> None:
        """Delete every file of the store (call after shutdown, or instead of it)."""
        if not self._shutdown:
            self.shutdown()
        self.commit_log.destroy()
        for cq in self._cqs.values():
            cq.destroy()
        self._cqs.clear()
        if self.index_service is not None:
            try:
                self.index_service.destroy()
            except Exception:
                log.exception("index destroy failed")
        cfg = self.config
        for path in (cfg.checkpoint_path, cfg.abort_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        shutil.rmtree(cfg.consume_queue_path, ignore_errors=True)
        shutil.rmtree(cfg.index_path, ignore_errors=True)

    # ================================================================== write
    def put_messages(self, requests: Sequence[PutRequest], *, dispatch_myself: bool = False) -> list[AppendResult]:
        """Append the requests to the CommitLog; the reput thread then dispatches them. With
        ``dispatch_myself`` the caller promises to call ``dispatch()`` right after (the broker's group
        commit does, on the event loop): the reput thread is not woken, so it does not take the
        interpreter from the caller; it still catches up within a second if the promise is broken."""
        if self._shutdown or not self._loaded or self.disk_space.refuse_writes():
            return [AppendResult(PutStatus.SERVICE_NOT_AVAILABLE, msg_num=len(r.records)) for r in requests]
        results = self.commit_log.put(requests, wake_reput=not dispatch_myself)
        stats = self._stats
        ok = False
        for r in results:
            if r.status is PutStatus.PUT_OK:
                ok = True
                stats["putMessageTimesTotal"] += r.msg_num
                stats["putMessageSizeTotal"] += r.wrote_bytes
        if ok:
            self.disk_space.clear(COMMIT_LOG)
        return results

    @property
    def disk_full(self) -> bool:
        """Writes are being refused for lack of space (see ``store.disk_space``)."""
        return self.disk_space.full

    def dispatch(self) -> None:
        """Dispatch (reput) everything appended so far, on the calling thread. A full disk leaves the
        rest to the reput thread, which retries every second."""
        try:
            self.reput.do_reput()
        except DiskFullError:
            pass

    def request_flush(self, offset: int, callback: Callable[[bool], object]) -> None:
        """SYNC_FLUSH: ``callback(True)`` (from the flush thread) once the CommitLog is durable up to
        ``offset`` (pass ``wrote_offset + wrote_bytes``), ``callback(False)`` when that took longer than
        ``sync_flush_timeout``. ASYNC_FLUSH: answered at once with True (RocketMQ does not wait)."""
        svc = self.flush_service
        if isinstance(svc, GroupCommitService) and svc.is_alive():
            svc.put_request(offset, callback)
            return
        if self.config.sync_flush:
            try:  # not started (tests, tools): flush inline
                self.commit_log.flush(0)
                ok = self.commit_log.flushed_where >= offset
            except OSError:
                ok = False
            callback(ok)
            return
        if svc is not None:
            svc.wakeup()
        callback(True)

    def _on_cl_flushed(self) -> None:
        cp = self.checkpoint
        ts = self.commit_log.flushed_store_timestamp
        if cp is not None and ts:
            cp.physic_msg_timestamp = ts
            cp.write()

    def flush_consume_queues(self, least_pages: int) -> None:
        """Flush the ConsumeQueues; a thorough pass (``least_pages == 0``) also flushes the index and
        advances the checkpoint to what had been dispatched before it began."""
        with self._flush_cq_lock:
            dispatched_ts = self.reput.last_dispatched_store_timestamp
            for cq in list(self._cqs.values()):
                cq.flush(least_pages)
            if least_pages != 0:
                return
            if self.index_service is not None:
                self.index_service.flush()
            cp = self.checkpoint
            if cp is None:
                return
            if self.commit_log.flushed_store_timestamp:
                cp.physic_msg_timestamp = self.commit_log.flushed_store_timestamp
            if dispatched_ts:
                cp.logics_msg_timestamp = dispatched_ts
                cp.index_msg_timestamp = dispatched_ts
            cp.flush()

    # ================================================================== reput
    def add_arrival_listener(self, fn: Callable[[dict[tuple[str, int], int]], None]) -> None:
        """``fn(arrivals)`` after each reput round, from the reput thread: ``arrivals`` maps each
        (topic, queue id) the round added entries to, to the queue's new max offset."""
        self._listeners.append(fn)

    def wait_reput(self, offset: int, timeout: float) -> bool:
        """Block until everything before CommitLog ``offset`` is dispatched (inline if not started)."""
        if not self.reput.is_alive():
            self.reput.do_reput()
        return self.reput.wait_reput(offset, timeout)

    def on_reput(self, offset: int, fn: Callable[[], object]) -> None:
        """Call ``fn()`` once everything before CommitLog ``offset`` is dispatched, without waiting: at
        once when it already is, else from the thread that dispatches past it (the reput thread, or the
        broker's loop after a group commit). For awaiting this on an event loop see ``StoreFace``."""
        self.reput.on_reput(offset, fn)

    @property
    def dispatch_running(self) -> bool:
        """True while the reput thread runs (else nothing dispatches unless ``dispatch()`` is called)."""
        return self.reput.is_alive()

    def _find_or_create_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._cqs.get(key)
        if cq is None:
            with self._cq_lock:
                cq = self._cqs.get(key)
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self.config.consume_queue_path,
                                      self.config.mapped_file_size_consume_queue)
                    self._cqs[key] = cq
        return cq

    def _dispatch(self, batch: DispatchBatch) -> dict[tuple[str, int], int]:
        """CommitLogDispatcherBuildConsumeQueue + CommitLogDispatcherBuildIndex for one round."""
        tx = batch.sysflags & sf.TRANSACTION_TYPE_MASK
        names = batch.topic_names
        touched: dict[tuple[str, int], int] = {}
        in_queue = np.flatnonzero((tx == sf.TRANSACTION_NOT_TYPE) | (tx == sf.TRANSACTION_COMMIT_TYPE))
        if len(in_queue):
            # One group per (topic, queue), CommitLog order kept inside each.
            group_keys = (batch.topic_ids[in_queue] << 32) | (batch.queue_ids[in_queue] & 0xFFFFFFFF)
            if (group_keys == group_keys[0]).all():
                groups = [(int(group_keys[0]), in_queue)]
            else:
                order = np.argsort(group_keys, kind="stable")
                sorted_keys = group_keys[order]
                cuts = (np.flatnonzero(np.diff(sorted_keys)) + 1).tolist()
                groups = [(int(sorted_keys[a]), in_queue[order[a:b]])
                          for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
            for key, idx in groups:
                queue_id = key & 0xFFFFFFFF
                if queue_id >= 1 << 31:
                    queue_id -= 1 << 32
                topic = names[key >> 32]
                try:
                    cq = self._find_or_create_cq(topic, queue_id)
                except UnsafePathError:
                    # A record whose topic cannot be a directory (written before the naming rules, or
                    # past them): it stays in the CommitLog, readable by offset, but is queued nowhere.
                    log.error("record(s) of topic %r queue %d not queued: the name is not a safe path", topic, queue_id)
                    continue
                try:
                    touched[(topic, queue_id)] = cq.put_entries(batch.queue_offsets[idx], batch.commit_log_offsets[idx],
                                                                batch.sizes[idx], batch.tags_codes[idx])
                except DiskFullError as e:
                    # The round is not done: the reput retries it (entries already put are skipped then).
                    self.disk_space.set(CONSUME_QUEUE, f"{topic}-{queue_id}: {e}")
                    raise
        self.disk_space.clear(CONSUME_QUEUE)
        index = self.index_service
        if index is not None:
            try:
                self._build_index(index, batch, tx == sf.TRANSACTION_ROLLBACK_TYPE)
                self.disk_space.clear(INDEX)
            except DiskFullError as e:
                # The index is a lookup aid: this round's keys are not indexed, the messages are queued.
                self.disk_space.set(INDEX, str(e))
            except Exception:
                log.exception("build index failed")
        return touched

    @staticmethod
    def _build_index(index: IndexServiceLike, batch: DispatchBatch, rolled_back: np.ndarray) -> None:
        """CommitLogDispatcherBuildIndex: KEYS and UNIQ_KEY of every record but rolled-back half messages."""
        names = batch.topic_names
        keys = [[k for k in text.split(KEY_SEPARATOR) if k] if text else None for text in batch.keys]
        uniqs = batch.uniq_keys
        if not rolled_back.any() and None not in uniqs:  # the usual round: every record has a UNIQ_KEY
            index.build_index_columns([names[t] for t in batch.topic_ids.tolist()], keys, uniqs,
                                      batch.commit_log_offsets, batch.store_timestamps)
            return
        offsets = batch.commit_log_offsets.tolist()
        times = batch.store_timestamps.tolist()
        items = [(names[t], k, u, offsets[i], times[i])
                 for i, (t, k, u, rb) in enumerate(zip(batch.topic_ids.tolist(), keys, uniqs, rolled_back.tolist(),
                                                       strict=True))
                 if (k or u) and not rb]
        if items:
            index.build_index_batch(items)

    # ================================================================== read
    def consume_queues(self) -> Iterable[ConsumeQueue]:
        return list(self._cqs.values())

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._cqs.get((topic, queue_id))

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = MAX_PULL_MSG_SIZE, tag_codes: set[int] | None = None,
                    filter: Callable[[int, memoryview], bool] | None = None) -> GetMessageResult:  # noqa: A002
        """RocketMQ's getMessage. ``tag_codes``: ConsumeQueue-level filter on tag hash codes (None: all).
        ``filter(tags_code, raw_record)``: CommitLog-level filter (e.g. SQL92), called for entries that
        passed ``tag_codes``."""
        if self._shutdown or not self._loaded:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset)
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            # RocketMQ creates the (empty) queue on lookup, so it answers NO_MESSAGE_IN_QUEUE, next 0.
            self._stats["getMessageTimesTotalMiss"] += 1
            return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        min_off = cq.min_offset_in_queue
        max_off = cq.max_offset_in_queue
        res = GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, offset, min_off, max_off)
        if max_off == 0:
            res.status, res.next_begin_offset = GetStatus.NO_MESSAGE_IN_QUEUE, 0
        elif offset < min_off:
            res.status, res.next_begin_offset = GetStatus.OFFSET_TOO_SMALL, min_off
        elif offset == max_off:
            res.status, res.next_begin_offset = GetStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > max_off:
            res.status, res.next_begin_offset = GetStatus.OFFSET_OVERFLOW_BADLY, max_off
        else:
            self._read_range(res, cq, offset, max_off, max_msg_nums, max_total_bytes, tag_codes, filter)
        self._stats["getMessageTimesTotalFound" if res.status is GetStatus.FOUND else "getMessageTimesTotalMiss"] += 1
        return res

    def _read_range(self, res: GetMessageResult, cq: ConsumeQueue, offset: int, max_off: int, max_msg_nums: int,
                    max_total_bytes: int, tag_codes: set[int] | None,
                    filter: Callable[[int, memoryview], bool] | None) -> None:  # noqa: A002
        cfg = self.config
        max_offset_py = self.commit_log.max_offset
        # Entries examined per call are bounded like RocketMQ (maxFilterMessageSize, one CQ file).
        max_filter_bytes = max(cfg.max_filter_message_size, max_msg_nums * CQ_STORE_UNIT_SIZE)
        n_scan = min(max_off - offset, -(-max_filter_bytes // CQ_STORE_UNIT_SIZE))
        max_pull = min(max(max_total_bytes, 100), MAX_PULL_MSG_SIZE)
        arr = cq.entries(offset, n_scan)
        if arr is None:
            res.status = GetStatus.OFFSET_FOUND_NULL
            res.next_begin_offset = cq.roll_next_file(offset)
            return
        n = len(arr)
        if n == 0:  # the entry is being written; nothing readable yet
            res.status = GetStatus.OFFSET_FOUND_NULL
            res.next_begin_offset = offset
            return
        phys = arr["offset"].astype(np.int64)
        sizes = arr["size"].astype(np.int64)
        tags = arr["tag"].astype(np.int64)
        del arr  # drop the view of the mapped file
        live = sizes != BLANK_SIZE
        removed = phys < self.commit_log.min_offset
        cand = live & ~removed
        if tag_codes is not None:
            cand &= np.isin(tags, np.fromiter(tag_codes, np.int64, len(tag_codes)))
        cand_idx = np.flatnonzero(cand).tolist()
        phys_l = phys.tolist()
        sizes_l = sizes.tolist()
        total = count = 0
        buffers = res.buffers
        qoffs = res.queue_offsets
        memory = self._memory
        next_rel = n
        max_phy_pulling = 0
        filtered = 0
        get = self.commit_log.get_message
        for i in cand_idx:
            size = sizes_l[i]
            p = phys_l[i]
            if count:
                # isTheBatchFull
                if count + 1 > max_msg_nums or total + size > max_pull:
                    next_rel = i
                    break
                if max_offset_py - p <= memory:
                    if total + size > cfg.max_transfer_bytes_on_message_in_memory \
                            or count > cfg.max_transfer_count_on_message_in_memory - 1:
                        next_rel = i
                        break
                elif total + size > cfg.max_transfer_bytes_on_message_in_disk \
                        or count > cfg.max_transfer_count_on_message_in_disk - 1:
                    next_rel = i
                    break
            if total >= max_pull:
                next_rel = i
                break
            max_phy_pulling = p
            view = get(p, size)
            if view is None:
                continue
            if filter is not None and not filter(int(tags[i]), view):
                filtered += 1
                continue
            buffers.append(view)
            qoffs.append(offset + i)
            total += size
            count += 1
        res.next_begin_offset = offset + next_rel
        res.message_count = count
        res.buffer_total_size = total
        res.filter_message_count = filtered
        if count:
            res.status = GetStatus.FOUND
            self._stats["getMessageTransferedMsgCount"] += count
        elif next_rel > 0 and bool(removed[next_rel - 1]) and bool(live[next_rel - 1]):
            res.status = GetStatus.MESSAGE_WAS_REMOVING
        else:
            res.status = GetStatus.NO_MATCHED_MESSAGE
        if max_phy_pulling:
            res.suggest_pulling_from_slave = (max_offset_py - max_phy_pulling) > memory

    # ------------------------------------------------------------------ the read API for services
    # What the broker's services (schedule, timer, transactions, admin) read. Nothing outside store/
    # touches ConsumeQueue arrays, mapped files or the CommitLog directly (tests/store/test_face.py).
    def queue_range(self, topic: str, queue_id: int) -> QueueRange:
        cq = self._cqs.get((topic, queue_id))
        return QueueRange(0, 0) if cq is None else QueueRange(cq.min_offset_in_queue, cq.max_offset_in_queue)

    def read_queue(self, topic: str, queue_id: int, offset: int, max_n: int) -> QueueEntries:
        """Up to ``max_n`` entries from logical ``offset`` (read from the queue's min offset when
        ``offset`` is below it), never past one ConsumeQueue file: loop on ``next_offset`` while it is
        below ``queue_range().max_offset`` and the read was not empty."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return QueueEntries.empty(offset, offset)
        start = max(offset, cq.min_offset_in_queue)
        arr = cq.entries(start, max_n) if max_n > 0 and start < cq.max_offset_in_queue else None
        if arr is None:
            # No file holds ``start`` (retention took it): the next read starts at the next file.
            nxt = cq.roll_next_file(start) if max_n > 0 and start < cq.max_offset_in_queue else start
            return QueueEntries.empty(start, nxt)
        out = QueueEntries(start, start + len(arr), arr["offset"].astype(np.int64), arr["size"].astype(np.int64),
                           arr["tag"].astype(np.int64))
        del arr  # the view of the mapped file; the result holds copies
        return out

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self._cqs

    def queue_entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """(CommitLog offset, size, tag code) of one entry; None outside the queue's range."""
        cq = self._cqs.get((topic, queue_id))
        return cq.entry(offset) if cq is not None else None

    def queue_offset_at_or_after(self, topic: str, queue_id: int, commit_log_offset: int) -> int:
        """The first logical offset whose entry points at or past ``commit_log_offset`` (the max offset
        when none does): entries of a queue follow CommitLog order, so a binary search finds it."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            if e is None or e[0] >= commit_log_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message appended to (topic, queue) gets: ahead of
        ``queue_range().max_offset`` by what is appended but not yet dispatched."""
        return self.commit_log.topic_queue_table.get((topic, queue_id), 0)

    @property
    def has_index(self) -> bool:
        """True when messages are indexed by key (``query_message`` can find them)."""
        return self.index_service is not None

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.max_offset_in_queue if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.min_offset_in_queue if cq is not None else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        e = cq.entry(offset) if cq is not None else None
        return e[0] if e is not None else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        e = cq.entry(offset) if cq is not None else None
        if e is None or e[1] == BLANK_SIZE:
            return -1
        return self.commit_log.store_timestamp_at(e[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset_in_queue)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Logical offset of the first message stored at or after ``timestamp_ms``; the max offset when
        there is none. Binary search over the queue, reading store times from the CommitLog."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue - 1
        min_phy = self.commit_log.min_offset
        while lo <= hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            ts = -1
            if e is not None and e[1] != BLANK_SIZE and e[0] >= min_phy:
                ts = self.commit_log.store_timestamp_at(e[0])
            if ts < 0 or ts < timestamp_ms:  # unreadable entries only exist at the head: treat as older
                lo = mid + 1
            else:
                hi = mid - 1
        return lo

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None:
        if size is None:
            size = self.commit_log.record_size_at(commit_log_offset)
            if size <= 0:
                return None
        return self.commit_log.get_message(commit_log_offset, size)

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None:
        view = self.select_one_message_by_offset(commit_log_offset, size)
        if view is None:
            return None
        try:
            return decode_record(view)
        except RecordError:
            return None

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]:
        index = self.index_service
        if index is None:
            return []
        max_num = min(max_num, self.config.max_msgs_num_batch)
        out: list[memoryview] = []
        seen: set[int] = set()
        for off in index.query_offsets(topic, key, max_num, begin_ts, end_ts):
            if off in seen:  # re-dispatch after a crash may index a record twice
                continue
            seen.add(off)
            view = self.select_one_message_by_offset(off)
            if view is None:
                continue
            try:
                msg = decode_record(view, read_body=False)
            except RecordError:
                continue
            if msg.topic != topic:
                continue
            keys = msg.properties.get("KEYS")
            if msg.properties.get("UNIQ_KEY") == key or (keys and key in keys.split(KEY_SEPARATOR)):
                out.append(view)
        return out

    # ================================================================== admin
    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return max(self.commit_log.min_offset, 0)

    def topics_and_queues(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in list(self._cqs):
            out.setdefault(topic, []).append(qid)
        for qids in out.values():
            qids.sort()
        return out

    def delete_topics(self, names: Iterable[str]) -> int:
        """Delete the ConsumeQueues of these topics (the CommitLog keeps its records until retention)."""
        names = set(names)
        count = 0
        with self._cq_lock:
            doomed = [(k, cq) for k, cq in self._cqs.items() if k[0] in names]
            for k, _ in doomed:
                del self._cqs[k]
                self.commit_log.topic_queue_table.pop(k, None)
        for _, cq in doomed:
            with cq.write_lock:
                cq.destroy()
            count += 1
        for name in names:
            try:
                doomed_dir = path_under(self.config.consume_queue_path, name)
            except UnsafePathError:
                log.error("not deleting %r: the name is not a safe path under the store", name)
                continue
            if not os.path.islink(doomed_dir):
                shutil.rmtree(doomed_dir, ignore_errors=True)
        return count

    def runtime_info(self) -> dict[str, str]:
        cfg = self.config
        info = {k: str(v) for k, v in self._stats.items()}
        info.update({
            "commitLogMinOffset": str(self.min_phy_offset),
            "commitLogMaxOffset": str(self.max_phy_offset),
            "commitLogFlushedOffset": str(self.commit_log.flushed_where),
            "commitLogCorruptRecords": str(self.commit_log.corrupt_records),
            "dispatchBehindBytes": str(self.reput.behind()),
            "commitLogDiskRatio": str(self.clean_commit_log.disk_usage(cfg.commit_log_path)),
            "consumeQueueDiskRatio": str(self.clean_commit_log.disk_usage(cfg.consume_queue_path)),
            "diskFull": str(self.disk_full).lower(),
            "diskFullReason": self.disk_space.reason(),
            "flushDiskType": cfg.flush_disk_type,
        })
        cp = self.checkpoint
        if cp is not None:
            info["physicMsgTimestamp"] = str(cp.physic_msg_timestamp)
            info["logicsMsgTimestamp"] = str(cp.logics_msg_timestamp)
        return info

    # ================================================================== retention
    def clean_expired_now(self, force: bool = False) -> int:
        """Run retention once. ``force`` acts like RocketMQ's executeDeleteFilesManually: the time-of-day
        (``delete_when``) condition is skipped, but files must still be older than ``file_reserved_time``
        unless the disk is over the forcible-clean ratio. Returns the CommitLog files deleted."""
        with self._clean_lock:
            count = self.clean_commit_log.delete_expired_files(manual=force)
            self.clean_consume_queue.delete_expired_files()
            return count

    def _clean_periodically(self) -> None:
        self.clean_expired_now(False)
