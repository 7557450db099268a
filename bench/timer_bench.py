"""Timer store benchmark: the persistent timing wheel for arbitrary delivery times.

Figures: enqueue rate (batches of 1k and 100k), pop rate when 1M fall due in one slot and when 1M are spread
over 1000 slots due together, RSS per pending message at 1M and 10M pending (each in a fresh subprocess,
delays up to 1 hour and up to 400 days, to show memory is flat in the delay), load time with 1M pending after
a clean close and after SIGKILL with a stale checkpoint (time until the first delivery), and a check that
10 ms precision and a 400-day delay are accepted.

    .venv/bin/python bench/timer_bench.py [--big 10000000] [--compare bench/out/timer-latest.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402

from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.schedule import TimerStore, make_entries  # noqa: E402

T0 = 1_700_000_000_000
DAY = 86_400_000
M = 1_000_000
SPAN_400D = 400 * DAY - 1_000  # deliver times start 1 s out, so this ends at exactly 400 days


def clock() -> int:
    return T0


def status() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile of this process, in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(line.split()[1]) * 1024
    return out


def fill(s: TimerStore, n: int, span_ms: int, batch: int, seed: int = 0, start_offset: int = 0) -> float:
    """Enqueue n entries with deliver times uniform in (T0 + 1 s, T0 + span); returns seconds taken."""
    rng = np.random.default_rng(seed)
    took = 0.0
    for lo in range(0, n, batch):
        k = min(batch, n - lo)
        e = make_entries(
            deliver_ms=T0 + 1_000 + rng.integers(0, span_ms, k),
            offset=start_offset + lo + np.arange(k),
            size=200,
            uhash=rng.integers(-(2**62), 2**62, k),
        )
        t = time.perf_counter()
        s.enqueue(e, start_offset + lo + k)
        took += time.perf_counter() - t
    return took


def bench_enqueue(root: Path) -> dict[str, float]:
    out = {}
    for batch, n in ((1_000, 200_000), (100_000, M)):
        s = TimerStore(str(root / f"enq{batch}"), clock=clock)
        s.load()
        took = fill(s, n, SPAN_400D, batch)
        s.close()
        out[f"enqueue_per_s_batch{batch}"] = n / took
    return out


def bench_pop(root: Path) -> dict[str, float]:
    out = {}
    for name, span in (("one_slot", 999), ("1000_slots", 1_000_000)):
        s = TimerStore(str(root / f"pop{name}"), precision_ms=10, clock=clock)
        s.load()
        fill(s, M, span, 100_000)
        t = time.perf_counter()
        got = 0
        while n := len(s.pop_due(T0 + 1_000 + span + 1, limit=100_000)):
            got += n
        s.commit_delivered()
        took = time.perf_counter() - t
        assert got == M, got
        s.close()
        out[f"pop_per_s_{name}"] = M / took
    return out


def rss_child(root: str, n: int, span_ms: int) -> None:
    """Subprocess body: RSS growth for n pending entries; prints JSON."""
    s = TimerStore(root, clock=clock)
    s.load()
    s.enqueue(make_entries(deliver_ms=[T0 + 1_000], offset=[0]), 1)  # warm the code paths
    before = status()
    fill(s, n - 1, span_ms, 100_000, start_offset=1)
    s.flush()
    after = status()
    print(json.dumps({k: (after[k] - before[k]) / n for k in after} | {"pending": s.pending_count()}))


def bench_rss(root: Path, sizes: list[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for n in sizes:
        for label, span in (("1h", 3_600_000), ("400d", SPAN_400D)):
            if n > M and label == "1h":
                continue
            d = root / f"rss{n}{label}"
            r = subprocess.run(
                [sys.executable, __file__, "--rss-child", str(d), str(n), str(span)],
                capture_output=True,
                text=True,
                check=True,
            )
            res = json.loads(r.stdout.strip().splitlines()[-1])
            assert res["pending"] == n, res
            tag = f"{n // M}M_{label}"
            out[f"rss_bytes_per_msg_{tag}"] = res["VmRSS"]
            out[f"rss_anon_bytes_per_msg_{tag}"] = res["RssAnon"]
            out[f"rss_file_bytes_per_msg_{tag}"] = res["RssFile"]
            subprocess.run(["rm", "-rf", str(d)], check=True)
    return out


def kill_child(root: str, n: int) -> None:
    """Subprocess body: checkpoint an empty store, enqueue n entries without flushing, SIGKILL self."""
    s = TimerStore(root, clock=clock)
    s.load()
    fill(s, n, SPAN_400D, 100_000)
    os.kill(os.getpid(), signal.SIGKILL)


def bench_load(root: Path) -> dict[str, float]:
    out = {}
    clean = root / "load_clean"
    s = TimerStore(str(clean), clock=clock)
    s.load()
    fill(s, M, SPAN_400D, 100_000)
    s.enqueue(make_entries(deliver_ms=[T0 + 500], offset=[M]), M + 1)  # one due at once, to time resumption
    s.close()
    crashed = root / "load_crash"
    subprocess.run([sys.executable, __file__, "--kill-child", str(crashed), str(M)], check=False)
    for label, d in (("clean", clean), ("after_sigkill", crashed)):
        t = time.perf_counter()
        s = TimerStore(str(d), clock=clock)
        s.load()
        loaded = time.perf_counter() - t
        s.pop_due(T0 + 1_000)
        first = time.perf_counter() - t
        pending = s.pending_count()
        s.close()
        out[f"load_s_{label}_1M"] = loaded
        out[f"load_to_first_pop_s_{label}_1M"] = first
        out[f"pending_after_load_{label}"] = pending
    return out


def check_range(root: Path) -> dict[str, Any]:
    s = TimerStore(str(root / "range"), precision_ms=10, clock=clock)
    s.load()
    s.enqueue(make_entries(deliver_ms=[T0 + 10, T0 + 400 * DAY], offset=[0, 1]), 2)
    early = len(s.pop_due(T0 + 9))
    on_time = len(s.pop_due(T0 + 10))
    try:
        s.enqueue(make_entries(deliver_ms=[T0 + 400 * DAY + 1], offset=[2]), 3)
        rejected = False
    except ValueError:
        rejected = True
    hist = s.histogram(T0)
    s.close()
    assert (early, on_time, rejected, hist["rolled"]) == (0, 1, True, 1)
    return {"range_10ms_to_400d_ok": 1}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rss-child":
        rss_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--kill-child":
        kill_child(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=10 * M, help="the large pending count for RSS (0 to skip)")
    ap.add_argument("--compare", default=None)
    args = ap.parse_args()
    print_machine()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TIMER_BENCH_DIR")) as tmp:
        root = Path(tmp)
        for step in (check_range, bench_enqueue, bench_pop, bench_load):
            r = step(root)
            results.update(r)
            for k, v in r.items():
                print(f"  {k:44s} {v:>14,.3f}" if isinstance(v, float) else f"  {k:44s} {v:>14}")
        r = bench_rss(root, [M] + ([args.big] if args.big else []))
        results.update(r)
        for k, v in r.items():
            print(f"  {k:44s} {v:>14,.1f}")
    print(f"results: {save('timer', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
