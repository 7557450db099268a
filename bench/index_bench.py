"""Index benchmark: IndexService build and query throughput at RocketMQ's default geometry.

Each message is indexed under its unique key and one business key (2 index entries a message), as a
producer with ``KEYS`` set makes. Figures: build entries/s through ``build_index_batch`` in reput-sized
rounds, through single ``build_index`` calls, and queries/s for unique keys (1 hit) and for keys shared
by many messages (``max_num`` 32), plus a time-windowed variant.

    .venv/bin/python bench/index_bench.py [--messages 500000] [--round 256] [--compare bench/out/index-latest.json]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.store.index_service import IndexService  # noqa: E402

T0 = 1_700_000_000_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--round", type=int, default=256, help="messages per build_index_batch call")
    ap.add_argument("--single", type=int, default=50_000, help="messages indexed by single build_index calls")
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--slots", type=int, default=5_000_000)
    ap.add_argument("--index-num", type=int, default=20_000_000)
    ap.add_argument("--compare", default=None)
    args = ap.parse_args()

    print_machine()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="index-bench-") as d:
        svc = IndexService(os.path.join(d, "index"), args.slots, args.index_num)
        svc.load(True)
        n = args.messages
        items = [
            ("TopicTest", [f"order-{i % 10_000}"], f"7F00000100002A9F{i:016X}", i * 230, T0 + i // 10)
            for i in range(n)
        ]
        t = time.perf_counter()
        for j in range(0, n, args.round):
            svc.build_index_batch(items[j : j + args.round])
        dt = time.perf_counter() - t
        results["build_batch_entries_per_s"] = 2 * n / dt
        print(
            f"build_index_batch ({args.round} msgs/round): {2 * n:,} entries in {dt:.2f}s "
            f"= {2 * n / dt:,.0f} entries/s"
        )

        m = args.single
        singles = [
            ("TopicTest", [f"order-{i % 10_000}"], f"7F00000100002A9F{i:016X}", i * 230, T0 + i // 10)
            for i in range(n, n + m)
        ]
        t = time.perf_counter()
        for it in singles:
            svc.build_index(*it)
        dt = time.perf_counter() - t
        results["build_single_entries_per_s"] = 2 * m / dt
        print(
            f"build_index (1 msg/call):          {2 * m:,} entries in {dt:.2f}s = {2 * m / dt:,.0f} entries/s"
        )

        t = time.perf_counter()
        svc.flush()
        print(
            f"flush: {time.perf_counter() - t:.3f}s; files: {len(svc.file_paths)}, "
            f"allocated {sum(os.stat(p).st_blocks * 512 for p in svc.file_paths) / 2**20:.0f} MiB "
            f"of {svc.total_size / 2**20:.0f} MiB"
        )

        total = n + m
        rng = random.Random(7)
        q = args.queries
        uniq = [f"7F00000100002A9F{rng.randrange(total):016X}" for _ in range(q)]
        t = time.perf_counter()
        hits = 0
        for k in uniq:
            hits += len(svc.query_offsets("TopicTest", k, 32, 0, 2**62))
        dt = time.perf_counter() - t
        assert hits == q, hits
        results["query_uniq_per_s"] = q / dt
        print(f"query unique key (1 hit):          {q / dt:,.0f} queries/s")

        shared = [f"order-{rng.randrange(10_000)}" for _ in range(q)]
        t = time.perf_counter()
        hits = 0
        for k in shared:
            hits += len(svc.query_offsets("TopicTest", k, 32, 0, 2**62))
        dt = time.perf_counter() - t
        results["query_shared_max32_per_s"] = q / dt
        results["query_shared_offsets_per_s"] = hits / dt
        print(f"query shared key (max_num 32):     {q / dt:,.0f} queries/s ({hits / q:.1f} offsets each)")

        t_end = T0 + total // 10
        t = time.perf_counter()
        hits = 0
        for k in shared:
            hits += len(svc.query_offsets("TopicTest", k, 32, t_end - 20_000, t_end - 10_000))
        dt = time.perf_counter() - t
        results["query_shared_window_per_s"] = q / dt
        print(f"query shared key, 10 s window:     {q / dt:,.0f} queries/s ({hits / q:.1f} offsets each)")
        svc.destroy()

    path = save("index", results)
    print(f"saved {path}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
