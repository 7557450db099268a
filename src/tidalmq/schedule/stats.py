"""Counters of scheduled delivery: enqueued, delivered, lateness (exported by the stats request)."""

from __future__ import annotations

import bisect
import threading
from collections import deque
from typing import Any

import numpy as np

# Upper bounds (ms, "le") of the lateness histogram exported to Prometheus; a last bucket takes the rest.
LATENESS_BUCKETS_MS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
_BOUNDS = np.array(LATENESS_BUCKETS_MS, dtype=np.int64)
# Below this many deliveries in a batch, bisect per message is cheaper than building an array.
_VECTOR_FROM = 32


class ScheduleStats:
    def __init__(self, window: int = 100_000) -> None:
        self._lock = threading.Lock()
        self.enqueued = 0
        self.delivered_total = 0
        self.early = 0
        self._lateness: deque[int] = deque(maxlen=window)
        # Since start (not windowed): per-bucket counts, the last for beyond the largest bound, and the sum.
        self._buckets = [0] * (len(LATENESS_BUCKETS_MS) + 1)
        self._lateness_sum = 0

    def enqueued_n(self, n: int) -> None:
        with self._lock:
            self.enqueued += n

    def delivered(self, lateness_ms: list[int]) -> None:
        with self._lock:
            self.delivered_total += len(lateness_ms)
            self.early += sum(1 for x in lateness_ms if x < 0)
            self._lateness.extend(lateness_ms)
            self._lateness_sum += sum(lateness_ms)
            if len(lateness_ms) < _VECTOR_FROM:
                for x in lateness_ms:
                    self._buckets[bisect.bisect_left(LATENESS_BUCKETS_MS, x)] += 1
            else:
                idx = np.searchsorted(_BOUNDS, np.asarray(lateness_ms, dtype=np.int64), side="left")
                for i, n in enumerate(np.bincount(idx, minlength=len(self._buckets)).tolist()):
                    self._buckets[i] += n

    def lateness_histogram(self) -> dict[str, Any]:
        """Deliveries since start by lateness: ``buckets`` (count per bucket of LATENESS_BUCKETS_MS, the last
        one past the largest bound; early deliveries fall in the first) and ``sumMs``."""
        with self._lock:
            return {"buckets": list(self._buckets), "sumMs": self._lateness_sum}

    def lateness_percentiles(self) -> dict[str, int]:
        with self._lock:
            data = sorted(self._lateness)
        if not data:
            return {"p50": 0, "p99": 0, "max": 0}

        def pct(p: float) -> int:
            return data[min(len(data) - 1, int(p * (len(data) - 1)))]

        return {"p50": pct(0.5), "p99": pct(0.99), "max": data[-1]}

    def snapshot(self) -> dict[str, int]:
        lat = self.lateness_percentiles()
        with self._lock:
            return {
                "enqueued": self.enqueued,
                "delivered": self.delivered_total,
                "early": self.early,
                "latenessP50Ms": lat["p50"],
                "latenessP99Ms": lat["p99"],
                "latenessMaxMs": lat["max"],
            }
