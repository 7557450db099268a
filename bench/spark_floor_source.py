"""A Python data source that reads nothing: the ceiling of any PySpark Python data source on this machine.

``spark_bench.py --floor`` registers it as the ``tidalmq_floor`` format. Its batches are slices of one
batch of real rows (read from the benchmark's topic by the driver, with the ``tidalmq`` source's own
reader, and handed over as an Arrow IPC file), so Spark receives the same schema, the same column sizes
and the same batch length as from ``tidalmq``; what it leaves out is the pull from the broker and the
decode. Its streaming read therefore costs what Spark itself costs a Python data source: the worker's
Arrow stream to the JVM, the JVM's conversion of Arrow to rows, the query's planning and commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, SupportsTriggerAvailableNow

NAME = "tidalmq_floor"

_TEMPLATE: dict[str, Any] = {}  # the worker's template batch, loaded once per Python worker


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start, self.end = start, end


def _template(path: str) -> Any:
    batch = _TEMPLATE.get(path)
    if batch is None:
        import pyarrow as pa

        with pa.memory_map(path) as src:
            batch = pa.ipc.open_file(src).get_batch(0)
        _TEMPLATE[path] = batch
    return batch


def _read(path: str, part: _Range) -> Iterator[Any]:
    template = _template(path)
    size = template.num_rows
    at = part.start
    while at < part.end:
        k = min(size, part.end - at)
        yield template.slice(0, k)
        at += k


def _ranges(start: int, end: int, partitions: int) -> list[_Range]:
    step = -(-(end - start) // partitions) or 1
    return [_Range(lo, min(end, lo + step)) for lo in range(start, end, step)]


class FloorDataSource(DataSource):
    """Options: ``template`` (the Arrow IPC file of one batch), ``rows``, ``partitions``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        from tidalmq.spark.source import SCHEMA

        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return FloorBatchReader(self.options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return FloorStreamReader(self.options)


class FloorBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["template"]
        self.rows = int(options["rows"])
        self.parts = int(options["partitions"])

    def partitions(self) -> list[_Range]:
        return _ranges(0, self.rows, self.parts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Range)
        return _read(self.path, partition)


class FloorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["template"]
        self.rows = int(options["rows"])
        self.parts = int(options["partitions"])

    def initialOffset(self) -> dict:
        return {"at": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        return {"at": self.rows}

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        return _ranges(int(start["at"]), int(end["at"]), self.parts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, _Range):
            return iter(())
        return _read(self.path, partition)

    def commit(self, end: dict) -> None:
        pass
