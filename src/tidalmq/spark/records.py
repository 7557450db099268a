"""Pull-response bodies (stored CommitLog records) straight into Arrow columns.

The source's hot path: no ``MessageExt``, no per-row dicts or Rows. Each record is read through
``common.record.view_record`` (one ``struct`` unpack of its fixed fields, IPv4 or IPv6 hosts alike),
its fields are appended to one list per column, and the lists become one ``pyarrow.RecordBatch``
(``pa.array`` per column, the properties as a ``MapArray`` from flat key/value lists and offsets).
Needs pyarrow only, not pyspark.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.msgid import encode_offset_msg_id
from tidalmq.common.record import RecordError, view_record

COLUMNS = ("topic", "broker", "queueId", "queueOffset", "msgId", "tags", "keys", "properties", "body",
           "bornTimestamp", "storeTimestamp", "reconsumeTimes")

ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("broker", pa.string(), nullable=False),
    pa.field("queueId", pa.int32(), nullable=False),
    pa.field("queueOffset", pa.int64(), nullable=False),
    pa.field("msgId", pa.string(), nullable=False),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("body", pa.binary()),
    pa.field("bornTimestamp", pa.timestamp("us", tz="UTC")),
    pa.field("storeTimestamp", pa.timestamp("us", tz="UTC")),
    pa.field("reconsumeTimes", pa.int32(), nullable=False),
])


# Spark's Kafka source schema (``kafkaCompatibleSchema``): key = the KEYS property, value = the body,
# partition = the queue id, offset = the queue offset, timestamp = the born (producer) time, so timestampType
# is 0 (Kafka's CreateTime); headers (``includeHeaders``) = the properties, values as UTF-8 bytes.
KAFKA_TIMESTAMP_TYPE_CREATE_TIME = 0
_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
KAFKA_ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
])
KAFKA_ARROW_SCHEMA_HEADERS = KAFKA_ARROW_SCHEMA.append(pa.field("headers", pa.list_(_HEADER)))


def to_kafka(batch: pa.RecordBatch, include_headers: bool) -> pa.RecordBatch:
    """A batch of the native schema in Kafka's shape: column moves and casts, no per-row work."""
    n = batch.num_rows
    arrays = [
        batch.column("keys").cast(pa.binary()),
        batch.column("body"),
        batch.column("topic"),
        batch.column("queueId"),
        batch.column("queueOffset"),
        batch.column("bornTimestamp"),
        pa.array(np.full(n, KAFKA_TIMESTAMP_TYPE_CREATE_TIME, dtype=np.int32)),
    ]
    schema = KAFKA_ARROW_SCHEMA
    if include_headers:
        props = batch.column("properties")
        headers = pa.StructArray.from_arrays([props.keys, props.items.cast(pa.binary())], fields=list(_HEADER))
        arrays.append(pa.ListArray.from_arrays(props.offsets, headers, mask=props.is_null()))
        schema = KAFKA_ARROW_SCHEMA_HEADERS
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class Columns:
    """Column lists being filled for one partition; ``take()`` turns them into a RecordBatch."""

    __slots__ = ("broker", "topic", "qid", "qoff", "msgid", "tags", "keys", "pkeys", "pvals", "poffs", "body",
                 "born", "store", "reconsume", "last_offset", "schema")

    def __init__(self, broker: str, schema: pa.Schema | None = None) -> None:
        self.broker = broker
        self.schema = schema or ARROW_SCHEMA
        self._reset()
        self.last_offset = -1  # the queue offset of the last record seen (kept or filtered)

    def _reset(self) -> None:
        self.topic: list[str] = []
        self.qid: list[int] = []
        self.qoff: list[int] = []
        self.msgid: list[str] = []
        self.tags: list[str | None] = []
        self.keys: list[str | None] = []
        self.pkeys: list[str] = []
        self.pvals: list[str] = []
        self.poffs: list[int] = [0]
        self.body: list[bytes] = []
        self.born: list[int] = []
        self.store: list[int] = []
        self.reconsume: list[int] = []

    def __len__(self) -> int:
        return len(self.qoff)

    def add_body(self, body: bytes, lo: int, hi: int, tag_set: frozenset[str] | None = None) -> int:
        """Append the records of one pull body whose queue offset is in [lo, hi) (and whose tag is in
        ``tag_set``, if given). Returns the number of rows added. Raises ``RecordError`` for a record
        that does not decode."""
        n = len(body)
        pos = 0
        added = 0
        topic_l, qid_l, qoff_l, msgid_l = self.topic.append, self.qid.append, self.qoff.append, self.msgid.append
        tags_l, keys_l, body_l = self.tags.append, self.keys.append, self.body.append
        born_l, store_l, rec_l = self.born.append, self.store.append, self.reconsume.append
        pkeys, pvals, poffs = self.pkeys, self.pvals, self.poffs
        last_topic_raw = b""
        last_topic = ""
        while pos + 8 <= n:
            # A RecordView is a tuple in RecordView.ITEMS order: one unpack instead of a property call per field.
            (total, _magic, _crc, qid, _flag, qoff, phys, sysflag, born, _bh, _bp, store, sh, sp, reconsume, _prep,
             blen, _buf, _pos, body_at, topic_at, topic_len, props_at, props_len) = view_record(body, pos)
            rec_at = pos
            pos += total
            if qoff < lo or qoff >= hi:
                continue
            self.last_offset = qoff
            traw = body[topic_at : topic_at + topic_len]
            if traw != last_topic_raw:
                last_topic_raw, last_topic = traw, _text(traw, rec_at, "topic")
            tags = keys = uniq = None
            npk = len(pkeys)
            if props_len:
                try:
                    props = body[props_at : props_at + props_len].decode("utf-8")
                except UnicodeDecodeError:
                    raise RecordError(f"corrupt record at {rec_at}: properties are not UTF-8") from None
                for item in props.split(mc.PROPERTY_SEPARATOR):
                    if not item:
                        continue
                    k, _, val = item.partition(mc.NAME_VALUE_SEPARATOR)
                    pkeys.append(k)
                    pvals.append(val)
                    if k == "TAGS":
                        tags = val
                    elif k == "KEYS":
                        keys = val
                    elif k == "UNIQ_KEY":
                        uniq = val
            if tag_set is not None and tags not in tag_set:
                del pkeys[npk:], pvals[npk:]
                continue
            mbody = body[body_at : body_at + blen]
            if sysflag & sf.COMPRESSED_FLAG:
                try:
                    mbody = zlib.decompress(mbody)
                except zlib.error:
                    pass  # as MessageDecoder: a body that does not inflate is kept as it is
            poffs.append(len(pkeys))
            topic_l(last_topic)
            qid_l(qid)
            qoff_l(qoff)
            msgid_l(uniq or encode_offset_msg_id(sh, sp, phys))
            tags_l(tags)
            keys_l(keys)
            body_l(mbody)
            born_l(born)
            store_l(store)
            rec_l(reconsume)
            added += 1
        return added

    def take(self) -> pa.RecordBatch:
        """The rows gathered so far as one RecordBatch; the lists start over."""
        n = len(self.qoff)
        ts = pa.timestamp("us", tz="UTC")
        props = pa.MapArray.from_arrays(pa.array(self.poffs, pa.int32()), pa.array(self.pkeys, pa.string()),
                                        pa.array(self.pvals, pa.string()))
        arrays = [
            pa.array(self.topic, pa.string()),
            pa.array([self.broker] * n, pa.string()) if n else pa.array([], pa.string()),
            pa.array(self.qid, pa.int32()),
            pa.array(self.qoff, pa.int64()),
            pa.array(self.msgid, pa.string()),
            pa.array(self.tags, pa.string()),
            pa.array(self.keys, pa.string()),
            props,
            pa.array(self.body, pa.binary()),
            _millis_to_ts(self.born, ts),
            _millis_to_ts(self.store, ts),
            pa.array(self.reconsume, pa.int32()),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _text(raw: bytes, pos: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"corrupt record at {pos}: {what} is not UTF-8") from None


def _millis_to_ts(values: list[int], ts: pa.DataType) -> pa.Array:
    arr = np.asarray(values, dtype=np.int64) * 1000
    return pa.array(arr, type=ts)


def decode_bodies(pieces: Iterable[tuple[bytes, int, int]], broker: str,
                  tag_set: frozenset[str] | None = None) -> pa.RecordBatch:
    """All records of ``(body, lo, hi)`` pieces as one RecordBatch (tests, tools)."""
    cols = Columns(broker)
    for body, lo, hi in pieces:
        cols.add_body(body, lo, hi, tag_set)
    return cols.take()
