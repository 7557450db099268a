"""Spark connector benchmark: the ``tidalmq`` sink and source on ``local[2]`` against a ``tidalmq
standalone`` on the same machine.

Figures (rows/s): the sink writing ``--messages`` rows (``spark.range`` → ``body``, ``--body-size`` bytes,
``tags``, ``keys``) — which also fills the topic —, a batch read of all of them (every column
materialised: ``sum(length(body))``, ``count(distinct msgId)``), a streaming read of all of them
(``Trigger.AvailableNow`` into the ``noop`` sink, from the first offset to the end) and a stream into
Parquet (``AvailableNow``, with a checkpoint).

Each source's stream shapes run once over a 50,000-row topic first, untimed, so that Spark's JIT has
compiled that source's streaming path before its clock starts.

Beside each figure, the broker's CPU a row (its process tree's, TidalMQ's or Kafka's): rows/s at one full
broker core is 10^6 / that, the bound where the broker is what binds; and the same for Spark's JVM, the
Python workers under it and the whole machine, with the share of its cores busy (``_meters``).

The broker runs with its defaults (a pull capped at 32 messages / 256 KiB, RocketMQ's
``maxTransferCountOnMessageInMemory`` / ``maxTransferBytesOnMessageInMemory``), as a user meets it;
``--raise-pull-caps`` raises them to ``--pull-max`` messages / 4 MiB.

``--floor`` runs the same reads through a Python data source that reads nothing
(bench/spark_floor_source.py: slices of one batch of the topic's own rows): what Spark itself costs any
Python data source, the ceiling of ``tidalmq``'s reads on the machine.

``--kafka`` measures Spark's own Kafka connector the same way on the same machine and the same
``local[2]`` session, side by side: Apache Kafka (scripts/reference/kafka/pom.xml, one KRaft node started
by bench/compare's peer, its defaults otherwise) and ``spark-sql-kafka-0-10`` (scripts/reference/
spark-kafka/pom.xml), both fetched from Maven Central into the reference cache by
``scripts/reference/fetch.sh``. Same rows (``value`` = the body, ``key`` = the keys), a topic of
``--queues`` partitions.

    .venv/bin/python bench/spark_bench.py [--messages 1000000] [--kafka] [--floor] [--compare bench/out/spark-latest.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import Standalone  # noqa: E402

from bench.common import compare, cpu_s, print_machine, save  # noqa: E402

Meters = Callable[[], dict[str, float]]


def _meters(broker_pid: int, jvm_pid: int) -> Meters:
    """CPU seconds so far: the broker's process tree, Spark's JVM alone, the Python workers under it (the
    daemon and the workers it forked: a worker that exits takes its time with it, so ``machine`` is the
    cross-check) and every core of the machine (/proc/stat, all but idle and iowait)."""
    def read() -> dict[str, float]:
        jvm = cpu_s(jvm_pid, children=False)
        return {"broker": cpu_s(broker_pid), "jvm": jvm, "workers": cpu_s(jvm_pid) - jvm,
                "machine": _machine_busy_s()}
    return read


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def _timed(results: dict[str, float], key: str, label: str, n: int, fn: Callable[[], object],
           meters: Meters) -> None:
    """``fn``'s rows/s under ``key``, and the CPU a row of each of ``meters``' parts under ``key`` with
    ``<part>_us_per_row`` in place of ``rows_per_s`` (``broker_us_per_row``: what bounds a figure at one
    broker core, the broker's process tree, bench.common.cpu_s). Where ``machine`` is all the cores' time,
    the rate is the CPU's: rows/s = cores / the machine's CPU a row."""
    c0 = meters()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    c1 = meters()
    results[key] = n / dt
    us = {part: (c1[part] - c0[part]) / n * 1e6 for part in c0}
    for part, v in us.items():
        results[key.replace("rows_per_s", f"{part}_us_per_row")] = v
    busy = (c1["machine"] - c0["machine"]) / dt / (os.cpu_count() or 1)
    results[key.replace("rows_per_s", "machine_busy")] = busy
    print(f"{label:<28} {n:>9,} rows in {dt:6.2f} s  {n / dt:>10,.0f} rows/s  µs a row: broker {us['broker']:5.2f}"
          f"  jvm {us['jvm']:5.2f}  py workers {us['workers']:5.2f}  machine {us['machine']:5.2f}"
          f" ({busy:.0%} busy)", flush=True)


WARM_ROWS = 50_000
# the columns each stream shape selects: the native schema (tidalmq and the floor) and Kafka's
NATIVE_COLS = (("length(body) as len", "msgId", "properties", "storeTimestamp"),
               ("msgId", "queueId", "queueOffset", "keys", "body"))
KAFKA_COLS = (("length(value) as len", "key", "offset", "timestamp"), ("partition", "offset", "key", "value"))


def _streams(results: dict[str, float], source: str, n: int, stream: Any, warm: Any,
             cols: tuple[tuple[str, ...], tuple[str, ...]], tmp: Path, meters: Meters) -> None:
    """The streaming read (noop) and the stream into Parquet of ``stream``'s ``n`` rows, timed, under
    ``<source>_stream_read_rows_per_s`` / ``<source>_stream_parquet_rows_per_s`` (``stream_…`` for tidalmq).
    Both shapes run once over ``warm`` (a small topic) first, untimed: the JVM's JIT compiles each source's
    own streaming path before its clock starts (the first timed stream read otherwise carries it: C2
    compiling took ~17 % of the machine's CPU samples during an unwarmed one, perf record -a), as the load
    generators of bench/compare warm theirs."""
    noop_cols, pq_cols = cols
    prefix = "" if source == "tidalmq" else f"{source}_"
    _stream(warm.selectExpr(*noop_cols), "noop", tmp, f"{source}-warm-noop")
    _stream(warm.selectExpr(*pq_cols), "parquet", tmp, f"{source}-warm-pq")
    _timed(results, f"{prefix}stream_read_rows_per_s", f"{source} stream read (noop)", n, lambda: _check(_stream(
        stream.selectExpr(*noop_cols), "noop", tmp, f"{source}-noop"), n, f"{source} streaming read"), meters)
    _timed(results, f"{prefix}stream_parquet_rows_per_s", f"{source} stream -> parquet", n, lambda: _check(_stream(
        stream.selectExpr(*pq_cols), "parquet", tmp, f"{source}-pq"), n, f"{source} stream to parquet"), meters)


def _check(seen: int, n: int, what: str) -> None:
    if seen != n:
        raise SystemExit(f"{what} saw {seen} rows, expected {n}")


def _stream(df: Any, fmt: str, tmp: Path, name: str) -> int:
    """Run ``df`` with Trigger.AvailableNow into ``fmt`` (noop or parquet); the rows it read."""
    w = df.writeStream.format(fmt).option("checkpointLocation", str(tmp / f"ck-{name}"))
    if fmt == "parquet":
        w = w.option("path", str(tmp / f"out-{name}"))
    q = w.trigger(availableNow=True).start()
    q.awaitTermination(1800)
    if q.exception():
        raise SystemExit(f"{name}: {q.exception()}")
    return sum(p["numInputRows"] for p in q.recentProgress)


def _tidalmq(spark: Any, ns: str, topic: str, df: Any, n: int, args: argparse.Namespace, tmp: Path,
             results: dict[str, float], meters: Meters) -> None:
    from tidalmq.client.sync import Admin

    write = df.write.format("tidalmq").option("nameserver", ns).option("topic", topic).mode("append")
    if args.dedup:
        write = write.option("writeId", topic)
    _timed(results, "sink_rows_per_s", "tidalmq sink write", n, write.save, meters)
    # the sink's sends are acknowledged once in the CommitLog; the ConsumeQueue (what readers see) follows
    with Admin(ns) as admin:
        deadline = time.monotonic() + 120
        while sum(q.max_offset for q in admin.topic_status(topic)) < n:
            if time.monotonic() > deadline:
                raise SystemExit("the topic did not reach the written count")
            time.sleep(0.2)
    reader = spark.read.format("tidalmq").option("nameserver", ns).option("topic", topic)

    def batch() -> None:
        row = reader.load().selectExpr("count(*) as n", "sum(length(body)) as bytes", "max(queueOffset) as maxoff",
                                       "sum(size(properties)) as props", "max(storeTimestamp) as last").collect()[0]
        _check(row["n"], n, "batch read")

    _timed(results, "batch_read_rows_per_s", "tidalmq batch read", n, batch, meters)

    def stream(of: str) -> Any:
        return spark.readStream.format("tidalmq").option("nameserver", ns).option("topic", of) \
            .option("startingOffsets", "earliest").load()

    _streams(results, "tidalmq", n, stream(topic), stream(topic + "_warm"), NATIVE_COLS, tmp, meters)


def _floor(spark: Any, ns: str, topic: str, n: int, queues: int, tmp: Path, results: dict[str, float],
           meters: Meters) -> None:
    """The same reads through ``bench/spark_floor_source.py``: slices of one batch of the topic's own rows,
    no broker, no decode: what Spark costs any Python data source, the ceiling of ``tidalmq``'s reads."""
    import pyarrow as pa
    from pyspark import cloudpickle

    import bench.spark_floor_source as floor
    from tidalmq.spark.records import ARROW_SCHEMA

    cloudpickle.register_pickle_by_value(floor)  # the workers need not find bench/ on their path
    spark.dataSource.register(floor.FloorDataSource)
    first = json.dumps({topic: {str(q): 8192 if q == 0 else 0 for q in range(queues)}})  # queue 0's first 8,192
    rows = spark.read.format("tidalmq").option("nameserver", ns).option("topic", topic) \
        .option("endingOffsets", first).load()
    template = rows.toArrow().cast(ARROW_SCHEMA).combine_chunks().to_batches()[0]
    path = tmp / "floor-template.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, template.schema) as w:
        w.write_batch(template)
    opts = {"template": str(path), "rows": str(n), "partitions": str(queues)}

    def batch() -> None:
        row = spark.read.format(floor.NAME).options(**opts).load().selectExpr(
            "count(*) as n", "sum(length(body)) as bytes", "max(queueOffset) as maxoff",
            "sum(size(properties)) as props", "max(storeTimestamp) as last").collect()[0]
        _check(row["n"], n, "floor batch read")

    _timed(results, "floor_batch_read_rows_per_s", "floor batch read", n, batch, meters)
    _streams(results, "floor", n, spark.readStream.format(floor.NAME).options(**opts).load(),
             spark.readStream.format(floor.NAME).options(**{**opts, "rows": str(WARM_ROWS)}).load(), NATIVE_COLS,
             tmp, meters)


def _kafka(spark: Any, bootstrap: str, topic: str, warm_topic: str, df: Any, n: int, tmp: Path,
           results: dict[str, float], meters: Meters) -> None:
    kafka = {"kafka.bootstrap.servers": bootstrap}
    write = df.selectExpr("keys as key", "body as value").write.format("kafka").options(**kafka).option("topic", topic)
    _timed(results, "kafka_sink_rows_per_s", "kafka sink write", n, write.save, meters)
    reader = spark.read.format("kafka").options(**kafka).option("subscribe", topic) \
        .option("startingOffsets", "earliest").option("endingOffsets", "latest")

    def batch() -> None:
        row = reader.load().selectExpr("count(*) as n", "sum(length(value)) as bytes", "max(offset) as maxoff",
                                       "sum(length(key)) as keys", "max(timestamp) as last").collect()[0]
        _check(row["n"], n, "kafka batch read")

    _timed(results, "kafka_batch_read_rows_per_s", "kafka batch read", n, batch, meters)

    def stream(of: str) -> Any:
        return spark.readStream.format("kafka").options(**kafka).option("subscribe", of) \
            .option("startingOffsets", "earliest").load()

    _streams(results, "kafka", n, stream(topic), stream(warm_topic), KAFKA_COLS, tmp, meters)


def _start_kafka(workdir: Path, partitions: int) -> Any:
    from bench.compare.peers import kafka as peer

    class Kafka(peer.Server):
        def props(self) -> dict[str, str]:  # topics made by the first write get the queues' count
            return {**super().props(), "num.partitions": str(partitions)}

    why = Kafka.available()
    if why:  # aiokafka too: the topic is made with its admin client
        raise SystemExit(f"--kafka: {why}")
    server = Kafka(workdir)
    server.start()
    return server


def _create_kafka_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """The topic made before the write, with ``partitions`` partitions: the first write need not race the
    topic's auto-creation (one run's write waited on a partition until its records expired, the machine
    idle)."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            await admin.close()

    asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--pull-max", type=int, default=2048, help="max messages per pull with --raise-pull-caps")
    ap.add_argument("--raise-pull-caps", action="store_true",
                    help="raise the broker's pull caps (32 / 256 KiB by default) to --pull-max / 4 MiB")
    ap.add_argument("--kafka", action="store_true", help="Spark's Kafka connector and Apache Kafka side by side")
    ap.add_argument("--floor", action="store_true",
                    help="the same reads through a Python data source that reads nothing (what Spark costs "
                    "any Python data source: bench/spark_floor_source.py)")
    ap.add_argument("--compare", help="a previous JSON result (bench/out/spark-*.json)")
    ap.add_argument("--dedup", action="store_true",
                    help="exactly-once writes: duplicationEnable on the broker and a writeId on the sink")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    print_machine()

    settings = {"mappedFileSizeCommitLog": str(1024 * 1024 * 1024), "flushDiskType": "ASYNC_FLUSH"}
    if args.raise_pull_caps:
        settings["maxTransferCountOnMessageInMemory"] = str(args.pull_max)
        settings["maxTransferBytesOnMessageInMemory"] = str(4 * 1024 * 1024)
    if args.dedup:
        settings["duplicationEnable"] = "true"
    tmp = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    broker = Standalone(tmp / "data", settings).start()
    kafka = None
    results: dict[str, float] = {}
    try:
        from pyspark.sql import SparkSession

        from tidalmq.client.sync import Admin
        from tidalmq.spark import register

        ns = broker.namesrv_addr
        topic = f"SparkBench_{uuid.uuid4().hex[:6]}"
        with Admin(ns) as admin:
            admin.create_topic(topic, args.queues)
        builder = (SparkSession.builder.master(args.master).appName("tidalmq-spark-bench")
                   .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                   .config("spark.driver.memory", "2g"))
        if args.kafka:
            from bench.compare.peers.jvm import fetch_lib, pinned

            lib = fetch_lib("spark-kafka", f"spark-kafka-{pinned('spark-kafka', 'spark.version')}")
            builder = builder.config("spark.jars", ",".join(str(j) for j in sorted(lib.glob("*.jar"))))
            kafka = _start_kafka(tmp / "kafka", args.queues)
            print(f"kafka: Apache Kafka {pinned('kafka', 'kafka.version')} (KRaft, one node), spark-sql-kafka-0-10 "
                  f"{pinned('spark-kafka', 'spark.version')}", flush=True)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        n = args.messages
        pad = "x" * max(0, args.body_size - 12)

        # warm-up: JVM, Python workers, connections
        spark.range(WARM_ROWS).selectExpr("cast(id as string) as body").write.format("tidalmq") \
            .option("nameserver", ns).option("topic", topic + "_warm").mode("append").save()
        spark.read.format("tidalmq").option("nameserver", ns).option("topic", topic + "_warm").load().count()

        df = spark.range(0, n, 1, 2).selectExpr(f"concat(lpad(cast(id as string), 12, '0'), '{pad}') as body",
                                                "'bench' as tags", "concat('k', cast(id as string)) as keys")
        assert broker.proc is not None
        jvm_pid = spark.sparkContext._gateway.proc.pid  # spark-submit execs the JVM in the process it started
        _tidalmq(spark, ns, topic, df, n, args, tmp, results, _meters(broker.proc.pid, jvm_pid))
        if args.floor:
            _floor(spark, ns, topic, n, args.queues, tmp, results, _meters(broker.proc.pid, jvm_pid))
        if kafka is not None:
            bootstrap = kafka.conn()["bootstrap"]
            warm = spark.range(WARM_ROWS).selectExpr("cast(id as string) as value")
            warm.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic + "_warm") \
                .save()
            _create_kafka_topic(bootstrap, topic, args.queues)
            _kafka(spark, bootstrap, topic, topic + "_warm", df.drop("tags"), n, tmp, results,
                   _meters(kafka.server_pid(), jvm_pid))
            for k in ("sink", "batch_read", "stream_read", "stream_parquet"):
                ours, theirs = results[f"{k}_rows_per_s"], results[f"kafka_{k}_rows_per_s"]
                line = f"{k:<16} tidalmq {ours:>10,.0f}  kafka {theirs:>10,.0f}  ratio {ours / theirs:5.2f}"
                if f"floor_{k}_rows_per_s" in results:
                    ceiling = results[f"floor_{k}_rows_per_s"]
                    line += f"  floor {ceiling:>10,.0f}  floor / kafka {ceiling / theirs:5.2f}"
                print(line)
        spark.stop()
    finally:
        if kafka is not None:
            kafka.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["messages"] = args.messages
    results["broker_pull_caps_raised"] = float(args.raise_pull_caps)
    print(f"saved {save('spark', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
