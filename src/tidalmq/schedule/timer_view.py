"""What the timer service shows: the pending counts per real topic by deliver minute (``TopicCounts``, and
``TimerMetrics`` that persists them with each durable commit), the view the timer thread publishes for
readers on other threads (``TimerView``, ``TimerViews``), rates and the histograms' buckets.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tidalmq.schedule.timer_store import DAY_MS

# While it works, the thread publishes its view (TimerView) at most this often unless a reader asked:
# counting the pending entries walks the whole wheel, a cost that grows with its slots.
VIEW_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class TimerView:
    """What the timer thread last published, for readers on other threads (runtime info, metrics): they
    read this instead of taking the thread's lock, which it holds through a put, an fsync and a wait.
    Replaced whole (one attribute store), never changed after publication."""

    published_ms: int
    pending: int
    histogram: dict[str, int]
    next_due_ms: int | None
    enqueue_offset: int
    topics: dict[str, dict[str, Any]]  # pending per real topic by deliver minute, as minutes_to_json has it


class RateMeter:
    """Events per second over the last ``window_s`` seconds, from a counter sampled on read."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def rate(self, total: int) -> float:
        now = time.monotonic()
        s = self._samples
        s.append((now, total))
        while len(s) > 2 and now - s[1][0] >= self.window_s:
            s.popleft()
        t0, c0 = s[0]
        return 0.0 if now - t0 <= 0 else (total - c0) / (now - t0)


def minutes_to_json(minutes: Counter[int]) -> dict[str, Any]:
    """A topic's pending total, and its minutes and counts as base64 of little-endian int64 arrays. Messages
    due over 30 days fill ~43,000 minutes: as a JSON object ({"<minute>": count}) they took 16-30 ms to
    encode and as long to decode, holding the interpreter, in the schedule process at each durable commit and
    view push and in the broker at each view it received (docs/benchmarks.md, 2026-12-04)."""
    keys = np.fromiter(minutes.keys(), dtype="<i8", count=len(minutes))
    counts = np.fromiter(minutes.values(), dtype="<i8", count=len(minutes))
    return {"pending": int(counts.sum()), "minutes": base64.b64encode(keys.tobytes()).decode(),
            "counts": base64.b64encode(counts.tobytes()).decode()}


def minutes_from_json(data: dict[str, Any]) -> Counter[int]:
    """``minutes_to_json``'s form, or the older one ({"<minute>": count}); ValueError if it is neither."""
    if "minutes" in data and "counts" in data:
        keys = np.frombuffer(base64.b64decode(data["minutes"], validate=True), dtype="<i8")
        counts = np.frombuffer(base64.b64decode(data["counts"], validate=True), dtype="<i8")
        if len(keys) != len(counts):
            raise ValueError(f"{len(keys)} minutes against {len(counts)} counts")
        keep = counts > 0
        return Counter(dict(zip(keys[keep].tolist(), counts[keep].tolist(), strict=True)))
    return Counter({int(k): int(v) for k, v in data.items() if int(v) > 0})


class TopicCounts:
    """Pending timer messages per real topic, bucketed by deliver minute (RocketMQ's TimerMetrics, with times).

    Kept in memory, persisted at each durable commit with the enqueue watermark it matches. Exact across clean
    restarts; after a crash it can over-count the few messages committed between two snapshots (as RocketMQ's).
    A topic's encoding (for the snapshot and the view) is made again only once it changed: a topic whose
    messages are due over weeks has tens of thousands of minutes."""

    def __init__(self) -> None:
        self.by_topic: dict[str, Counter[int]] = {}
        self._changes: Counter[str] = Counter()
        self._encoded: dict[str, tuple[int, dict[str, Any]]] = {}  # topic -> (its changes then, encoding)

    def add(self, topic: str, deliver_ms: int, n: int) -> None:
        c = self.by_topic.get(topic)
        if c is None:
            c = self.by_topic[topic] = Counter()
        self._changes[topic] += 1
        m = deliver_ms // 60_000
        c[m] += n
        if c[m] <= 0:
            del c[m]
            if not c:
                del self.by_topic[topic]

    def pending(self) -> dict[str, int]:
        return {t: sum(c.values()) for t, c in self.by_topic.items()}

    def histogram(self, topic: str, now_ms: int) -> dict[str, int]:
        return histogram_of(self.by_topic.get(topic, Counter()), now_ms)

    def to_json(self) -> dict[str, dict[str, Any]]:
        out = {}
        for t, c in self.by_topic.items():
            version = self._changes[t]
            hit = self._encoded.get(t)
            if hit is None or hit[0] != version:
                hit = self._encoded[t] = (version, minutes_to_json(c))
            out[t] = hit[1]
        for t in [t for t in self._encoded if t not in self.by_topic]:
            del self._encoded[t]
        return out

    @classmethod
    def from_json(cls, data: dict[str, dict[str, Any]]) -> TopicCounts:
        out = cls()
        for t, c in data.items():
            try:
                counter = minutes_from_json(c)
            except (ValueError, TypeError, AttributeError) as e:  # binascii.Error is a ValueError
                raise ValueError(f"timer metrics of {t!r}: {e}") from e
            if counter:
                out.by_topic[t] = counter
        return out


