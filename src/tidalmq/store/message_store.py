"""DefaultMessageStore: the store's facade (RocketMQ's DefaultMessageStore), synchronous and thread-safe.

Threads once started: a flush service (GroupCommitService in SYNC_FLUSH, FlushRealTimeService in
ASYNC_FLUSH), FlushConsumeQueueService, ReputMessageService and CleanService. The broker calls
``put_messages`` / ``get_message`` from its own thread; callbacks and arrival listeners run on the
store's threads.

The store is its face (``MessageStore``, store/api.py) over parts that own their state: the CommitLog, the
ConsumeQueueTable (every queue, and the lock that makes and removes them), the CommitLogDispatcher (what
reput does with each round), the MessageReader (getMessage, reads by offset and key), the index, the
checkpoint, and the services' threads. Here: the lifecycle and recovery, the put path, flushing, retention
and the runtime figures; every read is handed to the part that holds what it reads.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from tidalmq.common.fileutil import DiskFullError
from tidalmq.store.abort_file import AbortFile
from tidalmq.store.checkpoint import StoreCheckpoint
from tidalmq.store.clean import CleanCommitLogService, CleanConsumeQueueService, CleanService
from tidalmq.store.commit_log import CommitLog
from tidalmq.store.commit_log_dispatcher import CommitLogDispatcher
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from tidalmq.store.consume_queue_table import ConsumeQueueTable
from tidalmq.store.disk_space import COMMIT_LOG, DiskSpaceGuard
from tidalmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from tidalmq.store.index_service import IndexService, IndexServiceLike
from tidalmq.store.message_reader import MAX_PULL_MSG_SIZE, MessageReader, OffsetLookup
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
from tidalmq.store.store_stats import StoreStatsService

# The store API's types, importable from here with the store.
__all__ = ["AppendResult", "DefaultMessageStore", "GetMessageResult", "GetStatus", "MessageStoreConfig",
           "PutRequest", "PutStatus", "QueueEntries", "QueueRange"]

log = logging.getLogger("tidalmq.store")


def _ms_clock() -> int:
    return time.time_ns() // 1_000_000


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024 ** 3


class DefaultMessageStore(OffsetLookup):
    def __init__(self, config: MessageStoreConfig, store_host: tuple[str, int] = ("127.0.0.1", 10911),
                 clock: Callable[[], int] = _ms_clock, *, index_service: IndexServiceLike | None = None) -> None:
        self.config = config
        self.clock = clock
        self.store_host = store_host
        self.commit_log = CommitLog(config, clock, store_host)
        self.queues = ConsumeQueueTable(config.consume_queue_path, config.mapped_file_size_consume_queue)
        if index_service is None and config.message_index_enable:
            index_service = IndexService(config.index_path, config.max_hash_slot_num, config.max_index_num)
        self.index_service: IndexServiceLike | None = index_service if config.message_index_enable else None
        self.checkpoint: StoreCheckpoint | None = None
        self.abort_file = AbortFile(config.abort_path, config.store_path_root_dir)
        self.disk_space = DiskSpaceGuard(clock)
        self.stats = StoreStatsService()
        self.dispatcher = CommitLogDispatcher(self.queues, self.index_service, self.disk_space)
        self.reader = MessageReader(config, self.commit_log, self.queues, self.index_service, self.stats,
                                    _total_physical_memory() * config.access_message_in_memory_max_ratio // 100)
        self._listeners: list[Callable[[dict[tuple[str, int], int]], None]] = []
        self.reput = ReputMessageService(self.commit_log, self.dispatcher.dispatch, self._listeners)
        self.commit_log.on_written = self.reput.wakeup
        self.flush_service: GroupCommitService | FlushRealTimeService | None = None
        self.flush_cq_service: FlushConsumeQueueService | None = None
        self.clean_service: CleanService | None = None
        self.clean_commit_log = CleanCommitLogService(self)
        self.clean_consume_queue = CleanConsumeQueueService(self)
        self._clean_lock = threading.Lock()
        self._flush_cq_lock = threading.Lock()
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

    # ================================================================== lifecycle
    def load(self) -> bool:
        cfg = self.config
        os.makedirs(cfg.store_path_root_dir, exist_ok=True)
        # Retention reads disk usage at these paths; a missing one reads as "full" (as in RocketMQ).
        os.makedirs(cfg.commit_log_path, exist_ok=True)
        os.makedirs(cfg.consume_queue_path, exist_ok=True)
        self.last_exit_ok = not self.abort_file.exists()
        self._process_crash = not self.last_exit_ok and self.abort_file.crashed_in_this_boot()
        log.info("store load: last exit %s", "ok" if self.last_exit_ok else
                 "ABNORMAL (process crash)" if self._process_crash else "ABNORMAL")
        ok = self.commit_log.mfq.load()
        ok = ok and self.queues.load()
        self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
        self.reput.on_round = self.checkpoint.note_dispatched
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

    def _recover(self, last_exit_ok: bool) -> None:
        self.queues.recover()
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
                dispatched = cp.take_dispatched()
                process, rebuild_from = self.commit_log.recover_after_process_crash(min_ts, self.queues.first_unqueued,
                                                                                    indexed, dispatched)
            else:
                process, rebuild_from = self.commit_log.recover_abnormally(min_ts)
            cut = rebuild_from
            log.info("abnormal recovery: CommitLog valid to %d, re-dispatching from %d", process, rebuild_from)
        min_phy = self.commit_log.min_offset
        if min_phy < 0:
            # No CommitLog at all: the queues point at nothing (RocketMQ destroys them too).
            self.queues.destroy()
            min_phy = 0
        self.queues.truncate_dirty(cut, every=rebuild_from is not None)
        self.queues.init_min_offset(min_phy)
        if rebuild_from is None:
            reput_from = self.queues.max_physic_offset(default=min_phy)
        else:
            reput_from = rebuild_from
        reput_from = min(max(reput_from, min_phy), process)
        self.reput.reput_from_offset = reput_from
        self.checkpoint.note_dispatched(reput_from, 0)
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
        if self.checkpoint is not None:
            self.checkpoint.lower_dispatched(offset)
        self.commit_log.truncate_tail(offset)
        self.queues.truncate_dirty(offset)
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

    def _recover_topic_queue_table(self) -> None:
        self.commit_log.topic_queue_table = self.queues.max_offsets()

    def start(self) -> None:
        if not self._loaded:
            raise RuntimeError("load() the store before start()")
        if self._started:
            return
        cfg = self.config
        self.abort_file.create()
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
        if clean:
            self.abort_file.delete()
        elif self._started:
            log.warning("shutdown not clean (dispatch behind %d): keeping the abort file", self.reput.behind())
        self._close()

    def _close(self) -> None:
        self.commit_log.close()
        self.queues.close()
        if self.index_service is not None:
            try:
                self.index_service.close()
            except Exception:
                log.exception("index close failed")
        if self.checkpoint is not None:
            self.reput.on_round = None
            self.checkpoint.close()
            self.checkpoint = None

    def destroy(self) -> None:
        """Delete every file of the store (call after shutdown, or instead of it)."""
        if not self._shutdown:
            self.shutdown()
        self.commit_log.destroy()
        self.queues.destroy()
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
        stats = self.stats.counts
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
            self.queues.flush(least_pages)
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

    # ================================================================== admin and runtime figures
    @property
    def disk_full(self) -> bool:
        """Writes are being refused for lack of space (see ``store.disk_space``)."""
        return self.disk_space.full

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return max(self.commit_log.min_offset, 0)

    def flush_behind_bytes(self) -> int:
        """CommitLog bytes written but not flushed yet (rocketmq_storage_flush_behind_bytes)."""
        return max(0, self.commit_log.max_offset - self.commit_log.flushed_where)

    def dispatch_behind_bytes(self) -> int:
        """CommitLog bytes not dispatched to the queues yet (rocketmq_storage_dispatch_behind_bytes)."""
        return self.reput.behind()

    def earliest_message_time(self) -> int:
        """RocketMQ's getEarliestMessageTime: the store time of the CommitLog's first message, -1 if none."""
        try:
            return self.commit_log.store_timestamp_at(self.min_phy_offset)
        except (ValueError, OSError):  # its file went with a cleanup meanwhile
            return -1

    def page_cache_lock_time_ms(self) -> float:
        """How long the CommitLog's put lock has been held by the writer holding it now, 0 when free
        (RocketMQ's pageCacheLockTimeMills)."""
        return self.commit_log.lock_held_ms()

    def topics_and_queues(self) -> dict[str, list[int]]:
        return self.queues.topics_and_queues()

    def delete_topics(self, names: Iterable[str]) -> int:
        """Delete the ConsumeQueues of these topics (the CommitLog keeps its records until retention)."""
        deleted = self.queues.delete_topics(names)
        for key in deleted:
            self.commit_log.topic_queue_table.pop(key, None)
        return len(deleted)

    def clean_expired_consumer_queue(self, live_topics: Iterable[str]) -> int:
        """CLEAN_EXPIRED_CONSUMEQUEUE (DefaultMessageStore.cleanExpiredConsumerQueue): delete the ConsumeQueues
        of topics not in ``live_topics``, and the ConsumeQueue files of the others whose entries all point
        below the CommitLog's min offset. A live topic's queue is never removed whole (RocketMQ's is when
        all of it is expired): its offsets then carry on rather than restart at 0 under its consumers.
        Returns the queues and files removed."""
        live = set(live_topics)
        removed = self.delete_topics({t for t in self.topics_and_queues() if t not in live})
        return removed + self.queues.delete_expired_files(self.commit_log.min_offset)

    def runtime_info(self) -> dict[str, str]:
        cfg = self.config
        info = self.stats.runtime_info()
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

    # ================================================================== read (handed to the part that holds it)
    # What the broker's services (schedule, timer, transactions, admin) read. Nothing outside store/
    # touches ConsumeQueue arrays, mapped files or the CommitLog directly (tests/store/test_face.py).
    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = MAX_PULL_MSG_SIZE, tag_codes: set[int] | None = None,
                    filter: Callable[[int, memoryview], bool] | None = None) -> GetMessageResult:  # noqa: A002
        """RocketMQ's getMessage (``MessageReader.get_message``)."""
        if self._shutdown or not self._loaded:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset)
        return self.reader.get_message(group, topic, queue_id, offset, max_msg_nums, max_total_bytes, tag_codes,
                                       filter)

    def consume_queues(self) -> list[ConsumeQueue]:
        return self.queues.queues()

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get(topic, queue_id)

    def queue_range(self, topic: str, queue_id: int) -> QueueRange:
        return self.queues.queue_range(topic, queue_id)

    def read_queue(self, topic: str, queue_id: int, offset: int, max_n: int) -> QueueEntries:
        """``ConsumeQueueTable.read_queue``: never past one ConsumeQueue file."""
        return self.queues.read_queue(topic, queue_id, offset, max_n)

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self.queues

    def queue_entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """(CommitLog offset, size, tag code) of one entry; None outside the queue's range."""
        return self.queues.queue_entry(topic, queue_id, offset)

    def queue_offset_at_or_after(self, topic: str, queue_id: int, commit_log_offset: int) -> int:
        return self.queues.queue_offset_at_or_after(topic, queue_id, commit_log_offset)

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message appended to (topic, queue) gets: ahead of
        ``queue_range().max_offset`` by what is appended but not yet dispatched."""
        return self.commit_log.topic_queue_table.get((topic, queue_id), 0)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.queue_range(topic, queue_id).max_offset

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.queue_range(topic, queue_id).min_offset

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        e = self.queues.queue_entry(topic, queue_id, offset)
        return e[0] if e is not None else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        e = self.queues.queue_entry(topic, queue_id, offset)
        if e is None or e[1] == BLANK_SIZE:
            return -1
        return self.commit_log.store_timestamp_at(e[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        if (topic, queue_id) not in self.queues:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, self.queues.queue_range(topic, queue_id).min_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Logical offset of the first message stored at or after ``timestamp_ms``; the max offset when
        there is none."""
        cl = self.commit_log
        return self.queues.offset_by_time(topic, queue_id, timestamp_ms, cl.min_offset, cl.store_timestamp_at)

    def commit_log_range(self) -> tuple[int, int]:
        """(first CommitLog offset still on disk, offset after the last record written)."""
        return self.commit_log.min_offset, self.commit_log.written[0]

    def read_commit_log_records(self, offset: int, max_bytes: int) -> tuple[DispatchBatch, int]:
        """What reput reads of the records from ``offset`` (about ``max_bytes``): topic, queue, offsets,
        store time, keys, ``UNIQ_KEY``, a column each; and the offset after them (no progress: nothing
        more is readable there)."""
        batch, nxt, _bad = self.commit_log.read_dispatch_requests(offset, max_bytes)
        return batch, nxt

    def offset_msg_id(self, commit_log_offset: int) -> str:
        """The offset msgId of the record at ``commit_log_offset`` (store host + port + offset)."""
        return self.commit_log.msg_id(commit_log_offset)

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None:
        return self.reader.select_one_message_by_offset(commit_log_offset, size)

    @property
    def has_index(self) -> bool:
        """True when messages are indexed by key (``query_message`` can find them)."""
        return self.index_service is not None

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]:
        return self.reader.query_message(topic, key, max_num, begin_ts, end_ts)
