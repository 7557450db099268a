"""bench/pending_bench.py's enqueue on a recording client (no broker): N messages in tenths, each due 7..30
days ahead with a 100-byte body, a rate for every tenth, and the cut at the time budget."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
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


def test_sizes_add_1e8_only_when_asked() -> None:
    assert pending_bench.sizes(quick=False, with_1e8=False) == [10**6, 10**7]
    assert pending_bench.sizes(quick=False, with_1e8=True) == [10**6, 10**7, 10**8]
    assert max(pending_bench.sizes(quick=True, with_1e8=False)) < 10**6


def test_disk_check_says_what_it_needs(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    assert pending_bench.disk_check(1_000, tmp_path) is None
    n = free // pending_bench.DISK_PER_MSG * 2  # twice what the disk holds
    why = pending_bench.disk_check(n, tmp_path)
    assert why is not None and f"{n:,}" in why and "GiB free" in why
    need = f"~{pending_bench.disk_needed(n) / 2**30:.0f} GiB"
    assert need in why


def test_harness_refuses_w6_at_1e8_without_the_disk(monkeypatch: Any, capsys: Any) -> None:
    """run.sh --with-1e8 checks the free disk before anything starts, and says what W6 needs."""
    from bench.compare import run

    monkeypatch.setattr(pending_bench, "disk_check", lambda n, where: f"N={n:,} needs more" if n >= 10**8 else None)
    assert run.main(["--with-1e8", "--peer", "tidalmq", "--workload", "W6"]) == 2
    assert "N=100,000,000 needs more" in capsys.readouterr().err


def test_pending_rows_in_the_report() -> None:
    from bench.compare import report_pending

    rows = report_pending.rows({
        "tidalmq_1000000": {"target": 10**6, "pending": 10**6, "cut_short": False, "enqueue_per_s": 150_000.0,
                            "enqueue_per_s_by_tenth": [160_000.0, 140_000.0], "disk_bytes_per_msg": 290.0,
                            "anon_bytes_per_msg": 7.5, "restart_to_ready_s": 1.1, "restart_to_first_delivery_s": 3.05,
                            "late_p50_ms": 12.0, "late_p99_ms": 31.0, "late_delivered": 50_000, "late_expected": 50_000},
        "rocketmq_java_10000000": {"target": 10**7, "pending": 6_000_000, "cut_short": True, "enqueue_per_s": 5_000.0},
        "tidalmq_100000000": {"target": 10**8, "skipped": "N=100,000,000 needs ~56 GiB free"}})
    assert rows[0][:5] == ["TidalMQ (tidalmq.client, batches)", "1,000,000", "1,000,000", "150,000", "160,000 → 140,000"]
    assert rows[0][-1] == "12.0 / 31.0 (50,000 of 50,000)"
    assert rows[1][2] == "6,000,000 (**cut short**)" and rows[1][1] == "10,000,000"
    assert rows[2][2].startswith("skipped: N=100,000,000 needs")


def test_disk_parts_name_the_store_parts(tmp_path: Path) -> None:
    """A part at either depth (TidalMQ's data/store/X, RocketMQ's store/X), parents of a listed part left out."""
    for rel, size in (("data/store/commitlog/0", 4 << 20), ("data/store/timerlog/0", 1 << 20),
                      ("store/commitlog/0", 2 << 20), ("data/store/tiny/0", 10)):
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * size)
    parts = pending_bench.du_parts(tmp_path)
    assert list(parts) == ["data/store/commitlog", "store/commitlog", "data/store/timerlog"]
    assert parts["data/store/commitlog"] >= 4 << 20
