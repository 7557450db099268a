"""DefaultMessageStore: the store's facade (RocketMQ's DefaultMessageStore), synchronous and thread-safe.

Threads once started: a flush service (GroupCommitService in SYNC_FLUSH, FlushRealTimeService in
ASYNC_FLUSH), FlushConsumeQueueService, ReputMessageService and CleanService. The broker calls
``put_messages`` / ``get_message`` from its own thread; callbacks and arrival listeners run on the
store's threads.

The class is split by responsibility: the lifecycle, the put path and flushing here; the dispatchers
the reput calls in store/message_store_dispatch.py; the read API (getMessage and what services read) in
store/message_store_read.py; admin and runtime stats in store/message_store_admin.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from tidalmq.common import naming as nm
from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import DiskFullError, UnsafePathError, path_under
from tidalmq.store.checkpoint import StoreCheckpoint
from tidalmq.store.clean import CleanCommitLogService, CleanConsumeQueueService, CleanService
from tidalmq.store.commit_log import CommitLog
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.consume_queue import ConsumeQueue
from tidalmq.store.disk_space import COMMIT_LOG, DiskSpaceGuard
from tidalmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from tidalmq.store.index_service import IndexService
from tidalmq.store.mapped_file import fsync_dir
from tidalmq.store.message_store_admin import MessageStoreAdmin
from tidalmq.store.message_store_dispatch import IndexServiceLike, MessageStoreDispatch
from tidalmq.store.message_store_read import MessageStoreRead
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


def boot_id() -> bytes:
    """This boot of the machine (Linux's boot_id), b"" where unknown. Written into the abort file: a crash
    recovered under the same boot id was a process crash, whose writes the page cache kept."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read().strip()
    except OSError:
        return b""


def _ms_clock() -> int:
    return time.time_ns() // 1_000_000


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024 ** 3


class DefaultMessageStore(MessageStoreDispatch, MessageStoreRead, MessageStoreAdmin):
    def __init__(self, config: MessageStoreConfig, store_host: tuple[str, int] = ("127.0.0.1", 10911),
                 clock: Callable[[], int] = _ms_clock, *, index_service: IndexServiceLike | None = None) -> None:
        self.config = config
        self.clock = clock
        self.store_host = store_host
        self.commit_log = CommitLog(config, clock, store_host)
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_lock = threading.Lock()
        self._lmq_names: dict[tuple[str, str], str | None] = {}
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
        # brokerRole SLAVE: puts are refused (as RocketMQ's putMessage does); the CommitLog grows only by
        # append_to_commit_log, with the master's bytes. A role may change at runtime (a promotion).
        self.is_slave = False
        self.last_exit_ok = True
        self._process_crash = False  # the last exit was a crash of the process alone (see load)
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
        self._process_crash = not self.last_exit_ok and self._crashed_in_this_boot()
        log.info("store load: last exit %s", "ok" if self.last_exit_ok else
                 "ABNORMAL (process crash)" if self._process_crash else "ABNORMAL")
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

    def _crashed_in_this_boot(self) -> bool:
        """The abort file names this boot: the crash was the process's, and the page cache kept its writes."""
        try:
            with open(self.config.abort_path, "rb") as f:
                written_by = f.read(64).strip()
        except OSError:
            return False
        return bool(written_by) and written_by == boot_id()

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
                cq = ConsumeQueue(topic, int(qid), root, self.cq_file_size(topic))
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
            if self._process_crash:
                indexed = None if self.index_service is None else self.index_service.max_index_commit_log_offset
                process, rebuild_from = self.commit_log.recover_after_process_crash(min_ts, self._first_unqueued,
                                                                                    indexed)
            else:
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

    def truncate_to(self, offset: int) -> bool:
        """Between load() and start(): drop the CommitLog from ``offset`` (a record boundary) on, and the
        ConsumeQueue entries that point there. Controller mode cuts a rejoining replica's divergent tail
        with it (docs/replication.md); False when there was nothing past ``offset``."""
        if not self._loaded or self._started:
            raise RuntimeError("truncate_to() is for a loaded store not yet started")
        if offset >= self.commit_log.max_offset:
            return False
        log.warning("store: truncating the CommitLog from %d to %d", self.commit_log.max_offset, offset)
        self.commit_log.truncate_tail(offset)
        for cq in self._cqs.values():
            if cq.max_physic_offset > offset:
                cq.truncate_dirty(offset)
        self.reput.reput_from_offset = min(self.reput.reput_from_offset, offset)
        self._recover_topic_queue_table()
        return True

    def become_master(self, reput_timeout_s: float = 30.0) -> None:
        """A slave's store starts taking puts (a promotion): once reput has dispatched every replicated
        record, the queue offsets new puts continue from are the ConsumeQueues' ends."""
        if not self.wait_reput(self.commit_log.max_offset, reput_timeout_s):
            log.warning("promotion: reput still behind after %.0f s; queue offsets may restart low", reput_timeout_s)
        self._recover_topic_queue_table()
        self.is_slave = False

    def _first_unqueued(self, batch: DispatchBatch, first: int) -> int | None:
        """The CommitLog offset of the first record of ``batch`` (from row ``first``) whose ConsumeQueue entry
        is missing or points elsewhere, or None. Recovery after a process crash re-dispatches from there."""
        tx = batch.sysflags[first:] & sf.TRANSACTION_TYPE_MASK
        queued = first + np.flatnonzero((tx == sf.TRANSACTION_NOT_TYPE) | (tx == sf.TRANSACTION_COMMIT_TYPE))
        if not len(queued):
            return None
        keys = (batch.topic_ids[queued] << 32) | (batch.queue_ids[queued] & 0xFFFFFFFF)
        earliest: int | None = None
        for key in np.unique(keys).tolist():
            idx = queued[keys == key]
            queue_id = key & 0xFFFFFFFF
            queue_id = queue_id - (1 << 32) if queue_id >= 1 << 31 else queue_id
            cq = self._cqs.get((batch.topic_names[key >> 32], queue_id))
            phys = batch.commit_log_offsets[idx]
            n = 0 if cq is None else cq.count_matching(batch.queue_offsets[idx], phys)
            if n < len(idx):
                miss = int(phys[n])
                earliest = miss if earliest is None else min(earliest, miss)
        return earliest

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
            f.write(boot_id())
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
        results = self._put(requests, dispatch_myself, blocking=True)
        assert results is not None
        return results

    def try_put_messages(self, requests: Sequence[PutRequest], *,
                         dispatch_myself: bool = False) -> list[AppendResult] | None:
        """``put_messages`` that never waits for the CommitLog's put lock: None (nothing appended) while
        another thread holds it, e.g. the timer delivering a batch. The broker's event loop puts this way
        so that it goes on serving while the lock is taken, and can see how long its sends wait."""
        return self._put(requests, dispatch_myself, blocking=False)

    def is_os_page_cache_busy(self) -> bool:
        """RocketMQ's isOSPageCacheBusy: one writer has held the put lock for longer than
        ``os_page_cache_busy_time_out_mills`` (a stalled disk or page cache, not a busy one)."""
        return self.commit_log.lock_held_ms() > self.config.os_page_cache_busy_time_out_mills

    def _put(self, requests: Sequence[PutRequest], dispatch_myself: bool, *,
             blocking: bool) -> list[AppendResult] | None:
        if self._shutdown or not self._loaded or self.is_slave or self.disk_space.refuse_writes():
            return [AppendResult(PutStatus.SERVICE_NOT_AVAILABLE, msg_num=len(r.records)) for r in requests]
        results = self.commit_log.put(requests, wake_reput=not dispatch_myself, blocking=blocking)
        if results is None:
            return None
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

    def get_commit_log_data(self, offset: int, max_size: int) -> memoryview | None:
        """What a master streams to its slaves (RocketMQ's getCommitLogData): up to ``max_size`` written
        bytes from ``offset``, never past its file's end; None when nothing is written there yet."""
        return self.commit_log.get_data(offset, max_size)

    @property
    def commit_log_is_empty(self) -> bool:
        """No CommitLog file yet: a new slave takes the master's stream from wherever it starts."""
        return self.commit_log.mfq.last is None

    def append_to_commit_log(self, phys: int, data: bytes | bytearray | memoryview, store_timestamp: int = 0) -> bool:
        """A slave's append of replicated CommitLog bytes at ``phys`` (see ``CommitLog.append_data``);
        the reput then builds the ConsumeQueues and the index from them as from any write."""
        if self._shutdown or not self._loaded:
            return False
        return self.commit_log.append_data(phys, data, store_timestamp)

    def dispatch(self, *, wait: bool = True) -> None:
        """Dispatch (reput) everything appended so far, on the calling thread. A full disk leaves the
        rest to the reput thread, which retries every second. With ``wait=False`` (the broker's event
        loop) a dispatch round under way on the reput thread is not waited for: that thread is woken to
        go on past what was appended."""
        try:
            if not self.reput.do_reput(blocking=wait):
                self.reput.wakeup()
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
