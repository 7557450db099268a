"""Spark connector benchmark: the ``tidalmq`` sink and source on ``local[2]`` against a ``tidalmq
standalone`` on the same machine.

Figures (rows/s): the sink writing ``--messages`` rows (``spark.range`` → ``body``, ``--body-size`` bytes,
``tags``, ``keys``) — which also fills the topic —, a batch read of all of them (every column
materialised: ``sum(length(body))``, ``count(distinct msgId)``), and a streaming read of all of them
(``Trigger.AvailableNow`` into the ``noop`` sink, from the first offset to the end).

The broker caps one pull at 32 messages / 256 KiB by default (RocketMQ's
``maxTransferCountOnMessageInMemory`` / ``maxTransferBytesOnMessageInMemory``); the benchmark raises them
to ``--pull-max`` messages / 4 MiB (``--broker-defaults`` keeps RocketMQ's values) — see docs/spark.md.

    .venv/bin/python bench/spark_bench.py [--messages 1000000] [--compare bench/out/spark-latest.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import Standalone  # noqa: E402

from bench.common import compare, print_machine, save  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--pull-max", type=int, default=2048, help="broker's max messages per pull (raised)")
    ap.add_argument("--broker-defaults", action="store_true", help="keep the broker's pull caps (32 / 256 KiB)")
    ap.add_argument("--compare", help="a previous JSON result (bench/out/spark-*.json)")
    ap.add_argument("--dedup", action="store_true",
                    help="exactly-once writes: duplicationEnable on the broker and a writeId on the sink")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    print_machine()

    settings = {"mappedFileSizeCommitLog": str(1024 * 1024 * 1024), "flushDiskType": "ASYNC_FLUSH"}
    if not args.broker_defaults:
        settings["maxTransferCountOnMessageInMemory"] = str(args.pull_max)
        settings["maxTransferBytesOnMessageInMemory"] = str(4 * 1024 * 1024)
    if args.dedup:
        settings["duplicationEnable"] = "true"
    tmp = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    broker = Standalone(tmp / "data", settings).start()
    results: dict[str, float] = {}
    try:
        from pyspark.sql import SparkSession

        from tidalmq.client.sync import Admin
        from tidalmq.spark import register

        ns = broker.namesrv_addr
        topic = f"SparkBench_{uuid.uuid4().hex[:6]}"
        with Admin(ns) as admin:
            admin.create_topic(topic, args.queues)
        spark = (SparkSession.builder.master(args.master).appName("tidalmq-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        n = args.messages
        pad = "x" * max(0, args.body_size - 12)

        # warm-up: JVM, Python workers, connections
        spark.range(1000).selectExpr("cast(id as string) as body").write.format("tidalmq") \
            .option("nameserver", ns).option("topic", topic + "_warm").mode("append").save()
        spark.read.format("tidalmq").option("nameserver", ns).option("topic", topic + "_warm").load().count()

        df = spark.range(0, n, 1, 2).selectExpr(f"concat(lpad(cast(id as string), 12, '0'), '{pad}') as body",
                                                "'bench' as tags", "concat('k', cast(id as string)) as keys")
        write = df.write.format("tidalmq").option("nameserver", ns).option("topic", topic).mode("append")
        if args.dedup:
            write = write.option("writeId", topic)
        t0 = time.perf_counter()
        write.save()
        dt = time.perf_counter() - t0
        results["sink_rows_per_s"] = n / dt
        print(f"sink write     {n:>9,} rows in {dt:6.2f} s  {n / dt:>10,.0f} rows/s")

        # the sink's sends are acknowledged once in the CommitLog; the ConsumeQueue (what readers see) follows
        with Admin(ns) as admin:
            deadline = time.monotonic() + 120
            while sum(q.max_offset for q in admin.topic_status(topic)) < n:
                if time.monotonic() > deadline:
                    raise SystemExit("the topic did not reach the written count")
                time.sleep(0.2)
        reader = spark.read.format("tidalmq").option("nameserver", ns).option("topic", topic)
        t0 = time.perf_counter()
        row = reader.load().selectExpr("count(*) as n", "sum(length(body)) as bytes", "max(queueOffset) as maxoff", "sum(size(properties)) as props",
                                       "max(storeTimestamp) as last").collect()[0]
        dt = time.perf_counter() - t0
        if row["n"] != n:
            raise SystemExit(f"batch read saw {row['n']} rows, expected {n}")
        results["batch_read_rows_per_s"] = n / dt
        print(f"batch read     {n:>9,} rows in {dt:6.2f} s  {n / dt:>10,.0f} rows/s")

        ck = tmp / "ck"
        t0 = time.perf_counter()
        q = (spark.readStream.format("tidalmq").option("nameserver", ns).option("topic", topic)
             .option("startingOffsets", "earliest").load()
             .selectExpr("length(body) as len", "msgId", "properties", "storeTimestamp")
             .writeStream.format("noop").option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination(1800)
        dt = time.perf_counter() - t0
        seen = sum(p["numInputRows"] for p in q.recentProgress)
        if seen != n:
            raise SystemExit(f"streaming read saw {seen} rows, expected {n}")
        results["stream_read_rows_per_s"] = n / dt
        print(f"stream read    {n:>9,} rows in {dt:6.2f} s  {n / dt:>10,.0f} rows/s")
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["messages"] = args.messages
    print(f"saved {save('spark', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
