"""A Kafka Structured Streaming job as it is written for Spark's Kafka connector, ported by changing the
format name ("kafka" -> "tidalmq") and the server option (kafka.bootstrap.servers -> nameserver) and
nothing else but the save mode of the batch write (see ``.mode("append")`` below). test_kafka_job runs it
as its own driver process, kills it mid-stream and runs it again.

    python tests/spark/kafka_job.py SERVERS IN_TOPIC OUT_TOPIC WORK_DIR [--available-now]
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import col, lit


def main() -> None:
    servers, topic_in, topic_out, work = sys.argv[1:5]
    available_now = "--available-now" in sys.argv
    spark = (SparkSession.builder.master("local[2]").appName("orders-etl")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    events = (spark.readStream.format("tidalmq")               # was: format("kafka")
              .option("nameserver", servers)                   # was: option("kafka.bootstrap.servers", servers)
              .option("subscribe", topic_in)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 200)
              .option("failOnDataLoss", "false")
              .load()
              .select(col("value").cast("string").alias("value"), "key", "topic", "partition", "offset",
                      "timestamp"))
    writer = (events.writeStream.format("parquet").option("path", f"{work}/events")
              .option("checkpointLocation", f"{work}/checkpoint"))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="300 milliseconds")
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    if available_now:
        (spark.read.parquet(f"{work}/events")
         .select(col("key"), col("value"), lit(topic_out).alias("topic"))
         .write.format("tidalmq")                              # was: format("kafka")
         .option("nameserver", servers)                        # was: option("kafka.bootstrap.servers", servers)
         # Kafka's plain .save() is ErrorIfExists, which PySpark 4.3 refuses for every Python data source
         # before the source is asked (UNSUPPORTED_DATA_SOURCE_SAVE_MODE): append is the mode that works.
         .mode("append")
         .save())
    spark.stop()


if __name__ == "__main__":
    main()
