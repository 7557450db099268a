"""Index benchmark: IndexService build and query throughput at RocketMQ's default geometry.

Each message is indexed under its unique key and one business key (2 index entries a message), as a
producer with ``KEYS`` set makes. Figures: build entries/s through ``build_index_batch`` in reput-sized
rounds, through single ``build_index`` calls, and queries/s for unique keys (1 hit) and for keys shared
by many messages (``max_num`` 32), plus a time-windowed variant.

Build cost: CPU time per index entry of ``build_index_batch`` (printed in us, saved in ns) for reput
rounds of ``--cost-rounds`` messages, best of ``--repeat`` runs each into a fresh index, for messages with
only their unique key (the common case: no ``KEYS``) and with a unique key plus one business key.

    .venv/bin/python bench/index_bench.py [--messages 500000] [--round 256] [--cost-rounds 64,4096]
        [--compare bench/out/index-latest.json]
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


def build_cost(messages: int, rnd: int, with_key: bool, repeat: int, slots: int, index_num: int) -> float:
    """Best CPU time per index entry (us) of build_index_batch over ``messages`` in rounds of ``rnd``."""
    items = [
        (
            "TopicTest",
            [f"order-{i % 10_000}"] if with_key else [],
            f"7F00000100002A9F{i:016X}",
            i * 230,
            T0 + i // 10,
        )
        for i in range(messages)
    ]
    rounds = [items[j : j + rnd] for j in range(0, messages, rnd)]
    entries = messages * (2 if with_key else 1)
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="index-bench-") as d:
            svc = IndexService(os.path.join(d, "index"), slots, index_num)
            svc.load(True)
            svc.build_index_batch(rounds[0])  # creates the file (and warms caches) outside the timing
            t = time.process_time()
            for r in rounds[1:]:
                svc.build_index_batch(r)
            dt = time.process_time() - t
            svc.destroy()
        per_round = len(rounds[0]) * (2 if with_key else 1)
        best = min(best, dt / (entries - per_round) * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--round", type=int, default=256, help="messages per build_index_batch call")
    ap.add_argument("--single", type=int, default=50_000, help="messages indexed by single build_index calls")
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--slots", type=int, default=5_000_000)
    ap.add_argument("--index-num", type=int, default=20_000_000)
    ap.add_argument("--cost-rounds", default="64,4096", help="messages per round for the build cost figures")
    ap.add_argument("--cost-messages", type=int, default=262_144, help="messages per build cost run")
    ap.add_argument("--repeat", type=int, default=5, help="build cost runs per figure (best is reported)")
    ap.add_argument("--cost-only", action="store_true", help="only the build cost figures")
    ap.add_argument("--compare", default=None)
    args = ap.parse_args()

    print_machine()
    results: dict[str, float] = {}
    for rnd in (int(r) for r in args.cost_rounds.split(",")):
        for label, with_key in (("uniq key only", False), ("uniq key + 1 key", True)):
            us = build_cost(args.cost_messages, rnd, with_key, args.repeat, args.slots, args.index_num)
            results[f"build_ns_per_key_r{rnd}_{'uniq_key' if with_key else 'uniq'}"] = us * 1000
            print(f"build cost ({rnd:>4} msgs/round, {label:16s}): {us:.3f} us/key ({1 / us:.2f} M keys/s)")
    if args.cost_only:
        print(f"saved {save('index', results)}")
        compare(args.compare, results)
        return
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
