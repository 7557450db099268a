"""PySpark source and sink for TidalMQ topics (PySpark 4's Python Data Source API).

    import tidalmq.spark
    tidalmq.spark.register(spark)
    df = spark.read.format("tidalmq").option("nameserver", "127.0.0.1:9876").option("topic", "Orders").load()

See docs/spark.md. Importing this package does not import pyspark; ``register`` does.
"""

from __future__ import annotations

from typing import Any

NAME = "tidalmq"
__all__ = ["NAME", "register"]


def register(spark: Any) -> None:
    """Register the ``tidalmq`` format with a SparkSession (once per session)."""
    from tidalmq.spark.source import TidalMQDataSource

    spark.dataSource.register(TidalMQDataSource)
