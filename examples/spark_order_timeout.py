"""Order timeout on Spark, end to end on local[*]: an order not paid N minutes after it is cancelled
(seconds here, ``--timeout``).

1. Orders are produced to ``Orders`` (and, for most of them, a payment to ``Payments`` shortly after).
2. Streaming job "schedule": reads ``Orders`` and writes, for each order, a payment check to
   ``PaymentChecks`` with ``deliverTime`` = order time + timeout: a scheduled message the broker
   releases when it is due.
3. Streaming job "check": reads the due checks as they arrive, joins each micro-batch with the
   ``Payments`` topic, and writes the unpaid orders as cancellations to ``OrderCancellations`` and to
   Parquet.
4. Batch job: delivery lateness of the payment checks (a table and a PNG chart).

    python examples/spark_order_timeout.py                       # starts its own tidalmq standalone
    python examples/spark_order_timeout.py --namesrv host:9876   # or uses yours

Exits non-zero unless exactly the unpaid orders were cancelled.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_lateness_report import lateness_report  # noqa: E402

ORDER_SCHEMA = "orderId string, amount double, createdMs long"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_standalone(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    ns_port, broker_port = free_port(), free_port()
    while abs(ns_port - broker_port) <= 1:
        broker_port = free_port()
    cmd = [sys.executable, "-m", "tidalmq.cli", "standalone", "--data-dir", str(data_dir), "--namesrv-port",
           str(ns_port), "--broker-port", str(broker_port), "--grpc-port", "0", "--set", "timerPrecisionMs=100",
           "--set", "metricsExporterType=DISABLE"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if "standalone ready" in line:
            return proc, f"127.0.0.1:{ns_port}"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("tidalmq standalone did not start")


def create_topics(ns: str, topics: dict[str, str]) -> None:
    from tidalmq.client.sync import Admin

    with Admin(ns) as admin:
        for t in topics.values():
            admin.create_topic(t, 4)
        deadline = time.monotonic() + 15
        for t in topics.values():
            while True:
                try:
                    if admin.route(t).get("queueDatas"):
                        break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.05)


def produce_orders(ns: str, topics: dict[str, str], n: int, paid_ratio: float, seed: int) -> set[str]:
    """Orders, and payments for some of them (sent right away: well before the timeout). Returns the unpaid."""
    from tidalmq.client import Message
    from tidalmq.client.sync import Producer

    rng = random.Random(seed)
    unpaid: set[str] = set()
    with Producer("OrderService", ns) as p:
        for i in range(n):
            oid = f"order-{i:05d}"
            order = {"orderId": oid, "amount": round(rng.uniform(5, 500), 2), "createdMs": int(time.time() * 1000)}
            p.send(Message(topics["orders"], json.dumps(order), tags="created", keys=oid))
            if rng.random() < paid_ratio:
                p.send(Message(topics["payments"], json.dumps({"orderId": oid, "amount": order["amount"]}),
                               tags="paid", keys=oid))
            else:
                unpaid.add(oid)
    return unpaid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", default=None, help="an existing NameServer (default: start a standalone)")
    ap.add_argument("--orders", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds an order may stay unpaid")
    ap.add_argument("--paid-ratio", type=float, default=0.7)
    ap.add_argument("--out", default=None, help="output folder (Parquet, chart); default: a temp folder")
    ap.add_argument("--master", default=None, help="Spark master (default: spark-submit's --master, else local[*])")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--max-wait", type=float, default=180.0)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.out or tempfile.mkdtemp(prefix="order-timeout-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = None
    ns = args.namesrv
    if ns is None:
        broker, ns = start_standalone(work / "tidalmq-data")
        print(f"tidalmq standalone on {ns} (data in {work / 'tidalmq-data'})")
    run = uuid.uuid4().hex[:6]
    topics = {"orders": f"Orders_{run}", "payments": f"Payments_{run}", "checks": f"PaymentChecks_{run}",
              "cancels": f"OrderCancellations_{run}"}
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from tidalmq.spark import register

        create_topics(ns, topics)
        # no master unless asked: spark-submit --master decides (plain python gets local[*])
        builder = SparkSession.builder.master(args.master) if args.master else SparkSession.builder
        spark = (builder.appName("order-timeout")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def tidalmq_stream(topic: str):  # type: ignore[no-untyped-def]
            return (spark.readStream.format("tidalmq").option("nameserver", ns).option("topic", topic)
                    .option("startingOffsets", "earliest").load())

        # job 1: schedule a payment check per order at createdMs + timeout
        timeout_ms = int(args.timeout * 1000)
        checks = (tidalmq_stream(topics["orders"])
                  .select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o"))
                  .select(F.to_json(F.struct("o.orderId", "o.amount", "o.createdMs")).alias("body"),
                          F.lit("check").alias("tags"), F.col("o.orderId").alias("keys"),
                          F.timestamp_millis(F.col("o.createdMs") + timeout_ms).alias("deliverTime")))
        schedule_q = (checks.writeStream.format("tidalmq").option("nameserver", ns).option("topic", topics["checks"])
                      .option("checkpointLocation", str(work / "ck-schedule")).trigger(processingTime="1 second")
                      .queryName("schedule-payment-checks").start())

        # job 2: due checks joined with payments; unpaid orders become cancellations (topic + Parquet)
        parquet_dir = work / "cancellations"
        payments_reader = (spark.read.format("tidalmq").option("nameserver", ns).option("topic", topics["payments"]))

        processed: set[str] = set()  # foreachBatch runs on the driver

        def cancel_unpaid(due, batch_id: int) -> None:  # type: ignore[no-untyped-def]
            due = due.persist()  # several actions below: read the micro-batch from TidalMQ once
            ids = [r.orderId for r in due.select("orderId").collect()]
            if not ids:
                return
            processed.update(ids)
            paid = (payments_reader.load()
                    .select(F.get_json_object(F.col("body").cast("string"), "$.orderId").alias("orderId")))
            cancels = (due.join(paid, "orderId", "left_anti")
                       .select("orderId", "amount", "createdMs", "dueMs",
                               F.current_timestamp().alias("cancelledAt")))
            cancels = cancels.cache()
            cancels.write.mode("append").parquet(str(parquet_dir))
            (cancels.select(F.to_json(F.struct("orderId", "amount", "createdMs", "dueMs")).alias("body"),
                            F.lit("cancelled").alias("tags"), F.col("orderId").alias("keys"))
             .write.format("tidalmq").option("nameserver", ns).option("topic", topics["cancels"]).mode("append")
             .save())
            cancels.unpersist()
            due.unpersist()

        due = (tidalmq_stream(topics["checks"])
               .select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("c"),
                       F.col("properties").getItem("TIDALMQ_DELIVER_MS").cast("long").alias("dueMs"))
               .select("c.orderId", "c.amount", "c.createdMs", "dueMs"))
        check_q = (due.writeStream.foreachBatch(cancel_unpaid).option("checkpointLocation", str(work / "ck-check"))
                   .trigger(processingTime="1 second").queryName("cancel-unpaid-orders").start())

        # the jobs are running: now the shop takes orders
        while not (schedule_q.recentProgress and check_q.recentProgress):
            time.sleep(0.2)
        unpaid = produce_orders(ns, topics, args.orders, args.paid_ratio, args.seed)
        print(f"produced {args.orders} orders, {args.orders - len(unpaid)} paid, {len(unpaid)} unpaid; "
              f"timeout {args.timeout} s")
        # wait until every order's check was processed
        t0 = time.monotonic()
        seen = 0
        while time.monotonic() - t0 < args.max_wait:
            time.sleep(1)
            for q in (schedule_q, check_q):
                if q.exception():
                    raise SystemExit(f"query {q.name} failed: {q.exception()}")
            seen = len(processed)
            print(f"  {time.monotonic() - t0:5.1f} s: {seen}/{args.orders} payment checks due and processed")
            if seen >= args.orders and check_q.status["isDataAvailable"] is False:
                break
        print("  rows per micro-batch of the check job:", [p["numInputRows"] for p in check_q.recentProgress])
        schedule_q.stop()
        check_q.stop()
        if seen < args.orders:
            raise SystemExit(f"only {seen} of {args.orders} checks were processed within {args.max_wait} s")

        cancelled = {r.orderId for r in spark.read.parquet(str(parquet_dir)).collect()}
        in_topic = (spark.read.format("tidalmq").option("nameserver", ns).option("topic", topics["cancels"]).load()
                    .select("keys").collect())
        print(f"cancelled {len(cancelled)} orders (Parquet: {parquet_dir}); {len(in_topic)} cancellations in "
              f"topic {topics['cancels']}")
        report = lateness_report(spark, ns, topics["checks"], str(work / "lateness.png"))
        spark.stop()
        ok = cancelled == unpaid and {r.keys for r in in_topic} == unpaid and report["early"] == 0
        print("RESULT:", "OK: exactly the unpaid orders were cancelled, no check was early" if ok else
              f"MISMATCH: unpaid {len(unpaid)}, cancelled {len(cancelled)}, in topic {len(in_topic)}, "
              f"early {report['early']}")
        if not ok:
            raise SystemExit(1)
    finally:
        if broker is not None:
            broker.terminate()
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
            if args.out is None:
                shutil.rmtree(work / "tidalmq-data", ignore_errors=True)


if __name__ == "__main__":
    main()
