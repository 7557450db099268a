"""Flush services: GroupCommitService (SYNC_FLUSH), FlushRealTimeService (ASYNC_FLUSH) and
FlushConsumeQueueService.

GroupCommitService is what makes SYNC_FLUSH affordable: every waiter that arrives while an fdatasync is
running is answered by the next one, so the number of fsyncs tracks disk latency, not message rate.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tidalmq.store.commit_log import CommitLog

log = logging.getLogger("tidalmq.store")

FlushCallback = Callable[[bool], object]


def _call(cb: FlushCallback, ok: bool) -> None:
    try:
        cb(ok)
    except Exception:
        log.exception("flush callback failed")


class ServiceThread(threading.Thread):
    """A daemon thread with a stop flag and a wake-up event (RocketMQ's ServiceThread)."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stopped = threading.Event()
        self._wakeup = threading.Event()

    def wakeup(self) -> None:
        self._wakeup.set()

    def wait_for_running(self, seconds: float) -> None:
        self._wakeup.wait(seconds)
        self._wakeup.clear()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)


class GroupCommitService(ServiceThread):
    def __init__(self, commit_log: CommitLog, timeout_ms: int,
                 on_flushed: Callable[[], None] = lambda: None) -> None:
        super().__init__("GroupCommitService")
        self.commit_log = commit_log
        self.timeout_s = timeout_ms / 1000
        self.on_flushed = on_flushed
        self._cond = threading.Condition()
        self._requests: list[tuple[int, FlushCallback, float]] = []

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()
        super().shutdown(timeout)

    def put_request(self, offset: int, callback: FlushCallback) -> None:
        if self.commit_log.flushed_where >= offset:
            _call(callback, True)
            return
        with self._cond:
            if self.stopped:
                closed = True
            else:
                closed = False
                self._requests.append((offset, callback, time.monotonic() + self.timeout_s))
                self._cond.notify()
        if closed:
            _call(callback, False)

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._requests and not self.stopped:
                    self._cond.wait()
                requests, self._requests = self._requests, []
                stopping = self.stopped and not requests
            if stopping:
                break
            self._do_commit(requests)
        # Final flush on the way out (RocketMQ flushes once more on shutdown).
        try:
            self.commit_log.flush(0)
        except OSError:
            log.exception("final flush failed")

    def _do_commit(self, requests: list[tuple[int, FlushCallback, float]]) -> None:
        try:
            self.commit_log.flush(0)
            self.on_flushed()
        except OSError:
            log.exception("group commit flush failed")
        flushed = self.commit_log.flushed_where
        now = time.monotonic()
        for offset, cb, deadline in requests:
            # A flush that finished after the deadline is a timeout for that waiter, as in RocketMQ,
            # where the putting thread stops waiting at syncFlushTimeout.
            _call(cb, flushed >= offset and now <= deadline)


class PeriodicFlushService(ServiceThread):
    """Flushes every ``interval_ms`` when at least ``least_pages`` are dirty, and whatever is dirty at least
    every ``thorough_ms`` (RocketMQ's flushLeastPages and flushThoroughInterval)."""

    def __init__(self, name: str, interval_ms: int, least_pages: int, thorough_ms: int) -> None:
        super().__init__(name)
        self.interval_s = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough_s = thorough_ms / 1000
        self._last_thorough = time.monotonic()

    def _least_pages_now(self) -> int:
        """The pages this round's flush needs at least: 0 when a thorough flush is due."""
        now = time.monotonic()
        if now - self._last_thorough >= self.thorough_s:
            self._last_thorough = now
            return 0
        return self.least_pages


class FlushRealTimeService(PeriodicFlushService):
    """ASYNC_FLUSH: every ``interval_ms`` flush when at least ``least_pages`` are dirty, and whatever is
    dirty at least every ``thorough_ms``."""

    def __init__(self, commit_log: CommitLog, interval_ms: int, least_pages: int, thorough_ms: int,
                 on_flushed: Callable[[], None] = lambda: None) -> None:
        super().__init__("FlushRealTimeService", interval_ms, least_pages, thorough_ms)
        self.commit_log = commit_log
        self.on_flushed = on_flushed

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self.interval_s)
            least = self._least_pages_now()
            try:
                if self.commit_log.flush(least):
                    self.on_flushed()
            except OSError:
                log.exception("commit log flush failed")
        for _ in range(3):  # RocketMQ retries the final flush
            try:
                self.commit_log.flush(0)
                break
            except OSError:
                log.exception("final flush failed")


class FlushConsumeQueueService(PeriodicFlushService):
    """Flushes the ConsumeQueues (and the index) periodically; a thorough pass also advances the
    checkpoint's logics/index timestamps, since only then is everything dispatched before it durable."""

    def __init__(self, flush_all: Callable[[int], None], interval_ms: int, least_pages: int,
                 thorough_ms: int) -> None:
        super().__init__("FlushConsumeQueueService", interval_ms, least_pages, thorough_ms)
        self.flush_all = flush_all

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self.interval_s)
            if self.stopped:
                break
            least = self._least_pages_now()
            try:
                self.flush_all(least)
            except Exception:
                log.exception("consume queue flush failed")
