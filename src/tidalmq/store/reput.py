"""ReputMessageService: turns what the CommitLog accepted into ConsumeQueue and index entries.

The thread sleeps until the CommitLog signals a write, reads every record past ``reput_from_offset``
and hands them, a round at a time, to the store's dispatcher. Arrival listeners are told once per round
with the queues the round touched (not per message), which is what long polling needs.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from tidalmq.common.fileutil import DiskFullError
from tidalmq.store.commit_log import CommitLog
from tidalmq.store.flush import ServiceThread
from tidalmq.store.results import DispatchBatch

log = logging.getLogger("tidalmq.store")

# How much CommitLog one round dispatches before telling listeners (bounds notification latency).
ROUND_BYTES = 4 * 1024 * 1024
# After a wake-up, let appends accumulate this long before a round (RocketMQ's reput polls every 1 ms):
# fewer, larger rounds, and fewer hand-offs of the interpreter between this thread and the appender.
ROUND_PAUSE_S = 0.001


class ReputMessageService(ServiceThread):
    def __init__(self, commit_log: CommitLog,
                 dispatch: Callable[[DispatchBatch], dict[tuple[str, int], int]],
                 listeners: list[Callable[[dict[tuple[str, int], int]], None]]) -> None:
        super().__init__("ReputMessageService")
        # on_round(offset, store timestamp): a round ended, everything before offset dispatched (the store
        # sets the checkpoint's dispatchedPhyOffset there: where recovery after a process crash starts)
        self.on_round: Callable[[int, int], None] | None = None
        self.commit_log = commit_log
        self.dispatch = dispatch
        self.listeners = listeners
        self.reput_from_offset = 0
        self.last_dispatched_store_timestamp = 0
        self._progress = threading.Condition()
        self._round = threading.Lock()  # one dispatcher at a time: this thread or an appender's
        self._stalled = False
        # (offset, seq, fn): called once reput passes offset (see on_reput); seq keeps the heap off fn.
        self._waiters: list[tuple[int, int, Callable[[], object]]] = []
        self._seq = itertools.count()

    def behind(self) -> int:
        return self.commit_log.max_offset - self.reput_from_offset

    def do_reput(self, blocking: bool = True) -> bool:
        """Dispatch everything written so far. Returns False if an undecodable record blocked it, or,
        with ``blocking=False``, if another thread's round is under way (nothing done)."""
        if not self._round.acquire(blocking):
            return False
        try:
            return self._dispatch_written()
        finally:
            self._round.release()

    def _dispatch_written(self) -> bool:
        while self.reput_from_offset < self.commit_log.max_offset:
            prev = self.reput_from_offset
            batch, next_offset, stalled = self.commit_log.read_dispatch_requests(prev, ROUND_BYTES)
            touched = self.dispatch(batch) if len(batch) else {}
            if len(batch):
                self.last_dispatched_store_timestamp = int(batch.store_timestamps[-1])
            with self._progress:
                self.reput_from_offset = next_offset
                self._progress.notify_all()
                ready = self._take_waiters(next_offset) if self._waiters else ()
            on_round = self.on_round
            if on_round is not None and next_offset != prev:
                on_round(next_offset, self.last_dispatched_store_timestamp)
            for fn in ready:
                self._call(fn)
            if touched:
                for listener in self.listeners:
                    try:
                        listener(touched)
                    except Exception:
                        log.exception("arrival listener failed")
            if stalled:
                self._stalled = True
                return False
            if next_offset == prev:
                break
        return True

    def wait_reput(self, offset: int, timeout: float) -> bool:
        with self._progress:
            return self._progress.wait_for(lambda: self.reput_from_offset >= offset, timeout)

    def on_reput(self, offset: int, fn: Callable[[], object]) -> None:
        """Call ``fn()`` once everything before ``offset`` is dispatched: now (on the caller's thread) if it
        is, else from whichever thread dispatches past it. ``fn`` must be quick and must not block."""
        with self._progress:
            if self.reput_from_offset < offset:
                heapq.heappush(self._waiters, (offset, next(self._seq), fn))
                return
        self._call(fn)

    def _take_waiters(self, reached: int) -> list[Callable[[], object]]:
        out = []
        while self._waiters and self._waiters[0][0] <= reached:
            out.append(heapq.heappop(self._waiters)[2])
        return out

    @staticmethod
    def _call(fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            log.exception("reput waiter failed")

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(1.0)  # also woken by every CommitLog write
            time.sleep(ROUND_PAUSE_S)
            try:
                self.do_reput()
            except DiskFullError:
                pass  # the store's DiskSpaceGuard said so once; retried on the next wake-up (<= 1 s)
            except Exception:
                log.exception("reput failed")
        # Dispatch what is left so a clean shutdown leaves complete ConsumeQueues.
        try:
            self.do_reput()
        except Exception:
            log.exception("final reput failed")
