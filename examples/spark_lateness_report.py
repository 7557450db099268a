"""Batch job: how late were scheduled messages delivered? (storeTimestamp of the delivered copy against
the deliver time the writer asked for).

The tidalmq sink stamps each scheduled row's requested time in the property ``TIDALMQ_DELIVER_MS`` (the
broker drops ``TIMER_DELIVER_MS`` when it delivers). Prints a table (count, early, min/p50/p95/p99/max
lateness in ms) and draws a histogram PNG.

    python examples/spark_lateness_report.py --namesrv 127.0.0.1:9876 --topic PaymentChecks --png lateness.png
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def lateness_report(spark: Any, namesrv: str, topic: str, png: str | None = None) -> dict[str, float]:
    from pyspark.sql import functions as F

    df = (spark.read.format("tidalmq").option("nameserver", namesrv).option("topic", topic).load()
          .where(F.col("properties").getItem("TIDALMQ_DELIVER_MS").isNotNull())
          .select((F.unix_millis("storeTimestamp")
                   - F.col("properties").getItem("TIDALMQ_DELIVER_MS").cast("long")).alias("lateness_ms")))
    stats = df.agg(
        F.count("*").alias("messages"),
        F.sum(F.when(F.col("lateness_ms") < 0, 1).otherwise(0)).alias("early"),
        F.min("lateness_ms").alias("min_ms"),
        F.percentile_approx("lateness_ms", 0.5).alias("p50_ms"),
        F.percentile_approx("lateness_ms", 0.95).alias("p95_ms"),
        F.percentile_approx("lateness_ms", 0.99).alias("p99_ms"),
        F.max("lateness_ms").alias("max_ms"),
    )
    print(f"delivery lateness of scheduled messages in topic {topic} (storeTimestamp - requested deliver time):")
    stats.show(truncate=False)
    row = stats.first().asDict()
    if png and row["messages"]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        values = [r.lateness_ms for r in df.collect()]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.hist(values, bins=min(50, max(5, len(values) // 5)), color="#2a7ab0")
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlabel("lateness (ms): stored at - requested deliver time")
        ax.set_ylabel("messages")
        ax.set_title(f"{topic}: {row['messages']} scheduled messages, p50 {row['p50_ms']} ms, "
                     f"p99 {row['p99_ms']} ms, early {row['early']}")
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        plt.close(fig)
        print(f"chart: {png}")
    return {k: float(v) if v is not None else float("nan") for k, v in row.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    ap.add_argument("--topic", required=True)
    ap.add_argument("--png", default="lateness.png")
    ap.add_argument("--master", default=None, help="Spark master (default: spark-submit's --master, else local[*])")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tidalmq.spark import register

    # no master unless asked: spark-submit --master decides (plain python gets local[*])
    builder = SparkSession.builder.master(args.master) if args.master else SparkSession.builder
    spark = builder.appName("tidalmq-lateness").getOrCreate()
    register(spark)
    lateness_report(spark, args.namesrv, args.topic, args.png)
    spark.stop()


if __name__ == "__main__":
    main()
