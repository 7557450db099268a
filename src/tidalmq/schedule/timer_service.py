"""TimerMessageService: RocketMQ 5's arbitrary delivery time on top of the TimerStore.

The send path (broker/schedule/hooks.TimerRewrite) parks a timer message in ``rmq_sys_wheel_timer`` queue 0 with
TIMER_OUT_MS = its deliver time; the CommitLog's dispatch copies that time into the ConsumeQueue entry's tag.
One thread then, holding the service's lock:

- **enqueues** (``TimerEnqueue``, schedule/timer_enqueue.py): reads that ConsumeQueue from where the TimerStore's
  watermark says it stopped, reads each message's properties (REAL_TOPIC + UNIQ_KEY make the cancel hash;
  TIMER_DEL_UNIQKEY makes a delete marker; schedule/timer_fields.py) and hands the batch to
  ``TimerStore.enqueue`` — idempotent, so a replay after a crash files nothing twice;
- **delivers** (``TimerDeliver``, schedule/timer_deliver.py): sleeps until ``next_due_ms`` (woken early by the
  store's arrival listener), pops what fell due, re-stores the bodies in their real topic and queue, then
  commits; exactly-once across SIGKILL through the journal (schedule/timer_journal.py).

Once a second the commit is made durable on the TimerFlush thread (here), with the per-topic counts
(``TimerMetrics``); readers on other threads read the view the thread publishes (``TimerViews``,
schedule/timer_view.py). A power loss is only as safe as the flushes (at-least-once).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidalmq.common import message as mc
from tidalmq.common.fileutil import atomic_write
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import RecordError, decode_record
from tidalmq.schedule import timer_takeover
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.schedule.timer_access import PipelinedPuts, TimerStoreAccess
from tidalmq.schedule.timer_deliver import TimerDeliver
from tidalmq.schedule.timer_enqueue import TimerEnqueue
from tidalmq.schedule.timer_fields import EnqueueFields
from tidalmq.schedule.timer_flush import FlushPoint
from tidalmq.schedule.timer_store import DAY_MS, TimerStore, ms_now
from tidalmq.schedule.timer_view import RateMeter, TimerMetrics, TimerView, TimerViews, minutes_from_json
from tidalmq.store.api import MessageStore

log = logging.getLogger(__name__)

MAX_DELIVER_ROUNDS = 16
IDLE_WAIT_S = 1.0
SYNC_INTERVAL_MS = 1000  # how often the TimerStore's commit is made durable (bounds re-pops after a crash)
SLOT_MS = 1000


@dataclass(frozen=True, slots=True)
class _SyncPoint:
    """A durable commit under way: the timer store's point and the per-topic counts taken with it."""

    store: FlushPoint
    metrics: bytes
    metrics_mark: int


@dataclass
class CancelTarget:
    """What the broker knows of the message a cancel names (see find_cancel_target)."""

    state: str  # "pending", "delivered", "cancelled", "unknown"; "unchecked" when there is no index
    deliver_ms: int = 0
    real_qid: int = 0


def check_precision(precision_ms: int) -> int:
    if precision_ms < 1 or SLOT_MS % precision_ms:
        raise ValueError(f"timerPrecisionMs must be >= 1 and divide {SLOT_MS}, got {precision_ms}")
    return precision_ms


