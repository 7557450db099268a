"""Counters of scheduled delivery: enqueued, delivered, lateness (exported by the stats request)."""

from __future__ import annotations

import threading
from collections import deque


class ScheduleStats:
    def __init__(self, window: int = 100_000) -> None:
        self._lock = threading.Lock()
        self.enqueued = 0
        self.delivered_total = 0
        self.early = 0
        self._lateness: deque[int] = deque(maxlen=window)

    def enqueued_n(self, n: int) -> None:
        with self._lock:
            self.enqueued += n

    def delivered(self, lateness_ms: list[int]) -> None:
        with self._lock:
            self.delivered_total += len(lateness_ms)
            self.early += sum(1 for x in lateness_ms if x < 0)
            self._lateness.extend(lateness_ms)

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
