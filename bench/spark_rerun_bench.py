"""The exactly-once sink at scale: a ``--rows`` write (10^7 by default) with a ``writeId`` into a standalone
with ``duplicationEnable=true`` and the broker's defaults otherwise (1 GiB CommitLog files, the window's
10^7 keys and one hour, ``sendTimeoutMs`` 120 s), no ``duplication.json`` before it; the broker SIGKILLed
and restarted once ``--kill-at`` of the rows are stored; the write rides out the restart; then the same
write run again, as a user reruns a job that failed.

Prints the figures (rows/s of the write across the kill and of the rerun, the restart to ready, the
rows the topic holds after each, the broker's RSS with the window loaded) and the verdict: the topic holds
each row once (``count(*)`` and ``count(distinct body)`` through the Spark source both equal ``--rows``).
Exits 1 when it does not. docs/spark.md ("Exactly-once writes") quotes a run.

    .venv/bin/python bench/spark_rerun_bench.py [--rows 10000000] [--kill-at 0.5] [--compare bench/out/spark_rerun-latest.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import Standalone, wait_for  # noqa: E402

from bench.common import compare, print_machine, save  # noqa: E402

GIB = 1 << 30


def stored(ns: str, topic: str) -> int:
    """Messages the topic's ConsumeQueues hold; -1 while the broker does not answer (restarting)."""
    from tidalmq.client.sync import Admin

    try:
        with Admin(ns) as admin:
            return sum(q.max_offset - q.min_offset for q in admin.topic_status(topic))
    except Exception:  # noqa: BLE001 - a broker being killed or restarted
        return -1


def rss_anon_bytes(pid: int) -> int:
    """The process's anonymous RSS: its heap (the window's keys among it), not the CommitLog pages it maps."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def window_loads(log: Path) -> list[str]:
    """The broker's log lines saying how each boot loaded its window (keys, saved segments, replay time)."""
    try:
        return [line.strip() for line in log.read_text(errors="replace").splitlines() if "duplication window:" in line]
    except OSError:
        return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--kill-at", type=float, default=0.5, help="the fraction of rows stored when the broker is killed")
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=2, help="of the written DataFrame")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--compare", help="a previous JSON result (bench/out/spark_rerun-*.json)")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    print_machine()
    n = args.rows
    need = n * (args.body_size + 200) * 2 + 3 * GIB  # records, their ConsumeQueue entries, preallocated files
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if need > free:
        print(f"not run: {n:,} rows need ~{need / GIB:.0f} GiB free under {tempfile.gettempdir()}, "
              f"{free / GIB:.0f} GiB free", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="spark-rerun-"))
    data = tmp / "data"
    # the broker's defaults but for dedup: Standalone's own smaller CommitLog files put back to RocketMQ's 1 GiB
    broker = Standalone(data, {"duplicationEnable": "true", "mappedFileSizeCommitLog": str(GIB)}).start()
    results: dict[str, Any] = {"rows": n, "kill_at": args.kill_at}
    ok = False
    try:
        from pyspark.sql import SparkSession

        from tidalmq.client.sync import Admin
        from tidalmq.spark import register

        ns = broker.namesrv_addr
        topic = f"SparkRerun_{uuid.uuid4().hex[:6]}"
        with Admin(ns) as admin:
            admin.create_topic(topic, args.queues)
        snapshot = data / "store" / "config" / "duplication.json"
        if snapshot.exists():
            raise SystemExit(f"{snapshot} exists before the first write")
        spark = (SparkSession.builder.master(args.master).appName("tidalmq-spark-rerun")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        pad = "x" * max(0, args.body_size - 12)
        df = spark.range(0, n, 1, args.partitions).selectExpr(
            f"concat(lpad(cast(id as string), 12, '0'), '{pad}') as body")
        write = (df.write.format("tidalmq").option("nameserver", ns).option("topic", topic)
                 .option("writeId", f"rerun-{topic}").mode("append"))
        killed: dict[str, float] = {}
        errors: list[BaseException] = []

        def kill_part_way() -> None:  # beside the write: PySpark finds no data source from another thread
            try:
                wait_for(lambda: stored(ns, topic) >= n * args.kill_at, 3600, 0.2, f"{args.kill_at:.0%} of the rows")
                killed["stored_at_kill"] = stored(ns, topic)
                t_kill = time.monotonic()
                broker.kill()
                broker.start(timeout=600)
                killed["restart_to_ready_s"] = time.monotonic() - t_kill
                print(f"broker SIGKILLed with {int(killed['stored_at_kill']):,} rows stored, ready again "
                      f"{killed['restart_to_ready_s']:.2f} s later", flush=True)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        killer = threading.Thread(target=kill_part_way, daemon=True)
        killer.start()
        t0 = time.perf_counter()
        write.save()
        results["write_s"] = time.perf_counter() - t0
        killer.join(900)
        if killer.is_alive() or errors or "restart_to_ready_s" not in killed:
            raise SystemExit(f"the kill beside the write did not happen: {errors or 'still waiting'}")
        if killed["stored_at_kill"] >= n:
            raise SystemExit("the write had finished before the kill: raise --rows or lower --kill-at")
        results.update(killed)
        wait_for(lambda: stored(ns, topic) >= n, 300, 0.2, "the first write's rows in the ConsumeQueues")
        results["stored_after_write"] = stored(ns, topic)
        results["write_rows_per_s"] = n / results["write_s"]
        print(f"write across the kill: {n:,} rows in {results['write_s']:.1f} s "
              f"({results['write_rows_per_s']:,.0f} rows/s); the topic holds {results['stored_after_write']:,}",
              flush=True)

        t0 = time.perf_counter()
        write.save()
        results["rerun_s"] = time.perf_counter() - t0
        results["rerun_rows_per_s"] = n / results["rerun_s"]
        results["stored_after_rerun"] = stored(ns, topic)
        assert broker.proc is not None
        results["broker_rss_anon_bytes"] = rss_anon_bytes(broker.proc.pid)
        print(f"rerun: {n:,} rows in {results['rerun_s']:.1f} s ({results['rerun_rows_per_s']:,.0f} rows/s); "
              f"the topic holds {results['stored_after_rerun']:,}; broker anonymous RSS "
              f"{results['broker_rss_anon_bytes'] / 2**20:,.0f} MiB", flush=True)
        for line in window_loads(broker.log_path):
            print(f"broker: {line}", flush=True)

        row = (spark.read.format("tidalmq").option("nameserver", ns).option("topic", topic).load()
               .selectExpr("count(*) as rows", "count(distinct body) as bodies").first())
        results["read_rows"], results["read_distinct_bodies"] = row.rows, row.bodies
        ok = row.rows == n and row.bodies == n and results["stored_after_rerun"] == n
        print(f"read back: {row.rows:,} rows, {row.bodies:,} distinct bodies: "
              f"{'each row once' if ok else 'NOT exactly once'}", flush=True)
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["exactly_once"] = float(ok)
    print(f"saved {save('spark_rerun', results)}")
    compare(args.compare, {k: v for k, v in results.items() if isinstance(v, int | float)})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
