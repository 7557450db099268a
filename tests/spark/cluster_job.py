"""The pipeline test_cluster submits to a Spark standalone cluster with spark-submit (the master comes
from ``--master``, never from here): a TidalMQ topic into Parquet (a stream run with AvailableNow), the
Parquet back into another topic (the sink), and where the executors imported tidalmq from.

    spark-submit --master spark://... --py-files tidalmq.zip tests/spark/cluster_job.py \
        NAMESRV IN_TOPIC OUT_TOPIC WORK_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession

from tidalmq.spark import register


def _tidalmq_origin(_: object) -> str:
    import tidalmq

    return tidalmq.__file__ or ""


def main() -> None:
    ns, topic_in, topic_out, work = sys.argv[1:5]
    spark = SparkSession.builder.appName("tidalmq-cluster-pipeline").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    parquet = str(Path(work) / "parquet")
    q = (spark.readStream.format("tidalmq").option("nameserver", ns).option("topic", topic_in)
         .option("startingOffsets", "earliest").load()
         .selectExpr("msgId", "queueId", "queueOffset", "keys", "body")
         .writeStream.format("parquet").option("path", parquet)
         .option("checkpointLocation", str(Path(work) / "checkpoint")).trigger(availableNow=True).start())
    q.awaitTermination()
    (spark.read.parquet(parquet).selectExpr("body", "keys")
     .write.format("tidalmq").option("nameserver", ns).option("topic", topic_out).mode("append").save())
    origins = spark.sparkContext.parallelize(range(4), 4).map(_tidalmq_origin).distinct().collect()
    (Path(work) / "executor-tidalmq.txt").write_text("\n".join(origins))
    spark.stop()


if __name__ == "__main__":
    main()
