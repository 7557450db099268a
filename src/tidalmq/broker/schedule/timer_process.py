"""The broker's side of the schedule process (timerProcessEnable, docs/multicore.md).

TimerProcess starts ``python -m tidalmq.schedule.timer_host`` with one end of a socket pair, restarts it
when it dies, stops it on shutdown, and serves its requests on a thread of its own:

- PUT: a batch of deliveries, appended with ``put_messages`` as soon as it arrives (this thread waits for
  no event loop, so deliveries do not queue behind client sends), answered with the put statuses, then
  dispatched to the queues on this thread (the reput thread's wake-up, its pause and its turn at the
  interpreter are not on a delivery's path);
- QUERY / WAIT_REPUT: the index lookups and the reput wait of the timer's post-crash check;
- VIEW: the timer's snapshot, kept for runtime info and GET_TIMER_METRICS.

It publishes (STATE) how far the child may read: the timer queue's range, the CommitLog's offsets. The
broker's event loop sends the STATE that follows arrivals (attach_loop); a publisher thread sends the
periodic one, and what the loop could not send without waiting.
To the rest of the broker it shows the face of TimerMessageService that runtime info, metrics and the
lifecycle use (load, start, shutdown, on_arrival, snapshot, topic_minutes, fresh_view).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import threading
import time
from collections import Counter
from typing import Any

from tidalmq.broker.schedule.child import EarlyChild, child_config, spawn
from tidalmq.common.log_limit import LogLimiter, short_error
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.schedule.channel import (
    ChannelError,
    FrameReader,
    Kind,
    decode_json,
    decode_puts,
    encode_records,
    encode_statuses,
    frame,
    json_frame,
)
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.schedule.timer_view import HISTOGRAM_BUCKETS, minutes_from_json
from tidalmq.store.api import MessageStore
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.results import PutStatus

log = logging.getLogger(__name__)

STATE_INTERVAL_S = 1.0  # STATE also goes out unasked this often (retention moves the CommitLog's head)
# After an arrival in the timer topic, wait this long before telling the child (as the reput waits before
# a round, store/reput.py): the broker's event loop dispatches after every group commit, so under a burst
# of timer sends arrivals come every few hundred microseconds, and a STATE for each woke the publisher
# thread (the GIL taken from the loop; the loop now sends it itself) and the child each time. The pause lets
# one STATE tell many arrivals: more timer batches a second, less of the schedule process's CPU a message
# (docs/benchmarks.md, "Figures behind the code").
STATE_PAUSE_S = 0.002
RESTART_DELAY_S = (0.1, 0.5, 2.0)  # after the child died: quick first, slower if it keeps dying
STOP_WAIT_S = 15.0


class TimerProcess:
    def __init__(self, store: MessageStore, config: MessageStoreConfig, *,
                 early: EarlyChild | None = None) -> None:
        self.store = store
        self.precision_ms = config.timer_precision_ms
        self._child_config = child_config(config)
        # A child the command started before it imported the broker (schedule_child.start_early): the
        # first one run, if it was started with this very config.
        self._early: EarlyChild | None = None
        if early is not None:
            if early.config == self._child_config:
                self._early = early
            else:
                log.warning("the schedule process started early has another config: started again")
                early.discard()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._stopping = threading.Event()
        # Set by start() (the store is loaded and started: STATE can be sent, requests served) or by
        # shutdown(). A child started earlier (prestart) imports and loads its own files meanwhile.
        self._store_ready = threading.Event()
        self._started = False
        self._refusing = False  # a PUT failed: the following ones are refused until RESUME (pipelined batches)
        self._log_limit = LogLimiter(log)
        self._state_wanted = threading.Event()
        self._view_wanted = False
        self._view: dict[str, Any] | None = None
        self._ready = False  # the current child pushed a view: it is loaded and answers
        self._view_cond = threading.Condition()
        self._supervisor: threading.Thread | None = None
        self._publisher: threading.Thread | None = None
        # The broker's event loop (attach_loop), which tells the child of arrivals itself: see on_arrival.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._state_armed = False  # a STATE is due on the loop after the pause (loop thread only)
        self._backlog = b""  # the unsent end of a frame the loop began (sent first under _send_lock)

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Nothing to load here: the child loads the timer's files."""

    def prestart(self) -> None:
        """Start the child before the broker's store is loaded (a recovery after a crash takes a while):
        its interpreter start-up and the load of the timer's files overlap the store's, and the first
        delivery after a restart comes that much sooner. The child reads nothing of the store before
        the first STATE, which start() allows; its requests wait in the socket until then."""
        if self._supervisor is None:
            # The child is started from the supervisor thread, which lives as long as the broker: Linux's
            # PR_SET_PDEATHSIG fires when the *thread* that started the child ends.
            self._supervisor = threading.Thread(target=self._supervise, name="TimerProcessSupervisor", daemon=True)
            self._supervisor.start()

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on the broker's event loop: from then on arrivals are told to the child from it."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def start(self) -> None:
        self.prestart()
        self._started = True
        self._store_ready.set()
        self._publisher = threading.Thread(target=self._publish_loop, name="TimerProcessState", daemon=True)
        self._publisher.start()

    def shutdown(self) -> None:
        self._stopping.set()
        self._store_ready.set()
        self._state_wanted.set()
        if self._supervisor is None and self._early is not None:  # never adopted: stopped before prestart
            self._early.discard()
            self._early = None
        proc = self.proc
        if proc is not None and not self._ready and proc.poll() is None:
            # Still loading (a broker stopped right after its start): the timer's files are crash-safe, no
            # need to wait for a load only to commit it. SIGTERM ends it at once until it serves.
            proc.terminate()
        # One deadline for the whole stop, not one per wait: a broker asked to stop under load must not
        # add the child's commit, the supervisor's and the publisher's waits up.
        deadline = time.monotonic() + STOP_WAIT_S
        self._send(frame(Kind.STOP))
        if proc is not None:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("schedule process %d did not stop in %.0f s: killed", proc.pid, STOP_WAIT_S)
                proc.kill()
                proc.wait()
        for thread in (self._supervisor, self._publisher):
            if thread is not None:
                thread.join(max(0.5, deadline - time.monotonic()))  # the child is gone: they end soon
                if thread.is_alive():
                    log.error("%s still running %.0f s after the stop began; left behind (a daemon thread)",
                              thread.name, STOP_WAIT_S)

    @property
    def pid(self) -> int | None:
        proc = self.proc
        return None if proc is None or proc.poll() is not None else proc.pid

    def _supervise(self) -> None:
        deaths = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                self._run_child()
            except Exception:
                log.exception("schedule process supervision failed")
                proc = self.proc
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if self._stopping.is_set():
                break
            deaths = deaths + 1 if time.monotonic() - started < 10 else 1
            self.restarts += 1
            self._stopping.wait(RESTART_DELAY_S[min(deaths, len(RESTART_DELAY_S)) - 1])

    def _run_child(self) -> None:
        """Start a child, serve it until its channel closes, reap it."""
        early, self._early = self._early, None
        proc, sock = (early.proc, early.sock) if early is not None else spawn(self._child_config)
        with self._view_cond:
            self._ready = False
        self.proc = proc
        self._store_ready.wait()
        if not self._started:
            # Stopped before the store was ever started (a broker that failed to load): nothing to
            # serve; shutdown() ended the child, which was still loading.
            sock.close()
            proc.wait()
            return
        with self._send_lock:
            self._sock = sock
            self._backlog = b""  # a frame's end meant for the child before
        self._refusing = False  # a new child starts from its journal
        self._send(self._state_frame())
        if self._stopping.is_set():  # shutdown() began while the child was being started
            self._send(frame(Kind.STOP))
        try:
            self._serve(proc, sock)
        finally:
            with self._send_lock:
                self._sock = None
            sock.close()
        code = proc.wait()
        if not self._stopping.is_set():
            log.error("schedule process %d exited (%s): restarting it", proc.pid, code)

    # ------------------------------------------------------------------ the channel
    def _send(self, data: bytes) -> None:
        with self._send_lock:
            sock = self._sock
            if sock is None:
                return
            try:
                if self._backlog:
                    sock.sendall(self._backlog)
                    self._backlog = b""
                sock.sendall(data)
            except OSError:
                pass  # the child died: the supervisor restarts it, and the new one is sent STATE first

    def _send_without_waiting(self, data: bytes) -> bool:
        """The event loop's send: never waits, for the lock or for room in the socket. False when the
        frame was not sent whole (the lock was held, the socket full, a backlog waiting): what was sent
        of it is the backlog, which the next ``_send`` completes before anything else."""
        if not self._send_lock.acquire(blocking=False):
            return False
        try:
            sock = self._sock
            if sock is None:
                return True  # no child: the next one is sent STATE first
            if self._backlog:
                return False
            try:
                sent = sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return False
            except OSError:
                return True  # the child died, as in _send
            if sent < len(data):
                self._backlog = data[sent:]
                return False
            return True
        finally:
            self._send_lock.release()

    def _serve(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        reader = FrameReader()
        while True:
            try:
                data = sock.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            try:
                for kind, payload in reader.feed(data):
                    self._handle(kind, payload)
            except Exception:
                # A bad frame, or a request that failed here: the child restarts from its journal, which
                # has not moved past what was not answered.
                log.exception("schedule process request failed: restarting it")
                proc.kill()
                return

    def _handle(self, kind: Kind, payload: bytes) -> None:
        store = self.store
        if kind is Kind.PUT:
            requests = decode_puts(payload)
            if self._refusing:
                # A put before this one failed: the child has more batches in flight, and storing them
                # would put them ahead of the one it retries. Refused, nothing stored, until RESUME.
                statuses = [PutStatus.SERVICE_NOT_AVAILABLE] * len(requests)
            else:
                statuses = [r.status for r in store.put_messages(requests, dispatch_myself=True)]
                self._refusing = any(s is not PutStatus.PUT_OK for s in statuses)
            self._send(frame(Kind.PUT_RESULT, encode_statuses(statuses)))
            try:
                store.dispatch()  # after the answer: the child's next batch is under way meanwhile
            except Exception as e:  # not the child's doing: the reput thread retries within a second
                self._log_limit.warning("dispatch", "dispatch after a schedule process put failed: %s",
                                        short_error(e))
        elif kind is Kind.RESUME:
            self._refusing = False
        elif kind is Kind.QUERY:
            q = decode_json(payload)
            views = store.query_message(q["topic"], q["key"], int(q["maxNum"]), int(q["begin"]), int(q["end"]))
            self._send(frame(Kind.RECORDS, encode_records(views)))
        elif kind is Kind.WAIT_REPUT:
            ok = store.wait_reput(store.max_phy_offset, float(decode_json(payload)["timeout"]))
            self._send(self._state_frame())  # before the answer: the child reads what was dispatched
            self._send(json_frame(Kind.REPUT_DONE, ok))
        elif kind is Kind.VIEW:
            view = decode_json(payload)
            view["at"] = time.monotonic()
            with self._view_cond:
                self._view = view
                self._ready = True
                self._view_cond.notify_all()
        else:
            raise ChannelError(f"unexpected {kind.name} from the schedule process")

    def _state_frame(self) -> bytes:
        store = self.store
        lo, hi = store.queue_range(TIMER_TOPIC, 0)
        queues = [[TIMER_TOPIC, 0, lo, hi]] if store.has_queue(TIMER_TOPIC, 0) else []
        # The CommitLog's end read after the queue's: every published entry points below it.
        return json_frame(Kind.STATE, {"queues": queues, "minPhy": store.min_phy_offset,
                                       "maxPhy": store.max_phy_offset, "index": store.has_index})

    def _publish_loop(self) -> None:
        while not self._stopping.is_set():
            if self._state_wanted.wait(STATE_INTERVAL_S):
                time.sleep(STATE_PAUSE_S)  # the reput rounds of the next moment ride along
            self._state_wanted.clear()
            if self._stopping.is_set():
                return
            self._send(self._state_frame())
            if self._view_wanted:
                self._view_wanted = False
                self._send(frame(Kind.VIEW_WANTED))

    def on_arrival(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Store arrival listener (the event loop or the reput thread, whichever dispatched): never
        blocks on the socket. With the broker's event loop attached, the loop tells the child itself,
        a pause after the arrival; else the publisher thread does."""
        if not any(topic == TIMER_TOPIC for topic, _ in arrivals):
            return
        loop = self._loop
        if loop is None:
            self._state_wanted.set()
        elif threading.get_ident() == self._loop_thread:
            self._arm_state()
        elif not self._state_armed:  # a stale True: the armed STATE is built after it is cleared
            try:
                loop.call_soon_threadsafe(self._arm_state)
            except RuntimeError:  # the loop is closed: the broker is stopping
                self._state_wanted.set()

    def _arm_state(self) -> None:
        if not self._state_armed:
            self._state_armed = True
            assert self._loop is not None
            self._loop.call_later(STATE_PAUSE_S, self._publish_on_loop)

    def _publish_on_loop(self) -> None:
        self._state_armed = False  # before the state is read: an arrival after this arms another
        if not self._send_without_waiting(self._state_frame()):
            self._state_wanted.set()  # the publisher thread sends one, after the backlog

    # ------------------------------------------------------------------ observability
    def request_view(self) -> None:
        self._view_wanted = True
        self._state_wanted.set()

    def fresh_view(self, timeout: float) -> dict[str, Any] | None:
        """Block (off the event loop only) until the child pushed a view after this call, at most
        ``timeout`` seconds; then the last one received."""
        with self._view_cond:
            old = self._view
            self.request_view()
            if self._ready and self.pid is not None:  # a child still loading would not answer in time
                self._view_cond.wait_for(lambda: self._view is not old, timeout)
            return self._view

    def snapshot(self, *, ask_fresh: bool = True) -> dict[str, Any]:
        """The child's last snapshot (``viewAgeMs`` counts from when it was taken; a restarted child's
        counters start from zero, as a restarted broker's do), plus the process's own figures. Before the
        first child loaded: zeros, with ``pending`` -1 (not known yet) and ``processReady`` false."""
        view = self._view
        if ask_fresh:
            self.request_view()
        if view is None:
            out: dict[str, Any] = dict.fromkeys(
                ("pending", "enqueued", "delivered", "early", "enqueueTps", "deliverTps", "latenessP50Ms",
                 "latenessP99Ms", "latenessMaxMs", "latenessLastBatchMs", "latenessNowMs", "enqueueOffset",
                 "viewAgeMs", "appendP99Ms", "appendMaxMs", "duplicatesSkipped", "redelivered", "cancels", "cancelsTooLate",
                 "reschedules", "reschedulesTooLate", "unreadable"), 0)
            out.update(pending=-1, nextDueMs=-1, precisionMs=self.precision_ms, histogram=dict.fromkeys(HISTOGRAM_BUCKETS, 0),
                       latenessHistogram=ScheduleStats().lateness_histogram())
        else:
            out = dict(view["snapshot"])
            out["viewAgeMs"] = int(out.get("viewAgeMs", 0)) + int((time.monotonic() - view["at"]) * 1000)
        out["process"] = "separate"
        out["processPid"] = self.pid or -1
        out["processRestarts"] = self.restarts
        out["processReady"] = str(self._ready).lower()
        return out

    def topic_minutes(self) -> dict[str, Counter[int]]:
        view = self._view
        if view is None:
            return {}
        return {t: minutes_from_json(c) for t, c in view["topics"].items()}
