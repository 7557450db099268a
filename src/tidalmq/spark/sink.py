"""The ``tidalmq`` sink: ``df.write.format("tidalmq")`` and ``df.writeStream.format("tidalmq")``.

Columns: ``body`` (required, string or binary) and optional ``topic``, ``tags``, ``keys`` (string or
array<string>), ``properties`` (map<string,string>), ``delayLevel`` (integer, RocketMQ 4 delay level),
``deliverTime`` (timestamp, or epoch milliseconds as a long: a RocketMQ 5 scheduled message) and
``shardingKey`` (string or integer: the queue is chosen by the key's hash, so one key's messages stay in
order). The schema is checked on the driver when the write is planned.

Each task sends with one asyncio ``Producer``: plain rows as batches (``SEND_BATCH_MESSAGE``, round-robin
over the queues), scheduled rows one by one (batches cannot carry a schedule), many requests in flight
(``maxInflight``); rows with a sharding key go to their queue with at most one request in flight per queue,
so their order holds. Every send is awaited before the task ends. The producer is idempotent (a send
goes to the queue its key hashes to and is retried there until ``sendTimeoutMs``) and the keys are
deterministic (``message_keys``), so with ``duplicationEnable`` on the broker a retried task or a re-run
batch stores each row once (docs/spark.md, "Exactly-once writes"). A refused send fails the task, saying
whether the broker answered or the client got no answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, overload

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from tidalmq.common import message as mc
from tidalmq.spark.kafka_columns import KAFKA_COLUMNS, from_kafka, is_kafka_header, kafka_conversions
from tidalmq.spark.options import TidalMQOptionError, WriteOptions, parse_write_options

DELIVER_MS_PROPERTY = "TIDALMQ_DELIVER_MS"  # the requested deliver time, kept on delivery (lateness reports)
_INTS = (ByteType, ShortType, IntegerType, LongType)
_ACCEPTED: dict[str, tuple[str, tuple[type[DataType], ...]]] = {
    "body": ("string or binary", (StringType, BinaryType)),
    "topic": ("string", (StringType,)),
    "tags": ("string", (StringType,)),
    "keys": ("string or array<string>", (StringType, ArrayType)),
    "properties": ("map<string,string>", (MapType,)),
    "delayLevel": ("an integer type", _INTS),
    "deliverTime": ("timestamp or long (epoch ms)", (TimestampType, TimestampNTZType, LongType)),
    "shardingKey": ("string or an integer type", (StringType, *_INTS)),
}


class TidalMQSchemaError(ValueError):
    """A DataFrame the sink cannot write: a missing or unknown column, or a column of the wrong type."""


class TidalMQSinkError(RuntimeError):
    """A send the broker (or the network) refused; fails the task."""


def refuse_overwrite(overwrite: bool) -> None:
    """``mode("overwrite")`` would promise to replace a topic's messages, which a log cannot do (Kafka's
    sink refuses it too)."""
    if overwrite:
        raise TidalMQOptionError("the tidalmq sink cannot overwrite a topic (its messages are a log): save mode "
                                 "'overwrite' is not supported, use mode('append')")


def message_keys(write_id: str | None, *, streaming: bool) -> str | None:
    """The prefix of this task's deterministic message keys (UNIQ_KEY = prefix + row number, 32 hex
    digits as the client's ids), from (``writeId`` or the streaming query's id, the micro-batch id, the
    partition): a retried task or a re-run batch sends the same keys, which a broker with
    ``duplicationEnable`` stores once. None (random keys): a batch write without ``writeId``, or no
    Spark task context (the keys would not be stable)."""
    import hashlib

    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return None
    batch = tc.getLocalProperty("streaming.sql.batchId") if streaming else ""
    base = write_id or (tc.getLocalProperty("sql.streaming.queryId") if streaming else None)
    if not base or batch is None:
        return None
    seed = f"{base}\x00{batch}\x00{tc.partitionId()}".encode()
    return hashlib.blake2b(seed, digest_size=12).hexdigest().upper()


def check_sink_schema(schema: StructType, opts: WriteOptions) -> dict[str, str]:
    """Column name (as documented) -> name in the DataFrame; raises ``TidalMQSchemaError``."""
    cols: dict[str, str] = {}
    canon = {k.lower(): k for k in _ACCEPTED}
    for f in schema.fields:
        key = canon.get(f.name.lower())
        kafka = KAFKA_COLUMNS.get(f.name.lower())
        if kafka is not None:
            key = kafka[0]
            if key in cols:
                raise TidalMQSchemaError(f"columns {cols[key]!r} and {f.name!r} are both written as the message's "
                                         f"{key}: give one of them")
        elif key in cols:
            raise TidalMQSchemaError(f"columns {cols[key]!r} and {f.name!r} are both written as the message's "
                                     f"{key}: give one of them")
        if key is None:
            hint = (" (Kafka's 'partition': TidalMQ picks the queue; a 'shardingKey' keeps one key's rows in "
                    "order)") if f.name.lower() == "partition" else " (select or rename the DataFrame's columns)"
            raise TidalMQSchemaError(f"column {f.name!r} is not a column the tidalmq sink writes; the columns are "
                                     f"{', '.join(_ACCEPTED)}, or Kafka's {', '.join(KAFKA_COLUMNS)}{hint}")
        what, types = (kafka[1], kafka[2]) if kafka is not None else _ACCEPTED[key]
        dt = f.dataType
        ok = isinstance(dt, types)
        if ok and kafka is not None and key == "properties":
            ok = isinstance(dt, ArrayType) and is_kafka_header(dt.elementType)
        if ok and kafka is None and key == "keys" and isinstance(dt, ArrayType):
            ok = isinstance(dt.elementType, StringType)
        if ok and kafka is None and key == "properties":
            ok = isinstance(dt, MapType) and isinstance(dt.keyType, StringType) and isinstance(dt.valueType, StringType)
        if not ok:
            raise TidalMQSchemaError(f"column {f.name!r} must be {what} for the tidalmq sink, but it is "
                                     f"{dt.simpleString()}")
        cols[key] = f.name
    if "body" not in cols:
        raise TidalMQSchemaError(f"the tidalmq sink needs a 'body' column (string or binary); the DataFrame has "
                                 f"{', '.join(schema.fieldNames()) or 'no columns'}")
    if "topic" not in cols and not opts.topic:
        raise TidalMQSchemaError("the tidalmq sink needs a 'topic' column or the option 'topic'")
    if "delayLevel" in cols and "deliverTime" in cols:
        pass  # allowed; a row may set one or the other, not both (checked per row)
    return cols


def _check_nameserver(opts: WriteOptions) -> None:
    """Fail with a clear message when no NameServer answers, once a blip is ridden out as a send rides it out
    (tried again with backoff from 0.1 s to 2 s until ``sendTimeoutMs``): Spark makes a streaming query's
    writer anew for every micro-batch, so a broker restarting at that moment must not end the query."""
    from tidalmq.client.errors import MQClientError
    from tidalmq.client.instance import ClientInstance
    from tidalmq.client.sync import run
    from tidalmq.remoting.codes import RequestCode as RC
    from tidalmq.spark.options import RetryPolicy
    from tidalmq.spark.retry import RetriesExhausted, describe, retry_sync

    async def ping() -> None:
        inst = ClientInstance(opts.nameserver, request_timeout=opts.request_timeout_s)
        try:
            await inst.invoke_namesrv(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        finally:
            await inst.remoting.close()

    no_answer = f"option 'nameserver': no TidalMQ NameServer answers at {opts.nameserver}"
    try:
        retry_sync(lambda: run(ping(), timeout=opts.request_timeout_s * 4 + 5),
                   RetryPolicy(interval_s=0.1, deadline_s=opts.send_timeout_s), "asking it for its topics", counted=False)
    except RetriesExhausted as e:
        raise TidalMQOptionError(f"{no_answer} within sendTimeoutMs={int(opts.send_timeout_s * 1000)}: "
                                 f"{describe(e.__cause__ or e)}") from None
    except (MQClientError, TimeoutError) as e:  # an answer that is not "not now"
        raise TidalMQOptionError(f"{no_answer}: {e}") from None


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    rows: int
    scheduled: int


class _WriterBase:
    def __init__(self, options: Any, schema: StructType, *, streaming: bool) -> None:
        self.opts = parse_write_options(options, streaming=streaming)
        self.columns = check_sink_schema(schema, self.opts)
        self.conversions = kafka_conversions(schema, self.columns)
        self.streaming = streaming
        _check_nameserver(self.opts)

    def _write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        keys = message_keys(self.opts.write_id, streaming=self.streaming)
        if self.conversions:
            iterator = self._converted(iterator)
        return asyncio.run(_send_all(self.opts, self.columns, iterator, keys))

    def _converted(self, iterator: Iterator[Any]) -> Iterator[Any]:
        rows = 0
        for rb in iterator:
            try:
                yield from_kafka(rb, self.conversions)
            except ValueError as e:
                raise TidalMQSinkError(f"tidalmq sink: batch at row {rows}: {e}") from None
            rows += rb.num_rows


class TidalMQBatchWriter(_WriterBase, DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return self._write(iterator)


class TidalMQStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        pass


# ---- the sending (executors) ---------------------------------------------------------------------------

@overload
def _column(rb: Any, name: str, *, body: bool = False) -> list[Any]: ...
@overload
def _column(rb: Any, name: str | None, *, body: bool = False) -> list[Any] | None: ...


def _column(rb: Any, name: str | None, *, body: bool = False) -> list[Any] | None:
    if name is None:
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    col = rb.column(rb.schema.get_field_index(name))
    if pa.types.is_timestamp(col.type):
        return pc.cast(col, pa.int64()).to_pylist()  # microseconds since the epoch
    if body and pa.types.is_string(col.type):
        return pc.cast(col, pa.binary()).to_pylist()  # UTF-8 bytes without a Python str per row
    return col.to_pylist()


def _is_timestamp(rb: Any, name: str | None) -> bool:
    import pyarrow as pa

    return name is not None and pa.types.is_timestamp(rb.schema.field(name).type)


class _Sender:
    def __init__(self, producer: Any, opts: WriteOptions, columns: dict[str, str], keys: str | None) -> None:
        self.keys = keys  # the prefix of deterministic UNIQ_KEYs (message_keys), or None
        self.p = producer
        self.opts = opts
        self.cols = columns
        self.inflight: set[asyncio.Future[Any]] = set()
        self.queue_tail: dict[Any, asyncio.Future[Any]] = {}  # ordered sends: the last request per queue
        self.rows = 0
        self.scheduled = 0
        self.error: BaseException | None = None
        self.checked_topics: set[str] = set()

    def _spawn(self, coro: Any, what: str) -> asyncio.Future[Any]:
        fut = asyncio.ensure_future(self._guard(coro, what))
        self.inflight.add(fut)
        fut.add_done_callback(self.inflight.discard)
        return fut

    async def _guard(self, coro: Any, what: str) -> None:
        try:
            await coro
        except BaseException as e:  # noqa: BLE001 - remembered, raised by the task
            if self.error is None:
                from tidalmq.spark.retry import describe

                self.error = TidalMQSinkError(f"tidalmq sink: {what} failed: {describe(e)}")
                self.error.__cause__ = e

    async def _after(self, prev: asyncio.Future[Any] | None, coro_fn: Any) -> None:
        if prev is not None:
            await asyncio.shield(prev)
        if self.error is None:
            await coro_fn()

    async def add(self, rb: Any) -> None:
        from tidalmq.client.message import Message
        from tidalmq.client.selector import select_by_hash
        from tidalmq.client.validators import ValidationError, check_topic_sendable

        c = self.cols
        n = rb.num_rows
        if await self._add_plain(rb):
            return
        bodies = _column(rb, c["body"], body=True)
        topics = _column(rb, c.get("topic"))
        tags = _column(rb, c.get("tags"))
        keys = _column(rb, c.get("keys"))
        props = _column(rb, c.get("properties"))
        levels = _column(rb, c.get("delayLevel"))
        delivers = _column(rb, c.get("deliverTime"))
        deliver_us = _is_timestamp(rb, c.get("deliverTime"))  # timestamps come as microseconds, longs are ms
        shards = _column(rb, c.get("shardingKey"))
        default_topic = self.opts.topic
        plain: dict[str, list[Entry]] = {}  # topic -> [(body, properties without UNIQ_KEY, key)]
        ordered: dict[Any, list[Message]] = {}
        checked = self.checked_topics
        max_size = self.p.max_message_size
        prefix = self.keys
        for i in range(n):
            uniq = f"{prefix}{self.rows + i:08X}" if prefix is not None else None
            body = bodies[i]
            if not body or len(body) > max_size:
                what = "null" if body is None else "empty" if not body else f"{len(body)} bytes, over {max_size}"
                raise TidalMQSinkError(f"tidalmq sink: row {self.rows + i}: the 'body' column is {what}")
            topic = (topics[i] if topics is not None else None) or default_topic
            if topic not in checked:
                if not topic:
                    raise TidalMQSinkError(f"tidalmq sink: row {self.rows + i} has a null 'topic' and there is no "
                                           "option 'topic'")
                try:
                    check_topic_sendable(topic)
                except ValidationError as e:
                    raise TidalMQSinkError(f"tidalmq sink: row {self.rows + i}: topic {topic!r}: {e}") from None
                checked.add(topic)
            level = levels[i] if levels is not None else None
            deliver = delivers[i] if delivers is not None else None
            shard = shards[i] if shards is not None else None
            if deliver is None and not level and shard is None:  # the fast path: a batch entry, encoded here
                parts = []
                if tags is not None and tags[i] is not None:
                    parts.append(mc.encode_property(mc.TAGS, tags[i]))
                if keys is not None and keys[i]:
                    k = keys[i]
                    parts.append(mc.encode_property(mc.KEYS, k if isinstance(k, str) else " ".join(x for x in k if x)))
                if props is not None and props[i]:
                    parts.extend(mc.encode_property(pk, pv) for pk, pv in props[i] if pv is not None)
                plain.setdefault(topic, []).append((body, "".join(parts), uniq))
                continue
            kw: dict[str, Any] = {}
            if tags is not None and tags[i] is not None:
                kw["tags"] = tags[i]
            if keys is not None and keys[i] is not None:
                kw["keys"] = keys[i]
            p = dict(props[i]) if props is not None and props[i] else None
            if deliver is not None:
                ms = deliver // 1000 if deliver_us else deliver
                kw["deliver_time_ms"] = ms
                p = p or {}
                p[DELIVER_MS_PROPERTY] = str(ms)
            if level is not None and level > 0:
                kw["delay_level"] = level
            if uniq is not None:
                p = p or {}
                p["UNIQ_KEY"] = uniq
            try:
                msg = Message(topic, body, properties=p, **kw)
            except (ValueError, TypeError) as e:
                raise TidalMQSinkError(f"tidalmq sink: row {self.rows + i}: {e}") from None
            scheduled = deliver is not None or (level is not None and level > 0)
            if shard is not None:
                queues = await self.p.fetch_publish_queues(topic)
                mq = select_by_hash(queues, msg, str(shard))
                if scheduled:
                    self.scheduled += 1
                    self._ordered_send(mq, [msg])
                else:
                    ordered.setdefault(mq, []).append(msg)
            else:
                self.scheduled += 1
                self._spawn(self.p.send(msg), f"sending a scheduled message to topic {topic}")
            if len(self.inflight) >= self.opts.max_inflight:
                await self._wait_some()
        self.rows += n
        size = self.opts.batch_size
        for topic, entries in plain.items():
            for chunk in _entry_chunks(entries, size):
                self._spawn(self.p.send_encoded_batch(topic, chunk),
                            f"sending a batch of {len(chunk)} messages to topic {topic}")
                if len(self.inflight) >= self.opts.max_inflight:
                    await self._wait_some()
        for mq, msgs in ordered.items():
            for chunk in _chunks(msgs, size):
                self._ordered_send(mq, chunk)
                if len(self.inflight) >= self.opts.max_inflight:
                    await self._wait_some()
        self._raise()

    async def _add_plain(self, rb: Any) -> bool:
        """A batch of plain rows only (no schedule, no sharding key, every body and topic valid), encoded
        column at a time (``encode``); False (nothing sent) for any other batch, which goes row by row."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from tidalmq.client.validators import ValidationError, check_topic_sendable
        from tidalmq.spark import encode

        c, n = self.cols, rb.num_rows
        if n == 0:
            return True
        col = encode.column
        for name in ("deliverTime", "shardingKey"):
            k = col(rb, c.get(name))
            if k is not None and k.null_count != n:
                return False
        lv = col(rb, c.get("delayLevel"))
        if lv is not None and lv.null_count != n and pc.max(pc.fill_null(lv, 0)).as_py() > 0:
            return False
        bodies = rb.column(rb.schema.get_field_index(c["body"]))
        blen = pc.binary_length(bodies)
        if bodies.null_count or pc.min(blen).as_py() == 0 or pc.max(blen).as_py() > self.p.max_message_size:
            return False  # the row-by-row path names the bad row
        tc = col(rb, c.get("topic"))
        topics: list[str]
        if tc is None:
            if not self.opts.topic:
                return False
            topics = [self.opts.topic]
        else:
            tc = pc.fill_null(tc, self.opts.topic) if self.opts.topic else tc
            if tc.null_count or pc.min(pc.binary_length(tc)).as_py() == 0:
                return False
            topics = pc.unique(tc).to_pylist()
        for t in topics:
            if t not in self.checked_topics:
                try:
                    check_topic_sendable(t)
                except ValidationError:
                    return False
                self.checked_topics.add(t)
        if self.keys is not None:
            ids = encode.hex_ids(self.keys, np.arange(self.rows, self.rows + n, dtype=np.uint64), 8)
        else:
            prefix, c0 = self.p.bulk_ids.next_block(n)
            ids = encode.hex_ids(prefix, np.arange(c0 + 1, c0 + 1 + n, dtype=np.uint64) & 0xFFFF, 4)
        keys = col(rb, c.get("keys"))
        props = col(rb, c.get("properties"))
        parts = (bodies, col(rb, c.get("tags")), None if keys is None else encode.keys_text(keys),
                 None if props is None else encode.properties_text(props))
        groups: list[tuple[str, Any, Any]] = []
        if len(topics) == 1:
            groups.append((topics[0], parts, ids))
        else:
            for t in topics:
                mask = pc.equal(tc, t)
                groups.append((t, tuple(None if a is None else a.filter(mask) for a in parts),
                               ids[mask.to_numpy(zero_copy_only=False)]))
        encoded = []
        for t, (b, tg, ks, ps), gids in groups:
            try:
                encoded.append((t, encode.encode_messages(b.cast(pa.binary()), gids, tg, ks, ps), gids))
            except ValueError as e:
                raise TidalMQSinkError(f"tidalmq sink: batch at row {self.rows}: {e}") from None
        self.rows += n
        for t, enc, gids in encoded:
            for body, uniq in encode.chunks(enc, gids, self.opts.batch_size):
                self._spawn(self.p.send_encoded(t, body, uniq),
                            f"sending a batch of {uniq.count(',') + 1} messages to topic {t}")
                if len(self.inflight) >= self.opts.max_inflight:
                    await self._wait_some()
        self._raise()
        return True

    def _ordered_send(self, mq: Any, msgs: list[Any]) -> None:
        prev = self.queue_tail.get(mq)
        if len(msgs) == 1:
            def fn() -> Any:
                return self.p.send(msgs[0], queue=mq)
        else:
            def fn() -> Any:
                return self.p.send_batch(msgs, queue=mq)
        what = f"sending {len(msgs)} ordered message(s) to {mq.topic} queue {mq.broker_name}:{mq.queue_id}"
        self.queue_tail[mq] = self._spawn(self._after(prev, fn), what)

    async def _wait_some(self) -> None:
        if self.inflight:
            await asyncio.wait(set(self.inflight), return_when=asyncio.FIRST_COMPLETED)
        self._raise()

    async def flush(self) -> None:
        while self.inflight:
            await asyncio.wait(set(self.inflight))
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error


