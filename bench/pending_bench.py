"""Pending scale: N scheduled messages waiting (100-byte bodies, due 7..30 days ahead) on one broker.

For each N: the enqueue rate per tenth of N (does it fall as N grows?), disk bytes and anonymous RSS per
pending message, SIGKILL and restart with N pending (seconds to ready, to the first delivery of a few
messages due 3 s after the kill), then lateness p50/p99 at 10,000 due/s while the N are still pending. The
peers are bench/compare's: TidalMQ through tidalmq.client (batches), Apache RocketMQ 5 (timer at 100 ms)
through the Java load generator's single async sends (``rocketmq_java``: its own official client, far
faster than Python single sends) or through tidalmq.client (``rocketmq``). Each enqueue is cut at --budget
seconds, so a peer is measured up to the N it sustains in that time.

    .venv/bin/python bench/pending_bench.py [--quick] [--with-1e8] [--n 1000000] [--peer tidalmq --peer rocketmq_java]
        [--budget 1200] [--compare bench/out/pending-latest.json]

N = 10^6 and 10^7 (--with-1e8 adds 10^8, after checking the free disk: ~DISK_PER_MSG bytes a message;
--quick: 2*10^4 and 10^5). `bash bench/compare/run.sh` runs this as W6 and writes its rows into
bench/RESULTS.md. Data dirs live in a temp dir removed at the end, failed or not.
"""

from __future__ import annotations

import argparse
import importlib
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench.common import compare, percentile, print_machine, save  # noqa: E402
from bench.compare import jload, workloads  # noqa: E402

DAY_MS = 86_400_000
# a disk budget per pending message, with room to spare: the CommitLog record (~250 B for a 100-byte body
# and its properties) plus the timer's own log and index
DISK_PER_MSG = 600
# Messages a client call sends (and waits for) at a time (--chunk). The client's pipeline drains at the end
# of each chunk; the A/B of chunk sizes is in docs/benchmarks.md.
CHUNK = 10_000
DUE_RATE = 10_000
RESTART_TIMEOUT = 1800.0  # seconds a peer may take to come back with N pending
PEERS = ("tidalmq", "tidalmq_java", "rocketmq_java", "rocketmq", "rocketmq_p100")
DEFAULT_PEERS = ("tidalmq", "tidalmq_java", "rocketmq_java")
SIZES, QUICK_SIZES, HUGE = (10**6, 10**7), (20_000, 100_000), 10**8


def sizes(quick: bool, with_1e8: bool) -> list[int]:
    return list(QUICK_SIZES) if quick else list(SIZES) + ([HUGE] if with_1e8 else [])


def disk_needed(n: int) -> int:
    return n * DISK_PER_MSG


def disk_check(n: int, where: Path) -> str | None:
    """None when ``where`` has room for N pending (one N at a time: each data dir is removed after its N),
    else what it needs and has."""
    free = shutil.disk_usage(where).free
    if disk_needed(n) > free * 0.8:
        return (f"N={n:,} needs ~{disk_needed(n) / 2**30:.0f} GiB free under {where} (~{DISK_PER_MSG} B a "
                f"pending message, with room to spare); {free / 2**30:.0f} GiB free")
    return None