HISTOGRAM_BUCKETS = ("due", "minute", "hour", "day", "beyond")


def histogram_of(minutes: Counter[int] | dict[int, int], now_ms: int) -> dict[str, int]:
    """Counts by deliver minute -> due / next minute / hour / day / beyond."""
    out = dict.fromkeys(HISTOGRAM_BUCKETS, 0)
    for m, n in minutes.items():
        # Minute granularity: "due" only when the whole minute has passed (never call a future message due);
        # the other classes by the minute's start.
        ahead = m * 60_000 - now_ms
        if ahead + 59_999 < 0:
            out["due"] += n
        elif ahead <= 60_000:
            out["minute"] += n
        elif ahead <= 3_600_000:
            out["hour"] += n
        elif ahead <= DAY_MS:
            out["day"] += n
        else:
            out["beyond"] += n
    return out


class TimerViews:
    """The TimerView the timer thread last published, and when it publishes the next one: at once when a
    reader asked (``request``), else at most every VIEW_INTERVAL_S while the store changes. ``wake`` wakes
    the thread."""

    def __init__(self, wake: threading.Event) -> None:
        self.view: TimerView | None = None  # published by the thread; readers never take its lock
        self._wake = wake
        self._at = 0.0
        self._wanted = False
        self._changed = False
        self._cond = threading.Condition()

    def due(self, changed: bool) -> bool:
        """The thread, after a round (``changed``: it did something): whether to publish now."""
        self._changed |= changed
        return self._wanted or (self._changed and time.monotonic() - self._at >= VIEW_INTERVAL_S)

    def publish(self, view: TimerView) -> None:
        """The thread (or load): ``view`` replaces the last one, in one attribute store."""
        with self._cond:
            self.view = view
            self._at = time.monotonic()
            self._wanted = self._changed = False
            self._cond.notify_all()

    def request(self) -> None:
        """Ask the thread for a fresh view at its next round (readers call this; it never waits)."""
        self._wanted = True
        self._wake.set()

    def fresh(self, timeout: float, running: bool) -> TimerView | None:
        """Block until the thread (``running``) published a view after this call; after ``timeout`` seconds
        the last one published."""
        with self._cond:
            old = self.view
            self.request()
            if running:
                self._cond.wait_for(lambda: self.view is not old, timeout)
            return self.view


class TimerMetrics:
    """The per-topic counts (RocketMQ's TimerMetrics) and their snapshot at ``path``, written at each durable
    commit with the enqueue watermark it matches (``mark``): records below the mark are counted in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics = TopicCounts()
        self.mark = 0

    def load(self, enqueue_offset: int) -> None:
        try:
            data = json.loads(self.path.read_text())
            self.topics = TopicCounts.from_json(data.get("topics", {}))
            self.mark = int(data.get("enqueueOffset", 0))
        except (OSError, ValueError, TypeError, AttributeError):  # binascii.Error is a ValueError
            self.topics = TopicCounts()
            self.mark = 0  # no snapshot (or one unreadable): recount whatever the replay re-reads
        self.mark = min(self.mark, enqueue_offset)

    def snapshot(self, enqueue_offset: int) -> bytes:
        """What the commit under way writes (its counts match ``enqueue_offset``)."""
        return json.dumps({"enqueueOffset": enqueue_offset, "topics": self.topics.to_json()}).encode()

    def written(self, mark: int) -> None:
        """The snapshot taken at enqueue offset ``mark`` is on disk."""
        self.mark = max(self.mark, mark)
