"""The ``tidalmq`` Python data source (PySpark 4's Data Source API): batch and streaming reads, and the
hooks of the sink (``tidalmq.spark.sink``).

Where each piece runs: ``schema()`` on load (a Python worker of the driver), ``reader().partitions()`` and
the stream reader's offset calls on the driver's Python workers, ``read(partition)`` in the executors'
Python workers. Readers are pickled to the executors, so they hold options only; connections are opened
where they are used.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidalmq.spark import fetch
from tidalmq.spark.options import ReadOptions, TidalMQOptionError, parse_read_options
from tidalmq.spark.plan import hold_back, rate_limit, split_ranges

NAME = "tidalmq"

SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("broker", StringType(), False),
    StructField("queueId", IntegerType(), False),
    StructField("queueOffset", LongType(), False),
    StructField("msgId", StringType(), False),
    StructField("tags", StringType(), True),
    StructField("keys", StringType(), True),
    StructField("properties", MapType(StringType(), StringType(), True), True),
    StructField("body", BinaryType(), True),
    StructField("bornTimestamp", TimestampType(), True),
    StructField("storeTimestamp", TimestampType(), True),
    StructField("reconsumeTimes", IntegerType(), False),
])


_HEADER = StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])
# Spark's Kafka source schema, for ``kafkaCompatibleSchema`` (``headers`` only with ``includeHeaders``).
KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("offset", LongType(), True),
    StructField("timestamp", TimestampType(), True),
    StructField("timestampType", IntegerType(), True),
])
KAFKA_SCHEMA_HEADERS = StructType([*KAFKA_SCHEMA.fields,
                                   StructField("headers", ArrayType(_HEADER, True), True)])


def schema_of(opts: ReadOptions) -> StructType:
    if not opts.kafka_schema:
        return SCHEMA
    return KAFKA_SCHEMA_HEADERS if opts.include_headers else KAFKA_SCHEMA


class QueueRangePartition(InputPartition):
    """[start, end) of one message queue (a large backlog is cut into several of these)."""

    def __init__(self, topic: str, broker: str, queue_id: int, start: int, end: int, new_queue: bool = False) -> None:
        super().__init__((topic, broker, queue_id, start, end))
        self.topic, self.broker, self.queue_id = topic, broker, queue_id
        self.start, self.end, self.new_queue = start, end, new_queue

    def __repr__(self) -> str:
        return f"QueueRangePartition({self.topic} {self.broker}:{self.queue_id} [{self.start}, {self.end}))"


def _check_schema(schema: StructType | None, opts: ReadOptions) -> None:
    fixed = schema_of(opts)
    if schema is not None and [(f.name, f.dataType) for f in schema.fields] != \
            [(f.name, f.dataType) for f in fixed.fields]:
        raise TidalMQOptionError(f"the tidalmq source has a fixed schema and does not take a user schema; "
                                 f"it is {fixed.simpleString()}")


def _validate(opts: ReadOptions) -> None:
    """At load(): the NameServer answers and each named topic exists (a pattern may match nothing yet)."""
    with fetch.Catalog(opts) as cat:
        cat.check_nameserver()
        for t in opts.topics:
            cat.queues(t)
            cat.check_filter(t)


def _read_partition(opts: ReadOptions, p: QueueRangePartition) -> Iterator[Any]:
    from tidalmq.spark.records import ARROW_SCHEMA

    spec = fetch.RangeSpec(p.topic, p.broker, p.queue_id, p.start, p.end, p.new_queue)
    batches = fetch.read_range(opts, spec, schema=ARROW_SCHEMA)
    if opts.kafka_schema:
        from tidalmq.spark.records import to_kafka

        batches = (to_kafka(b, opts.include_headers) for b in batches)
    yield from batches


def _partitions(ranges: dict[fetch.QueueKey, tuple[int, int]], opts: ReadOptions,
                new_queues: set[fetch.QueueKey] | None = None) -> list[QueueRangePartition]:
    new_queues = new_queues or set()
    return [QueueRangePartition(k[0], k[1], k[2], lo, hi, k in new_queues)
            for k, lo, hi in split_ranges(ranges, opts.max_records_per_partition, opts.min_partitions)]


class TidalMQDataSource(DataSource):
    """``spark.read.format("tidalmq")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        opts = parse_read_options(self.options, streaming=None)
        _validate(opts)
        return schema_of(opts)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options, streaming=False)
        _check_schema(schema, opts)
        return TidalMQBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_read_options(self.options, streaming=True)
        _check_schema(schema, opts)
        return TidalMQStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool):
        from tidalmq.spark.sink import TidalMQBatchWriter, refuse_overwrite

        refuse_overwrite(overwrite)
        return TidalMQBatchWriter(self.options, schema, streaming=False)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from tidalmq.spark.sink import TidalMQStreamWriter

        return TidalMQStreamWriter(self.options, schema, streaming=True)


class TidalMQBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[QueueRangePartition]:
        opts = self.opts
        with fetch.Catalog(opts, loaded=True) as cat:
            queues = cat.all_queues()
            bounds = cat.min_max(queues)
            start = cat.resolve(opts.starting, queues, bounds, "startingOffsets")
            end = cat.resolve(opts.ending, queues, bounds, "endingOffsets")
        ranges: dict[fetch.QueueKey, tuple[int, int]] = {}
        for k, (lo, hi) in bounds.items():
            s, e = start[k], min(end[k], hi)
            if opts.starting.kind == "queues" and s > e and opts.ending.kind not in ("timestamp", "timestamps"):
                raise TidalMQOptionError(f"option 'startingOffsets': offset {s} of {k[0]} {k[1]}:{k[2]} is after "
                                         f"the end offset {e}")
            if s < lo and not opts.fail_on_data_loss:
                s = lo
            ranges[k] = (s, max(s, e))
        return _partitions(ranges, opts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, QueueRangePartition):  # Spark's placeholder when there is nothing to read
            return iter(())
        return _read_partition(self.opts, partition)


class TidalMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{topic: {"broker:queueId": next offset}}``; a micro-batch reads [start, end) of each
    queue, exactly the same records whenever it is replayed, which with Spark's checkpoint and an
    idempotent sink gives exactly-once."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._catalog: fetch.Catalog | None = None
        self._available_now: dict[fetch.QueueKey, int] | None = None
        self._last_trigger: float | None = None  # monotonic time of the last batch (minOffsetsPerTrigger)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_catalog"] = None
        return state

    @property
    def catalog(self) -> fetch.Catalog:
        if self._catalog is None:
            self._catalog = fetch.Catalog(self.opts, loaded=True).start()
        return self._catalog

    def _bounds(self) -> tuple[list[Any], dict[fetch.QueueKey, tuple[int, int]]]:
        queues = self.catalog.all_queues()
        return queues, self.catalog.min_max(queues)

    def initialOffset(self) -> dict:
        queues, bounds = self._bounds()
        start = self.catalog.resolve(self.opts.starting, queues, bounds, "startingOffsets")
        return fetch.offsets_to_dict(start)

    def _latest(self) -> dict[fetch.QueueKey, int]:
        _queues, bounds = self._bounds()
        latest = {k: hi for k, (_lo, hi) in bounds.items()}
        if self._available_now is not None:
            cap = self._available_now
            latest = {k: min(v, cap[k]) if k in cap else v for k, v in latest.items() if k in cap}
        return latest

    def prepareForTriggerAvailableNow(self) -> None:
        _queues, bounds = self._bounds()
        self._available_now = {k: hi for k, (_lo, hi) in bounds.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages_per_trigger:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        latest = self._latest()
        begin = fetch.offsets_from_dict(start)
        for k, v in begin.items():  # a queue never moves backwards (one that vanished keeps its offset)
            latest[k] = max(latest.get(k, v), v)
        hold = bool(self.opts.min_messages_per_trigger) and self._available_now is None  # AvailableNow never waits
        if not isinstance(limit, ReadMaxRows) and not hold:
            return fetch.offsets_to_dict(latest)
        _q, bounds = self._bounds()
        base = {k: begin.get(k, bounds.get(k, (0, 0))[0]) for k in latest}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(base, latest, limit.max_rows)
        if hold:
            now = time.monotonic()
            waiting = sum(max(0, latest[k] - base[k]) for k in latest)
            if hold_back(waiting, self.opts.min_messages_per_trigger or 0, self._last_trigger, now,
                         self.opts.max_trigger_delay_s):
                return fetch.offsets_to_dict(begin) if start is not None else fetch.offsets_to_dict(base)
            if waiting:
                self._last_trigger = now
        return fetch.offsets_to_dict(latest)

    def reportLatestOffset(self) -> dict | None:
        try:
            return fetch.offsets_to_dict(self._latest())
        except Exception:
            return None

    def partitions(self, start: dict, end: dict) -> list[QueueRangePartition]:
        s = fetch.offsets_from_dict(start)
        e = fetch.offsets_from_dict(end)
        ranges = {k: (s.get(k, 0), hi) for k, hi in e.items()}
        return _partitions(ranges, self.opts, {k for k in e if k not in s})

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, QueueRangePartition):  # Spark's placeholder when there is nothing to read
            return iter(())
        return _read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        if self.opts.consumer_group:
            self.catalog.commit(fetch.offsets_from_dict(end))

    def stop(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None
