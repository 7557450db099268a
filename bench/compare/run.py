"""bench/compare: TidalMQ side by side with the brokers users pick for delayed messages.

    bash bench/compare/run.sh [--quick] [--with-1e8] [--peer redis] [--workload W2] [--no-install]
    .venv/bin/python -m bench.compare [--quick] [--with-1e8] [--peer P ...] [--workload W ...]

Starts each peer on loopback (config and data in a temp dir), runs W1..W5 against it, stops it, then W6 (the
pending scale, bench/pending_bench.py: N = 10^6 and 10^7, --with-1e8 adds 10^8 after checking the free disk;
--quick 2*10^4 and 10^5) for TidalMQ and RocketMQ, and writes bench/RESULTS.md, bench/RESULTS-*.png and
bench/out/compare-*.json. See bench/RESULTS.md for what each workload measures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench import pending_bench  # noqa: E402
from bench.common import machine, print_machine, save  # noqa: E402
from bench.compare import report, workloads  # noqa: E402
from bench.compare.base import WORKLOADS  # noqa: E402

# the *_java peers: the same brokers driven by the Java load generator (bench/compare/jload.py)
PEERS = ("tidalmq", "tidalmq_java", "rocketmq", "rocketmq_p100", "rocketmq_java", "kafka", "kafka_java", "redis",
         "rabbitmq", "activemq", "beanstalkd", "nats")

# seconds each workload may take per peer (full run / --quick); the sending part of W2..W4 is cut at these
BUDGET = {"W2": (150, 60), "W3": (160, 25), "W4": (150, 60), "W6": (1200, 40)}
ALL = (*WORKLOADS, "W6")  # W6: bench/pending_bench.py, its own servers, after the peers


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_peer(peer: str, wls: list[str], quick: bool, tmp: Path) -> dict[str, Any]:
    mod = importlib.import_module(f"bench.compare.peers.{peer}")
    S = mod.Server
    wl = getattr(mod, "workloads", workloads)  # a peer driven by another client brings its own W1/W2
    res: dict[str, Any] = {"workloads": {}}
    why = S.available()
    if why:
        res["unavailable"] = why
        log(f"{peer}: {why}")
        return res
    try:
        res["version"] = S.version()
    except Exception as e:  # noqa: BLE001
        res["version"] = f"? ({e})"
    res["settings"] = S(tmp / "probe").settings()
    res["settings_durable"] = S(tmp / "probe", durable=True).settings()
    res["unsupported"] = dict(S.unsupported)
    out = res["workloads"]
    budget = {k: v[1] if quick else v[0] for k, v in BUDGET.items()}

    def guarded(w: str, fn: Any) -> None:
        t0 = time.time()
        try:
            out[w] = fn()
        except Exception as e:  # noqa: BLE001
            out[w] = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
        out[w]["elapsed_s"] = time.time() - t0
        shown = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in out[w].items() if k != "series"}
        log(f"{peer} {w}: {shown}")

    for w in wls:
        if w in S.unsupported:
            out[w] = {"unsupported": S.unsupported[w]}
    todo = [w for w in wls if w not in S.unsupported]
    if quick:  # a dry run: what another peer's run exercises already is left out (Server.quick_skip)
        for w in getattr(S, "quick_skip", {}):
            if w in todo:
                todo.remove(w)
                out[w] = {"skipped": S.quick_skip[w]}
    # instance A (recommended settings): W1, W2, W5
    first = [w for w in ("W1", "W2", "W5") if w in todo]
    if first:
        s = S(tmp / f"{peer}-a")
        log(f"{peer}: starting (W1/W2/W5 instance)")
        t0 = time.time()
        s.start()
        res["start_s"] = time.time() - t0
        try:
            if "W1" in first:
                guarded("W1", lambda: wl.w1(s, peer, quick))
            if "W2" in first:
                guarded("W2", lambda: wl.w2(s, peer, quick, budget["W2"]))
            if "W5" in first:
                guarded("W5", lambda: wl.w5(s, peer, quick))
        finally:
            s.stop()
            shutil.rmtree(s.workdir, ignore_errors=True)  # one instance's data on disk at a time
    if "W3" in todo:
        s = S(tmp / f"{peer}-w3")
        log(f"{peer}: starting (W3 instance)")
        s.start()
        try:
            guarded("W3", lambda: wl.w3(s, peer, quick, budget["W3"]))
        finally:
            s.stop()
            shutil.rmtree(s.workdir, ignore_errors=True)  # one instance's data on disk at a time
    if "W4" in todo:
        s = S(tmp / f"{peer}-w4", durable=True)
        log(f"{peer}: starting (W4 instance, durable settings)")
        s.start()
        try:
            guarded("W4", lambda: wl.w4(s, peer, quick, budget["W4"]))
        finally:
            s.stop()
            shutil.rmtree(s.workdir, ignore_errors=True)  # one instance's data on disk at a time
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts: a dry run of the harness")
    ap.add_argument("--peer", action="append", choices=PEERS, help="only this peer (repeatable)")
    ap.add_argument("--workload", action="append", choices=ALL, help="only this workload (repeatable)")
    ap.add_argument("--with-1e8", action="store_true",
                    help="W6 at N = 10^8 too (~56 GiB of free disk, checked before anything runs)")
    ap.add_argument("--out", help="the report to write (default bench/RESULTS.md for a run of everything, "
                    "bench/out/RESULTS-quick.md for --quick, bench/out/RESULTS-partial.md for a run limited by --peer / "
                    "--workload)")
    ap.add_argument("--report-from", metavar="JSON",
                    help="only re-write the report from a previous run's bench/out/compare-full-*.json")
    args = ap.parse_args(argv)
    if args.report_from:
        results = json.loads(Path(args.report_from).read_text())["results"]
        out = Path(args.out) if args.out else ROOT / "bench" / "RESULTS.md"
        out.with_suffix(".json").write_text(json.dumps({"machine": machine(), "results": _strip(results)}, indent=1))
        report.write(results, out, out.with_suffix(".json"))
        log(f"report: {out}")
        return 0
    peers = args.peer or list(PEERS)
    wls = args.workload or list(ALL)
    # --quick: one N (10^5), the dry run of W6's every step
    pending_sizes = [max(pending_bench.QUICK_SIZES)] if args.quick else pending_bench.sizes(False, args.with_1e8)
    if "W6" in wls:  # before anything starts: a run that cannot finish says so at once
        why = pending_bench.disk_check(max(pending_sizes), Path(tempfile.gettempdir()))
        if why:
            print(f"W6 cannot run: {why}", file=sys.stderr)
            return 2
    # SIGTERM ends the run like Ctrl-C: every server started so far is stopped on the way out
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    t0 = time.time()
    results: dict[str, Any] = {"quick": args.quick, "peers": {}, "workloads": wls,
                               "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    with tempfile.TemporaryDirectory(prefix="tidalmq-compare-") as d:
        for peer in peers:
            p0 = time.time()
            try:
                results["peers"][peer] = run_peer(peer, wls, args.quick, Path(d))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                results["peers"][peer] = {"error": f"{type(e).__name__}: {e}", "workloads": {}}
            results["peers"][peer]["elapsed_s"] = time.time() - p0
            log(f"{peer}: done in {time.time() - p0:.0f} s")
        if "W6" in wls:
            p0 = time.time()
            who = [p for p in pending_bench.DEFAULT_PEERS if p in peers or not args.peer]
            log(f"W6 (pending scale): {', '.join(who)} at N = {', '.join(f'{n:,}' for n in pending_sizes)}")
            results["pending"] = pending_bench.run(who, pending_sizes, args.quick, BUDGET["W6"][1 if args.quick else 0], Path(d))
            results["pending_elapsed_s"] = time.time() - p0
    results["elapsed_s"] = time.time() - t0
    results["loadavg_end"] = list(os.getloadavg())  # the report quotes it; --report-from runs later
    stripped = _strip(results)
    path = save("compare", stripped)
    # with the per-message series, for --report-from (bench/out/ is not kept in git)
    full = path.with_name(path.name.replace("compare-", "compare-full-"))
    full.write_text(json.dumps({"machine": machine(), "results": results}, default=str))
    log(f"raw results: {path}")
    if args.out:
        out = Path(args.out)
    elif args.quick:  # bench/RESULTS.md holds a full run only
        out = ROOT / "bench" / "out" / "RESULTS-quick.md"
    elif args.peer or args.workload:
        out = ROOT / "bench" / "out" / "RESULTS-partial.md"
    else:
        out = ROOT / "bench" / "RESULTS.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_suffix(".json")  # beside the report (bench/out/ is not kept in git)
    raw.write_text(json.dumps({"machine": machine(), "results": stripped}, indent=1))
    report.write(results, out, raw)
    log(f"report: {out} (total {results['elapsed_s'] / 60:.1f} min)")
    return 0


def _strip(results: dict[str, Any]) -> dict[str, Any]:
    """The JSON without the per-message series (plotted, too big to keep)."""
    r = json.loads(json.dumps(results, default=str))
    for p in r["peers"].values():
        w2 = p.get("workloads", {}).get("W2")
        if isinstance(w2, dict):
            w2.pop("series", None)
    return r


if __name__ == "__main__":
    raise SystemExit(main())
