"""The schedule process: TimerMessageService on a core of its own (docs/multicore.md).

``python -m tidalmq.schedule.timer_host --fd N --config JSON`` is started by the broker
(broker/schedule/timer_process.py) with one end of a socket pair as fd N. It follows the CommitLog and the timer
topic's ConsumeQueue read-only (store/follower.py), within what the broker publishes (STATE frames), keeps
the timer's own files (timerwheel, timerlog/, timercheck, timerdeliver, timermetrics) and hands its
deliveries back in PUT frames; the broker appends them and answers, and only that answer moves the
delivery journal on. The process ends with the broker: on channel EOF, and by PR_SET_PDEATHSIG.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from tidalmq.common.collector import settle_after_start
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.schedule.channel import (
    FrameReader,
    Kind,
    decode_json,
    decode_records,
    decode_statuses,
    encode_puts,
    frame,
    json_frame,
)
from tidalmq.schedule.timer_service import TimerMessageService
from tidalmq.store.follower import StoreFollower
from tidalmq.store.results import AppendResult, PutRequest, PutStatus, QueueRange

log = logging.getLogger("tidalmq.schedule.host")

PR_SET_PDEATHSIG = 1
VIEW_PUSH_INTERVAL_S = 0.5  # how often a changed snapshot is pushed to the broker unasked
LOCK_WAIT_S = 30.0  # a previous schedule process may still be finishing its exit
# Delivery batches in flight to the broker: the next one is read and rebuilt here while the broker
# appends the last (docs/multicore.md).
PIPELINE_DEPTH = 2


class _Answer:
    """One request's answer, filled in by the main thread (answers come in the order of the requests)."""

    __slots__ = ("done", "kind", "payload")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.kind: Kind | None = None
        self.payload: bytes | None = None  # None: the channel closed first


class BrokerChannel:
    """The child's end of the socket pair: the ``Upstream`` of the StoreFollower and the timer service's
    pipelined puts. Requests come from the timer thread; several may be in flight (delivery batches), and
    the broker answers them in order; the main thread reads the frames and hands each answer to the
    oldest request waiting."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        # Requests sent, not answered yet, oldest first. Its own lock: the main thread hands answers over
        # without ever waiting for a send (a send blocked on a full socket waits for the broker, which
        # may itself wait for this process to read).
        self._waiting: deque[_Answer] = deque()
        self._waiting_lock = threading.Lock()
        self.closed = False
        self.append_ms: deque[float] = deque(maxlen=1000)  # round trips of the last delivery batches

    def send(self, data: bytes) -> bool:
        try:
            with self._send_lock:
                self.sock.sendall(data)
            return True
        except OSError:
            self.close()
            return False

    def answer(self, kind: Kind, payload: bytes) -> None:
        with self._waiting_lock:
            if not self._waiting:
                raise RuntimeError(f"schedule channel: {kind.name} answers no request")
            slot = self._waiting.popleft()
        slot.kind, slot.payload = kind, payload
        slot.done.set()

    def close(self) -> None:
        with self._waiting_lock:
            self.closed = True
            waiting, self._waiting = list(self._waiting), deque()
        for slot in waiting:  # wakes the requests waiting for their answers
            slot.done.set()

    def _request(self, data: bytes) -> _Answer | None:
        slot = _Answer()
        try:
            with self._send_lock:  # registered in the order sent
                with self._waiting_lock:
                    if self.closed:
                        return None
                    self._waiting.append(slot)
                self.sock.sendall(data)
        except OSError:
            self.close()
            return None
        return slot

    @staticmethod
    def _wait(slot: _Answer | None, want: Kind) -> bytes | None:
        if slot is None:
            return None
        slot.done.wait()
        if slot.payload is None:
            return None
        if slot.kind != want:
            raise RuntimeError(f"schedule channel: expected {want.name}, got {slot.kind}")
        return slot.payload

    def _ask(self, data: bytes, want: Kind) -> bytes | None:
        return self._wait(self._request(data), want)

    # PipelinedPuts
    def submit_put(self, requests: Sequence[PutRequest]) -> Callable[[], list[AppendResult]]:
        t0 = time.monotonic()
        slot = self._request(frame(Kind.PUT, encode_puts(requests)))

        def wait() -> list[AppendResult]:
            payload = self._wait(slot, Kind.PUT_RESULT)
            self.append_ms.append((time.monotonic() - t0) * 1000)
            if payload is None:  # the broker is gone: nothing was acknowledged, the journal stays put
                return [AppendResult(PutStatus.SERVICE_NOT_AVAILABLE, msg_num=len(r.records)) for r in requests]
            return [AppendResult(s, msg_num=len(r.records))
                    for s, r in zip(decode_statuses(payload), requests, strict=True)]

        return wait

    def resume(self) -> None:
        self.send(frame(Kind.RESUME))

    # Upstream
    def put_messages(self, requests: Sequence[PutRequest]) -> list[AppendResult]:
        return self.submit_put(requests)()

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[bytes]:
        payload = self._ask(json_frame(Kind.QUERY, {"topic": topic, "key": key, "maxNum": max_num,
                                                    "begin": begin_ts, "end": end_ts}), Kind.RECORDS)
        if payload is None:
            raise ConnectionError("the broker is gone")  # no answer is not "not delivered"
        return decode_records(payload)

    def wait_reput(self, timeout: float) -> bool:
        payload = self._ask(json_frame(Kind.WAIT_REPUT, {"timeout": timeout}), Kind.REPUT_DONE)
        return bool(payload is not None and decode_json(payload))


def apply_state(follower: StoreFollower, state: dict[str, Any]) -> None:
    ranges = {(t, int(q)): QueueRange(int(lo), int(hi)) for t, q, lo, hi in state["queues"]}
    follower.publish(ranges, int(state["minPhy"]), int(state["maxPhy"]), bool(state["index"]))


def view_payload(svc: TimerMessageService, channel: BrokerChannel) -> dict[str, Any]:
    snap = svc.snapshot(ask_fresh=False)
    # How long the broker takes to append a delivery batch (the split's own latency).
    took = sorted(channel.append_ms)
    snap["appendP99Ms"] = round(took[int(0.99 * (len(took) - 1))], 1) if took else 0
    snap["appendMaxMs"] = round(took[-1], 1) if took else 0
    view = svc.view
    return {"snapshot": snap, "topics": view.topics if view is not None else {}}


class ViewPusher(threading.Thread):
    """Pushes the service's snapshot to the broker when it changed (at most every VIEW_PUSH_INTERVAL_S)
    or when the broker asks, so the broker answers runtime info without a round trip."""

    def __init__(self, svc: TimerMessageService, channel: BrokerChannel) -> None:
        super().__init__(name="TimerViewPusher", daemon=True)
        self.svc, self.channel = svc, channel
        self.wanted = threading.Event()
        self._last: Any = None

    def run(self) -> None:
        first = True  # the first push (the view load() published) tells the broker this process is loaded
        while not self.channel.closed:
            asked = first or self.wanted.wait(VIEW_PUSH_INTERVAL_S)
            self.wanted.clear()
            if asked and not first:
                self.svc.fresh_view(1.0)
            first = False
            stats = self.svc.stats
            key = (id(self.svc.view), stats.enqueued, stats.delivered_total, sum(self.svc.counters.values()))
            if asked or key != self._last:
                self._last = key
                self.channel.send(json_frame(Kind.VIEW, view_payload(self.svc, self.channel)))


def _die_with_parent(parent_pid: int) -> None:
    """SIGTERM when the broker's thread that started us ends (it lives as long as the broker)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            log.warning("PR_SET_PDEATHSIG unavailable: the channel's EOF alone ends this process")
    if os.getppid() != parent_pid:  # the broker died before prctl
        sys.exit(0)


