"""bench/pending_bench.py's enqueue on a recording client (no broker): N messages in tenths, each due 7..30
days ahead with a 100-byte body, a rate for every tenth, and the cut at the time budget."""

from __future__ import annotations

import time
from typing import Any

from bench import pending_bench


class Recorder:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.items: list[tuple[int, bytes, str]] = []
        self.delay_s = delay_s

    def schedule(self, dest: str, items: Any, durable: bool = False) -> int:
        items = list(items)
        self.items += items
        time.sleep(self.delay_s)
        return len(items)


def test_enqueue_sends_n_in_tenths_due_7_to_30_days_ahead() -> None:
    cl = Recorder()
    t0 = time.time() * 1000
    out = pending_bench.enqueue(cl, 25_000, budget_s=60)
    assert out["pending"] == 25_000 == len(cl.items) and not out["cut_short"]
    assert len(out["enqueue_per_s_by_tenth"]) == 10 and all(r > 0 for r in out["enqueue_per_s_by_tenth"])
    due = [d for d, _b, _k in cl.items]
    assert min(due) >= t0 + 7 * pending_bench.DAY_MS and max(due) <= time.time() * 1000 + 30 * pending_bench.DAY_MS
    assert {len(b) for _d, b, _k in cl.items} == {100}
    assert len({int(b.split(b"|")[0]) for _d, b, _k in cl.items}) == 25_000  # distinct ids


def test_enqueue_stops_at_its_budget() -> None:
    out = pending_bench.enqueue(Recorder(delay_s=0.05), 1_000_000, budget_s=0.2)
    assert out["cut_short"] and 0 < out["pending"] < 1_000_000