# A plain row as the sink encodes it: body, properties text without UNIQ_KEY, its deterministic key or None.
Entry = tuple[bytes, str, str | None]


def _entry_chunks(entries: list[Entry], size: int) -> Iterator[list[Entry]]:
    chunk: list[Entry] = []
    nbytes = 0
    for e in entries:
        b = len(e[0]) + len(e[1]) + 64
        if chunk and (len(chunk) >= size or nbytes + b > 1 << 20):
            yield chunk
            chunk, nbytes = [], 0
        chunk.append(e)
        nbytes += b
    if chunk:
        yield chunk


def _sink_producer_class() -> type:
    """A Producer that sends batches the sink encoded itself (``MessageDecoder.encodeMessages`` layout), with
    the producer's routing and (idempotent) retries: the per-row ``Message`` objects and their
    checks are what a high-rate sink cannot afford."""
    import struct

    from tidalmq.client import producer as _p
    from tidalmq.client import send_request as _sr
    from tidalmq.common import message as mc
    from tidalmq.common.msgid import UniqIdGenerator

    head = struct.Struct(">iiiii")  # totalsize, magic, bodycrc, flag, bodylen
    short = struct.Struct(">h")
    wait_props = mc.encode_properties({mc.WAIT_STORE_MSG_OK: "true"})

    class SinkProducer(_p.Producer):
        @property
        def bulk_ids(self) -> UniqIdGenerator:
            return self._ids  # the producer's own: one counter for every UNIQ_KEY it makes

        async def send_encoded(self, topic: str, body: bytes, uniq: str) -> Any:
            """A batch body ``encode.chunks`` made; ``uniq`` its comma-joined UNIQ_KEYs (the idempotent
            queue is chosen by them)."""
            prepared = _sr.PreparedSend(topic, body, 0, 0, wait_props, uniq, True, None)
            return await self._send_default(prepared, _p._MODE_SYNC, None)

        async def send_encoded_batch(self, topic: str, entries: list[Entry], *, queue: Any = None) -> Any:
            ids = [e[2] or "" for e in entries] if entries[0][2] is not None else self._ids.next_ids(len(entries))
            parts: list[bytes] = []
            for (body, props, _), uid in zip(entries, ids, strict=True):
                pb = (props + mc.encode_property(mc.UNIQ_KEY, uid)).encode()
                parts.append(head.pack(20 + len(body) + 2 + len(pb), 0, 0, 0, len(body)))
                parts.append(body)
                parts.append(short.pack(len(pb)))
                parts.append(pb)
            prepared = _sr.PreparedSend(topic, b"".join(parts), 0, 0, wait_props, ",".join(ids), True, None)
            if queue is not None:
                return await self._send_to(prepared, queue, None)
            return await self._send_default(prepared, _p._MODE_SYNC, None)

    return SinkProducer


