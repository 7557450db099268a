"""A streaming job run as its own driver process by test_exactly_once (so it can be killed mid-stream):
reads a topic with a checkpoint and appends it to Parquet.

    python tests/spark/stream_job.py NAMESRV TOPIC OUT_DIR CHECKPOINT_DIR [--available-now]
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from tidalmq.spark import register


def main() -> None:
    ns, topic, out, ck = sys.argv[1:5]
    available_now = "--available-now" in sys.argv
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("tidalmq-exactly-once")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (spark.readStream.format("tidalmq").option("nameserver", ns).option("topic", topic)
          .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "100").load()
          .selectExpr("msgId", "queueId", "queueOffset", "cast(body as string) as body"))
    w = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
    w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime="300 milliseconds")
    q = w.start()
    print("started", flush=True)
    q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
