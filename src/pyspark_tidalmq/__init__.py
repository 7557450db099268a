"""The ``tidalmq`` format, found by PySpark 4 itself: Spark looks up Python data sources in the modules
named ``pyspark_*`` on its Python path and registers each one's ``DefaultSource``, so a job uses
``format("tidalmq")`` without calling ``tidalmq.spark.register`` (docs/spark.md)."""

from tidalmq.spark.source import TidalMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