def du(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def du_parts(path: Path) -> dict[str, int]:
    """Allocated bytes of the store's parts (CommitLog, ConsumeQueues, the timer's log and wheel...): the
    directories two or three levels below ``path`` holding 1 % or more of the whole, a parent left out
    where one of its own is listed (TidalMQ's parts sit at data/store/X, RocketMQ's at store/X), the
    largest first."""
    total = max(1, du(path))
    parts = {d: du(d) for depth in (2, 3) for d in path.glob("/".join(["*"] * depth)) if d.is_dir()}
    big = {d: v for d, v in parts.items() if v * 100 >= total}
    keep = {d: v for d, v in big.items() if not any(o != d and d in o.parents for o in big)}
    return {str(d.relative_to(path)): v for d, v in sorted(keep.items(), key=lambda kv: -kv[1])}


def enqueue(cl: Any, n: int, budget_s: float, chunk: int = CHUNK) -> dict[str, Any]:
    """N messages due 7..30 days ahead, in tenths; the rate of each tenth."""
    tenth = max(1, n // 10)
    rates: list[float] = []
    sent, t0 = 0, time.time()
    base = int(time.time() * 1000)
    while sent < n and time.time() - t0 < budget_s:
        ts, s0, goal = time.time(), sent, min(n, sent + tenth)
        while sent < goal and time.time() - t0 < budget_s:
            k = min(chunk, goal - sent)
            cl.schedule("pbulk", [(base + random.randint(7 * DAY_MS, 30 * DAY_MS),
                                   workloads.sched_body(sent + i, 0), "") for i in range(k)])
            sent += k
        rates.append((sent - s0) / max(1e-6, time.time() - ts))
    took = time.time() - t0
    return {"target": n, "pending": sent, "cut_short": sent < n, "enqueue_s": took,
            "enqueue_per_s": sent / took if took else float("nan"), "enqueue_per_s_by_tenth": rates}


def lateness(peer: str, s: Any, rate: float, window: int, java: bool, batch: int = 0) -> dict[str, Any]:
    """DUE_RATE due/s over ``window`` seconds, sent in random order before the window starts (planned from the
    enqueue ``rate`` of the same client, sending as it enqueued: the Java load generator's for a Java peer,
    in batches of ``batch`` or one by one)."""
    m = DUE_RATE * window
    rate = rate if rate == rate and rate > 0 else 10_000.0
    lead_s = m / rate * 1.5 + 3
    if java:
        r = jload.Phase(s, topic="plate", phase="timer-late", rate=DUE_RATE, seconds=window, lead_ms=int(lead_s * 1000),
                        size=workloads.SCHED_BODY, window=jload.BATCH_WINDOW if batch > 0 else jload.WINDOW,
                        batch=batch, wait_s=lead_s + window + 60).run(lead_s + 600)
        return {"late_expected": m, "late_delivered": r["received"], "late_p50_ms": r["p50_ms"],
                "late_p99_ms": r["p99_ms"], "late_early": r["early"],
                "late_sends_overran_ms": max(0.0, r["send_s"] - lead_s) * 1000}
    t_start = int((time.time() + lead_s) * 1000)
    cons = workloads.Consumer(peer, s.conn(), "plate", m, t_start / 1000 + window + 60, grace=2.0)
    deliver = [t_start + i * 1000 // DUE_RATE for i in range(m)]
    random.shuffle(deliver)
    cl = workloads.client_of(peer, s.conn())
    try:
        cl.schedule("plate", [(d, workloads.sched_body(i, d), "") for i, d in enumerate(deliver)])
    finally:
        cl.close()
    # > 0: the sends were not done when the window began, and some lateness is the client's
    overran_ms = max(0.0, time.time() * 1000 - t_start)
    seen: dict[int, float] = {}
    for i, recv, due in cons.result():
        seen.setdefault(i, recv - due)
    lat = sorted(seen.values())
    return {"late_expected": m, "late_delivered": len(lat), "late_p50_ms": percentile(lat, 50),
            "late_p99_ms": percentile(lat, 99), "late_early": sum(1 for x in lat if x < 0),
            "late_sends_overran_ms": overran_ms}


def one(peer: str, n: int, quick: bool, budget_s: float, tmp: Path, chunk: int = CHUNK) -> dict[str, Any]:
    why = disk_check(n, tmp)
    if why:
        return {"target": n, "skipped": why}
    mod = importlib.import_module(f"bench.compare.peers.{peer}")
    why = mod.Server.available()
    if why:
        return {"target": n, "skipped": why}
    s = mod.Server(tmp / f"{peer}-{n}")
    s.start()
    try:
        cl = workloads.client_of(peer, s.conn())
        try:
            for d in ("pbulk", "pdue", "plate"):
                cl.setup(d, True)
            time.sleep(1.0)
            anon0 = s.rss_anon()
            java = getattr(mod, "workloads", None) is jload  # the peer's client is the Java load generator
            batch = getattr(mod, "TIMER_BATCH", 0)
            if java:
                out = jload.enqueue_pending(s, "pbulk", n, budget_s, 7 * DAY_MS, 30 * DAY_MS, batch)
            else:
                out = enqueue(cl, n, budget_s, chunk)
            time.sleep(3.0)  # the work left after the last acknowledgement
            pend = out["pending"]
            out.update(disk_bytes_per_msg=du(s.workdir) / pend if pend else float("nan"), disk_parts=du_parts(s.workdir),
                       anon_bytes_per_msg=(s.rss_anon() - anon0) / pend if pend else float("nan"))
            # restart with N pending: a few messages due 3 s after the kill
            few = 100
            cons = workloads.Consumer(peer, s.conn(), "pdue", few, time.time() + RESTART_TIMEOUT + 60, grace=1.0)
            t_kill_plan = time.time() + 2.0
            due = int((t_kill_plan + 3.0) * 1000)
            cl.schedule("pdue", [(due, workloads.sched_body(i, due), "") for i in range(few)], durable=True)
        finally:
            cl.close()
        time.sleep(max(0.0, t_kill_plan - time.time()))
        # a restart with N pending may take long: measured, not failed (the first start is the peer's usual)
        s.start_timeout = RESTART_TIMEOUT
        t_kill = time.time()
        s.kill()
        s.start()
        t_ready = time.time()
        got = cons.result()
        recv = sorted(r for _, r, _ in got)
        out.update(restart_to_ready_s=t_ready - t_kill,
                   restart_to_first_delivery_s=(recv[0] / 1000 - t_kill) if recv else float("nan"),
                   # due 3 s after the kill: what the restart added is the lateness of the first one
                   first_after_restart_late_ms=(recv[0] - due) if recv else float("nan"),
                   due_after_restart_delivered=len({i for i, _, _ in got}), due_after_restart=few)
        # lateness at DUE_RATE due/s with N pending
        window = 1 if quick else 5
        out.update(late_due_per_s=DUE_RATE, **lateness(peer, s, out["enqueue_per_s"], window, java, batch))
        return out
    finally:
        s.stop()
        shutil.rmtree(s.workdir, ignore_errors=True)


def run(peers: list[str], ns: list[int], quick: bool, budget: float, tmp: Path, chunk: int = CHUNK) -> dict[str, Any]:
    """Every peer at every N (smallest first; a peer cut short is not tried at a larger N)."""
    results: dict[str, Any] = {}
    for peer in peers:
        for n in ns:
            try:
                r = one(peer, n, quick, budget, tmp, chunk)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                r = {"target": n, "error": f"{type(e).__name__}: {e}"}
            results[f"{peer}_{n}"] = r
            shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
            print(f"{peer} N={n:,}: {shown}", flush=True)
            if r.get("cut_short"):
                break  # a larger N would be cut as well
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="N = 2*10^4 and 10^5: a dry run")
    ap.add_argument("--with-1e8", action="store_true", help="add N = 10^8 (checks the free disk first)")
    ap.add_argument("--n", type=int, action="append", help="only this N (repeatable): a targeted run")
    ap.add_argument("--peer", action="append", choices=PEERS, help=f"default: {' '.join(DEFAULT_PEERS)}")
    ap.add_argument("--budget", type=float, help="seconds an enqueue may take (default 60 quick, 1200 otherwise)")
    ap.add_argument("--chunk", type=int, default=CHUNK,
                    help=f"messages the Python client sends and waits for at a time (default {CHUNK:,})")
    ap.add_argument("--compare", help="a previous bench/out/pending-*.json")
    args = ap.parse_args(argv)
    ns = sorted(args.n) if args.n else sizes(args.quick, args.with_1e8)
    budget = args.budget or (60.0 if args.quick else 1200.0)
    tmp_root = Path(tempfile.gettempdir())
    why = disk_check(max(ns), tmp_root)
    if why:
        print(f"not run: {why}", file=sys.stderr)
        return 2
    print_machine()
    with tempfile.TemporaryDirectory(prefix="tidalmq-pending-") as d:
        results = run(list(args.peer or DEFAULT_PEERS), ns, args.quick, budget, Path(d), args.chunk)
    flat = {f"{key}_{k}": v for key, r in results.items() for k, v in r.items() if isinstance(v, int | float)}
    path = save("pending", {"quick": args.quick, "chunk": args.chunk, **results, **flat})
    print(f"results: {path}")
    compare(args.compare, flat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