def _take_lock(root: Path) -> int:
    """One schedule process per store: a previous one (killed, or exiting) releases the lock as it dies."""
    root.mkdir(parents=True, exist_ok=True)  # started before the broker's store made it (prestart)
    fd = os.open(root / "timerlock", os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"another process holds {root / 'timerlock'}") from None
            time.sleep(0.05)


def serve(sock: socket.socket, cfg: dict[str, Any]) -> None:
    root = Path(cfg["root"])
    lock_fd = _take_lock(root)
    channel = BrokerChannel(sock)
    follower = StoreFollower(cfg["commitLogPath"], int(cfg["commitLogFileSize"]), cfg["consumeQueuePath"],
                             int(cfg["consumeQueueFileSize"]), channel)
    svc = TimerMessageService(follower, root, precision_ms=int(cfg["precisionMs"]),
                              max_delay_ms=int(cfg["maxDelayMs"]), pipeline=channel, pipeline_depth=PIPELINE_DEPTH)
    svc.load()
    svc.start()
    pusher = ViewPusher(svc, channel)
    pusher.start()
    settle_after_start()
    stopper: threading.Thread | None = None

    def stop() -> None:
        try:
            svc.shutdown()  # commits; a put in flight is answered meanwhile (the main thread keeps reading)
        finally:  # whatever the commit did, stop reading: that ends the loop below, and the process
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def on_term(signum: int, frame_: FrameType | None) -> None:
        # The broker died (PDEATHSIG) or an operator asked: stop reading, which ends the loop below.
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_term)
    reader = FrameReader()
    while True:
        try:
            data = sock.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            break
        for kind, payload in reader.feed(data):
            if kind is Kind.STATE:
                apply_state(follower, decode_json(payload))
                svc.on_arrival({(TIMER_TOPIC, 0): follower.queue_range(TIMER_TOPIC, 0).max_offset})
            elif kind in (Kind.PUT_RESULT, Kind.RECORDS, Kind.REPUT_DONE):
                channel.answer(kind, payload)
            elif kind is Kind.VIEW_WANTED:
                pusher.wanted.set()
            elif kind is Kind.STOP and stopper is None:
                stopper = threading.Thread(target=stop, name="TimerStop")
                stopper.start()
    channel.close()
    if stopper is not None:
        stopper.join()
    else:
        svc.shutdown()  # the broker is gone: commit what was acknowledged, the journal covers the rest
    follower.close()
    os.close(lock_fd)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="TidalMQ's schedule process (started by the broker)")
    ap.add_argument("--fd", type=int, required=True, help="the broker's end of the channel")
    ap.add_argument("--config", required=True, help="JSON: paths and timer settings")
    args = ap.parse_args(argv)
    cfg = json.loads(args.config)
    logging.basicConfig(level=cfg.get("logLevel", "WARNING"),
                        format="%(asctime)s %(levelname)s [timer-process] %(name)s: %(message)s")
    _die_with_parent(int(cfg["parentPid"]))
    sock = socket.socket(fileno=args.fd)
    try:
        serve(sock, cfg)
    except OSError as e:  # e.g. a full disk at load: one line; the broker restarts this process later
        log.error("the schedule process cannot serve: %s", e)
        sys.exit(1)
    finally:
        sock.close()


if __name__ == "__main__":
    main()