def _chunks(msgs: list[Any], size: int) -> Iterator[list[Any]]:
    """Batches of at most ``size`` messages and about 1 MiB (the broker's limit is 4 MiB a request)."""
    chunk: list[Any] = []
    nbytes = 0
    for m in msgs:
        b = len(m.body) + 200
        if chunk and (len(chunk) >= size or nbytes + b > 1 << 20):
            yield chunk
            chunk, nbytes = [], 0
        chunk.append(m)
        nbytes += b
    if chunk:
        yield chunk


# The broker decides how far ahead a message may be scheduled (timerMaxDelaySec): the sink does not cap it.
_NO_CLIENT_DELAY_CAP_S = 1 << 40


async def _send_all(opts: WriteOptions, columns: dict[str, str], iterator: Iterator[Any],
                    keys: str | None = None) -> SinkCommitMessage:
    # idempotent: a send is retried on its queue through a broker blip until sendTimeoutMs, never on
    # another broker, so with deterministic keys the broker's de-duplication window sees every copy.
    producer = _sink_producer_class()(opts.producer_group, opts.nameserver, send_timeout=opts.send_timeout_s,
                                      retry_times_when_send_failed=opts.retries, idempotent=True,
                                      timer_max_delay_sec=_NO_CLIENT_DELAY_CAP_S)
    producer.instance.request_timeout = opts.request_timeout_s
    await producer.start()
    sender = _Sender(producer, opts, columns, keys)
    try:
        for rb in iterator:
            await sender.add(rb)
            await asyncio.sleep(0)
        await sender.flush()
    finally:
        for f in list(sender.inflight):
            f.cancel()
        await producer.shutdown()
    return SinkCommitMessage(sender.rows, sender.scheduled)