class TimerMessageService:
    def __init__(self, store: TimerStoreAccess, root_dir: str | Path, *, precision_ms: int = 1000,
                 max_delay_ms: int = 400 * DAY_MS, stats: ScheduleStats | None = None,
                 clock: Callable[[], int] = ms_now, wheel_slots: int | None = None,
                 pipeline: PipelinedPuts | None = None, pipeline_depth: int = 1) -> None:
        self.store = store
        self.root = Path(root_dir)
        self.precision_ms = check_precision(precision_ms)
        self.fields = EnqueueFields(store)
        self.timer = TimerStore(str(self.root), precision_ms=precision_ms, slot_ms=SLOT_MS, wheel_slots=wheel_slots,
                                max_delay_ms=max_delay_ms, clock=clock, key_hashes=self.fields.key_hashes)
        self.stats = stats or ScheduleStats()
        self.clock = clock
        self.metrics = TimerMetrics(self.root / "timermetrics")
        self.counters = Counter[str]()
        self._wake = threading.Event()
        self.enqueue = TimerEnqueue(store, self.timer, self.fields, self.metrics, stats=self.stats,
                                    counters=self.counters, clock=clock, precision_ms=self.precision_ms,
                                    wake=self._wake, mark_dirty=self._mark_dirty)
        self.deliver = TimerDeliver(store, self.timer, self.fields, self.metrics, self.root, stats=self.stats,
                                    counters=self.counters, clock=clock, mark_dirty=self._mark_dirty,
                                    pipeline=pipeline, pipeline_depth=pipeline_depth)
        self.views = TimerViews(self._wake)
        self._lock = threading.Lock()  # the TimerStore is single-owner: the thread, load and shutdown
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The TimerFlush thread (RocketMQ's TimerFlushService): makes the commit durable, off the loop.
        self._flusher: threading.Thread | None = None
        self._flush_wanted = threading.Event()
        self._commit_failing: OSError | None = None  # the error of the last commit, until one succeeds
        self._last_sync = 0  # when the last flush point was taken (the service's clock)
        self._dirty = False
        self._enq_rate = RateMeter()
        self._del_rate = RateMeter()

    def _mark_dirty(self) -> None:
        self._dirty = True

    @property
    def view(self) -> TimerView | None:
        """What the timer thread last published (readers never take its lock)."""
        return self.views.view

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        takeover = timer_takeover.begin(self.root, self.clock())
        if takeover is not None:
            log.warning("timer: taking over from a replica's store: wheel rebuilt from the CommitLog; messages "
                        "due up to %d are checked against the index for the old master's copies",
                        takeover.verify_upto_ms)
        self.timer.load()
        self.metrics.load(self.timer.enqueue_offset)
        self.deliver.load(self.timer.enqueue_offset, None if takeover is None else takeover.verify_upto_ms)
        self._publish_view(self.timer.next_due_ms())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="TimerMessageService", daemon=True)
        self._flusher = threading.Thread(target=self._flush_loop, name="TimerFlush", daemon=True)
        self._thread.start()
        self._flusher.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        self._flush_wanted.set()
        if self._thread is not None:
            self._thread.join(15)
        if self._flusher is not None:
            self._flusher.join(15)
        if not self.deliver.journal.is_open:
            return  # never loaded (a slave's), or already shut down
        with self._lock:
            try:
                try:
                    self._sync()
                finally:
                    self.timer.close()  # its files released even when its flush fails
            except OSError as e:  # a full disk: what is not committed is recovered as after a kill
                log.error("timer store final commit failed: %s; the next start recovers from the journal", e)
            except Exception:
                log.exception("timer store final commit failed")
            finally:
                self.deliver.journal.close()

    def on_arrival(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Store arrival listener (reput thread): a timer message or cancel was dispatched."""
        if any(topic == TIMER_TOPIC for topic, _ in arrivals):
            self._wake.set()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        # Dispatch what the CommitLog holds first: the replay reads the ConsumeQueue and the post-crash check
        # reads the index, both built by reput.
        self.store.wait_reput(self.store.max_phy_offset, 30.0)
        while not self._stop.is_set():
            self._wake.clear()
            try:
                with self._lock:
                    busy = self.enqueue.enqueue_round()
                    for _ in range(MAX_DELIVER_ROUNDS):
                        if not self.deliver.deliver_round():
                            break
                        busy = True
                    self.deliver.drain()
                    if self._dirty and self.clock() - self._last_sync >= SYNC_INTERVAL_MS:
                        self._last_sync = self.clock()
                        self._flush_wanted.set()
                    nxt = self.timer.next_due_ms()
                    if self.views.due(busy):
                        self._publish_view(nxt)
            except Exception:
                log.exception("timer round failed")
                busy, nxt = False, self.clock() + 1000
            if busy:
                continue
            wait = IDLE_WAIT_S if nxt is None else (nxt - self.clock()) / 1000.0
            gather = self.enqueue.gather_wait_s()
            if gather is not None:  # entries wait for a fuller round: until then at most
                wait = min(wait, gather)
            if wait > 0:
                self._wake.wait(min(wait, IDLE_WAIT_S))

    # ------------------------------------------------------------------ durable commit
    # Once a second the commit is made durable: the TimerLog and wheel synced, then the checkpoint and the
    # per-topic counts written. The disk's part runs on the TimerFlush thread without the service's lock,
    # so a slow write-back (a busy disk) never holds up a delivery; the points are taken and settled under
    # the lock, and TimerStore keeps their order (docs/scheduled-delivery.md, "The durable commit runs
    # beside the deliveries").

    def _flush_loop(self) -> None:
        while True:
            self._flush_wanted.wait()
            if self._stop.is_set():
                return  # shutdown() makes the last one, the thread stopped
            self._flush_wanted.clear()
            try:
                with self._lock:
                    if not self._dirty or not self.deliver.journal.is_open:
                        continue
                    point = self._sync_point()
                self._sync_files(point)
                with self._lock:
                    self._synced(point)
            except OSError as e:  # a full or failing disk: one line, not one a second
                if self._commit_failing is None:
                    log.error("timer store commit failed: %s; tried again every second while deliveries go on "
                              "(a crash meanwhile redelivers what was delivered since the last commit)", e)
                self._commit_failing = e
                with self._lock:
                    self._dirty = True
            except Exception:
                log.exception("timer store commit failed; tried again in a second")
                with self._lock:
                    self._dirty = True
            else:
                if self._commit_failing is not None:
                    log.warning("timer store commit made again (it had failed: %s)", self._commit_failing)
                    self._commit_failing = None

    def _sync(self) -> None:
        """The three steps at once (shutdown, holding the lock)."""
        point = self._sync_point()
        self._sync_files(point)
        self._synced(point)

    def _sync_point(self) -> _SyncPoint:
        self.timer.commit_delivered(self.timer.committed_cursor, sync=False)
        self._dirty = False
        mark = self.timer.enqueue_offset
        return _SyncPoint(self.timer.flush_point(), self.metrics.snapshot(mark), mark)

    def _sync_files(self, point: _SyncPoint) -> None:
        self.timer.sync_point(point.store)
        atomic_write(self.metrics.path, point.metrics)

    def _synced(self, point: _SyncPoint) -> None:
        self.timer.flushed(point.store)
        self.metrics.written(point.metrics_mark)
        self.deliver.committed(point.store.commit)

    # ------------------------------------------------------------------ observability
    def _publish_view(self, nxt: int | None) -> None:
        """Timer thread (or load): publish a new TimerView in one attribute store."""
        now = self.clock()
        hist = self.timer.histogram(now)  # its buckets add up to pending_count(): one walk of the wheel
        self.views.publish(TimerView(now, max(0, sum(hist.values())), hist, nxt, self.timer.enqueue_offset,
                                     self.metrics.topics.to_json()))

    def request_view(self) -> None:
        """Ask the thread for a fresh view at its next round (readers call this; it never waits)."""
        self.views.request()

    def fresh_view(self, timeout: float) -> TimerView | None:
        """Block (off the event loop only) until the thread published a view after this call; after
        ``timeout`` seconds (the thread is busy in a put or an fsync) the last one published."""
        return self.views.fresh(timeout, self._thread is not None and self._thread.is_alive())

    def topic_minutes(self) -> dict[str, Counter[int]]:
        """Pending timer messages per real topic by deliver minute, as last published (a copy)."""
        view = self.view
        return {} if view is None else {t: minutes_from_json(c) for t, c in view.topics.items()}

    def snapshot(self, *, ask_fresh: bool = True) -> dict[str, Any]:
        """Counters, rates, lateness and the pending histogram (callable from any thread, never waits on
        the timer thread). Pending counts are from the last TimerView (``viewAgeMs`` old); counters and
        rates are current. Asks for a fresh view for the next reader unless ``ask_fresh`` is False."""
        now = self.clock()
        view = self.view
        if ask_fresh:
            self.request_view()
        if view is None:  # not loaded
            view = TimerView(now, 0, dict.fromkeys(("due", "minute", "hour", "day", "later", "rolled"), 0), None, 0, {})
        pending, hist, nxt = view.pending, view.histogram, view.next_due_ms
        s = self.stats.snapshot()
        out: dict[str, Any] = {
            "pending": pending,
            "enqueued": s["enqueued"],
            "delivered": s["delivered"],
            "early": s["early"],
            "enqueueTps": round(self._enq_rate.rate(s["enqueued"]), 1),
            "deliverTps": round(self._del_rate.rate(s["delivered"]), 1),
            "latenessP50Ms": s["latenessP50Ms"],
            "latenessP99Ms": s["latenessP99Ms"],
            "latenessMaxMs": s["latenessMaxMs"],
            "latenessLastBatchMs": self.deliver.last_lateness_ms,
            # How far behind the service is now: the oldest due entry not yet delivered.
            "latenessNowMs": max(0, now - nxt) if nxt is not None and nxt <= now else 0,
            "nextDueMs": nxt if nxt is not None else -1,
            "precisionMs": self.precision_ms,
            "enqueueOffset": view.enqueue_offset,
            "viewAgeMs": max(0, now - view.published_ms),
        }
        for k in ("duplicatesSkipped", "redelivered", "cancels", "cancelsTooLate", "reschedules", "reschedulesTooLate",
                  "unreadable"):
            out[k] = self.counters[k]
        out["histogram"] = {"due": hist["due"], "minute": hist["minute"], "hour": hist["hour"],
                            "day": hist["day"], "beyond": hist["later"] + hist["rolled"]}
        out["latenessHistogram"] = self.stats.lateness_histogram()
        return out


def find_cancel_target(store: MessageStore, topic: str, uniq: str, now_ms: int) -> CancelTarget:
    """Look the target of a cancel up in the store's index: parked in rmq_sys_wheel_timer (pending), a cancel
    marker for it there (cancelled), or its copy in the real topic (delivered). "unchecked" without an index.
    Reads the index (it may block on files): the broker calls it off its event loop, once reput has indexed
    what was appended before the cancel."""
    if not store.has_index:
        return CancelTarget("unchecked")
    found: CancelTarget | None = None
    found_at = -1
    for view in store.query_message(TIMER_TOPIC, uniq, 64, 0, 1 << 62):
        try:
            m = decode_record(view, read_body=False)
        except RecordError:
            continue
        props = m.properties
        if props.get(mc.REAL_TOPIC) != topic:
            continue
        if mc.TIMER_DEL_UNIQKEY in props:
            if props[mc.TIMER_DEL_UNIQKEY] == f"{topic}+{uniq}":
                return CancelTarget("cancelled")
            continue
        if props.get(mc.UNIQ_KEY) == uniq and m.commit_log_offset > found_at:  # a reschedule's copy is the later
            try:
                found = CancelTarget("pending", int(props.get(mc.TIMER_OUT_MS, "0")),
                                     int(props.get(mc.REAL_QID, "0")))
            except ValueError:
                continue
            found_at = m.commit_log_offset
    if found is not None:
        return CancelTarget("delivered") if found.deliver_ms <= now_ms else found
    if store.query_message(topic, uniq, 1, 0, 1 << 62):
        return CancelTarget("delivered")
    return CancelTarget("unknown")
