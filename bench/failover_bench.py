"""Controller-mode failover time as a distribution (docs/cluster.md): ``--kills`` rounds, each a fresh group
of three replicas, a NameServer and a real etcd under ``--inflight`` senders, its master SIGKILLed (one
round as in bench/controller_bench.py). Printed and saved as JSON: min / median / p90 / max seconds from
the SIGKILL to the first send the new master acknowledged, and acknowledged messages lost.

    .venv/bin/python bench/failover_bench.py [--kills 20] [--inflight 16] [--role SYNC_MASTER] [--compare previous.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import compare, percentile, print_machine, save  # noqa: E402
from bench.controller_bench import one_kill  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--load-seconds", type=float, default=2.0)
    ap.add_argument("--role", default="SYNC_MASTER", choices=["SYNC_MASTER", "ASYNC_MASTER"])
    ap.add_argument("--compare", help="a previous run's JSON")
    args = ap.parse_args()
    print_machine()
    times: list[float] = []
    acked_total = lost_total = 0
    for n in range(args.kills):
        acked, lost, took = one_kill(args.role, args.inflight, args.load_seconds)
        times.append(took)
        acked_total += acked
        lost_total += lost
        print(f"kill {n + 1}: {took:.2f} s to the first acknowledged send, {acked} acknowledged, {lost} lost", flush=True)
    s = sorted(times)
    results = {"kills": len(s), "role": args.role, "inflight": args.inflight,
               "failover_min_s": s[0], "failover_median_s": statistics.median(s),
               "failover_p90_s": percentile(s, 90), "failover_max_s": s[-1],
               "acknowledged": acked_total, "acknowledged_lost": lost_total}
    print(f"{args.role}, {len(s)} kills: failover min {s[0]:.2f} s, median {results['failover_median_s']:.2f} s, "
          f"p90 {results['failover_p90_s']:.2f} s, max {s[-1]:.2f} s; {lost_total} of {acked_total} acknowledged lost")
    print(f"saved {save('failover', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
