"""Pull-response bodies (stored CommitLog records) straight into Arrow columns.

The source's hot path: no ``MessageExt``, no per-row dicts or Rows. ``Columns`` walks each pull body's
TOTALSIZE chain, and decodes a batch of records column by column: their fixed fields with numpy
(``common.record_columns``, the layout of ``common.record.view_record`` for IPv4 and IPv6 hosts alike),
bodies, topics and property texts as Arrow columns taken out of the bodies' own bytes, the properties split
at their separators for all records at once into a ``MapArray``, and the tags, keys and ids looked up in it.
``RowColumns`` decodes one record at a time (a batch with a compressed body, or one that does not decode,
goes through it: its errors name the record). Needs pyarrow only, not pyspark.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.columns import gather_be
from tidalmq.common.msgid import encode_offset_msg_id
from tidalmq.common.record import _V6_HOSTS, MIN_RECORD_SIZE, RecordError, view_record
from tidalmq.common.record_columns import RecordColumns, layout_offsets, record_columns

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


class RowColumns:
    """Column lists filled one record at a time; ``take()`` turns them into a RecordBatch. What
    ``Columns`` falls back to for a batch with a compressed body or a record that does not decode: its
    errors name the record."""

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
                  tag_set: frozenset[str] | None = None, *, one_by_one: bool = False) -> pa.RecordBatch:
    """All records of ``(body, lo, hi)`` pieces as one RecordBatch (tests, tools); ``one_by_one``: through
    ``RowColumns``."""
    cols: Columns | RowColumns = RowColumns(broker) if one_by_one else Columns(broker)
    for body, lo, hi in pieces:
        cols.add_body(body, lo, hi, tag_set)
    return cols.take()


_TOTAL_AND_QOFF = struct.Struct(">i16xq")  # TOTALSIZE, and QUEUEOFFSET 20 bytes into the record
_OFF_RECONSUME = layout_offsets("reconsume")
_ITEM_SEP = ord(mc.PROPERTY_SEPARATOR)
_NAME_SEP = ord(mc.NAME_VALUE_SEPARATOR)


class _NotPlain(Exception):
    """A batch the column-wise decode leaves to RowColumns (text that is not UTF-8, a batch of 2 GiB)."""


def _pieces(data: pa.Buffer, bounds: np.ndarray, kind: pa.DataType) -> pa.Array:
    """The ``len(bounds) - 1`` pieces ``data[bounds[i] : bounds[i + 1]]`` as one Arrow column over ``data``:
    no copy (``bounds`` ascending)."""
    return pa.Array.from_buffers(kind, len(bounds) - 1, [None, pa.py_buffer(bounds.astype(np.int32)), data])


def _every(pieces: pa.Array, first: int, step: int, n: int) -> pa.Array:
    """Pieces ``first``, ``first + step`` … (n of them) copied into a column of their own (Arrow's take);
    text is checked to be UTF-8."""
    out = pieces.take(pa.array(np.arange(first, first + step * n, step, dtype=np.int64)))
    if pa.types.is_string(out.type):
        try:
            out.validate(full=True)
        except pa.ArrowInvalid:
            raise _NotPlain from None
    return out


def _spans(data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, kind: pa.DataType) -> pa.Array:
    """``data[starts[i] : starts[i] + lengths[i]]`` of ascending, disjoint spans as one column: the spans and
    the gaps between them are the pieces of one column over ``data``, and every other piece is taken."""
    n = len(starts)
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = starts + lengths
    return _every(_pieces(data, bounds, kind), 0, 2, n)


def _properties(data: pa.Buffer, at: np.ndarray, length: np.ndarray) -> pa.MapArray:
    """Every record's properties (name-value items in the codec's separators, empty items skipped, a value
    running to the item's end) as one MapArray, with numpy over all records at once: the items of all
    records are split at their separators, with each record's end a boundary as well (a record whose text
    does not end with a separator does not run into the next)."""
    props = _spans(data, at, length, pa.binary())
    n = len(at)
    rec_offs = np.frombuffer(props.buffers()[1], dtype=np.int32, count=n + 1).astype(np.int64)
    text = props.buffers()[2]
    p = np.frombuffer(text, dtype=np.uint8, count=int(rec_offs[-1])) if text is not None else np.zeros(0, np.uint8)
    ends = rec_offs[1:]
    sep = np.flatnonzero(p == _ITEM_SEP)
    nonempty = ends > rec_offs[:-1]
    rec_end = ends[nonempty & (p[np.maximum(ends - 1, 0)] != _ITEM_SEP)] if len(p) else ends[:0]
    # item ends (exclusive) and where the next item starts: a separator is skipped, a record's end is not;
    # at an equal position the record's end comes first (it closes the earlier record's item)
    item_end = np.concatenate([sep, rec_end])
    next_start = np.concatenate([sep + 1, rec_end])
    order = np.argsort(item_end * 2 + np.concatenate([np.ones_like(sep), np.zeros_like(rec_end)]), kind="stable")
    item_end, next_start = item_end[order], next_start[order]
    item_start = np.zeros_like(item_end)
    item_start[1:] = next_start[:-1]
    keep = item_end > item_start
    item_start, item_end = item_start[keep], item_end[keep]
    record = np.searchsorted(ends, item_start, side="right")
    map_offs = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(record, minlength=n), out=map_offs[1:])
    names = np.flatnonzero(p == _NAME_SEP)
    first = np.searchsorted(names, item_start)
    split = names[np.minimum(first, len(names) - 1)] if len(names) else item_end
    has = (first < len(names)) & (split < item_end)
    name_end = np.where(has, split, item_end)
    value_start = np.where(has, split + 1, item_end)
    m = len(item_start)
    if m == 0:
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(map_offs, pa.int32()), empty, empty)
    # per item: name, its separator, value, the gap to the next item: ascending, so one column over the text
    bounds = np.column_stack([item_start, name_end, value_start, item_end]).ravel()
    pieces = _pieces(text, bounds, pa.string())
    return pa.MapArray.from_arrays(pa.array(map_offs, pa.int32()), _every(pieces, 0, 4, m), _every(pieces, 2, 4, m))


class Columns:
    """The records of one partition's pull bodies, gathered by ``add_body`` (a walk of their TOTALSIZE chain)
    and decoded column-wise by ``take()``: numpy over all records at once (``record_columns``, one gather a
    field, the bodies, topics and properties as Arrow buffers), no Python object per row. A batch with a
    compressed body or a record that does not decode goes through ``RowColumns`` instead."""

    __slots__ = ("broker", "schema", "last_offset", "_pieces", "_starts", "_size", "_tag_set")

    def __init__(self, broker: str, schema: pa.Schema | None = None) -> None:
        self.broker = broker
        self.schema = schema or ARROW_SCHEMA
        self._tag_set: frozenset[str] | None = None
        self._reset()
        self.last_offset = -1  # the queue offset of the last record seen (kept or filtered)

    def _reset(self) -> None:
        self._pieces: list[tuple[bytes, int, int]] = []
        self._starts: list[int] = []  # where each record in range starts, in the bodies laid end to end
        self._size = 0

    def __len__(self) -> int:
        return len(self._starts)

    def add_body(self, body: bytes, lo: int, hi: int, tag_set: frozenset[str] | None = None) -> int:
        """Take the records of one pull body whose queue offset is in [lo, hi); those whose tag is not in
        ``tag_set`` (if given) are dropped by ``take()``. Returns the number of records in range. Raises
        ``RecordError`` for a record whose TOTALSIZE does not fit the body."""
        n = len(body)
        pos = 0
        added = 0
        base = self._size
        add = self._starts.append
        unpack = _TOTAL_AND_QOFF.unpack_from
        while pos + 8 <= n:
            if pos + _TOTAL_AND_QOFF.size > n:
                view_record(body, pos)  # raises what is wrong with it
            total, qoff = unpack(body, pos)
            if total < MIN_RECORD_SIZE or pos + total > n:
                view_record(body, pos)
                raise RecordError(f"corrupt record at {pos}: TOTALSIZE {total}")
            if lo <= qoff < hi:
                add(base + pos)
                self.last_offset = qoff
                added += 1
            pos += total
        self._pieces.append((body, lo, hi))
        self._size += n
        self._tag_set = tag_set
        return added

    def take(self) -> pa.RecordBatch:
        """The records gathered so far as one RecordBatch; the gathering starts over."""
        pieces, starts, tag_set = self._pieces, self._starts, self._tag_set
        self._reset()
        if not starts:
            return RowColumns(self.broker, self.schema).take()
        buf = pieces[0][0] if len(pieces) == 1 else b"".join(p[0] for p in pieces)
        u8 = np.frombuffer(buf, dtype=np.uint8)  # a column's offsets are int32: a batch of 2 GiB goes row by row
        s = np.array(starts, dtype=np.int64)
        rc = record_columns(u8, s)
        try:
            if not rc.ok.all() or (rc.head["sysflag"] & sf.COMPRESSED_FLAG).any() or len(buf) >= 1 << 31:
                raise _NotPlain
            batch, tags = self._batch(buf, u8, s, rc)
        except _NotPlain:
            rows = RowColumns(self.broker, self.schema)
            for body, lo, hi in pieces:
                rows.add_body(body, lo, hi, tag_set)
            return rows.take()
        if tag_set is not None:
            batch = batch.filter(pc.is_in(tags, value_set=pa.array(sorted(tag_set), pa.string())))
        return batch

    def _batch(self, buf: bytes, u8: np.ndarray, s: np.ndarray, rc: RecordColumns) -> tuple[pa.RecordBatch, pa.Array]:
        head = rc.head
        n = len(s)
        hosts = head["sysflag"].astype(np.int64) & _V6_HOSTS
        data = pa.py_buffer(buf)
        props = _properties(data, rc.props_at, rc.props_len)
        tags = pc.map_lookup(props, pa.scalar("TAGS", pa.string()), "last")
        keys = pc.map_lookup(props, pa.scalar("KEYS", pa.string()), "last")
        msgid = pc.map_lookup(props, pa.scalar("UNIQ_KEY", pa.string()), "last")
        no_id = pc.fill_null(pc.equal(msgid, ""), True)
        if pc.any(no_id).as_py():  # no UNIQ_KEY (or an empty one): the offset id, from the store host and offset
            ids = msgid.to_pylist()
            for i in np.flatnonzero(no_id.to_numpy(zero_copy_only=False)).tolist():
                v = view_record(buf, int(s[i]))
                ids[i] = encode_offset_msg_id(v[12], v[13], v[6])
            msgid = pa.array(ids, pa.string())
        ts = pa.timestamp("us", tz="UTC")
        arrays = [
            _spans(data, rc.topic_at, rc.topic_len, pa.string()),
            pa.array([self.broker] * n, pa.string()),
            pa.array(head["queue_id"].astype(np.int32), pa.int32()),
            pa.array(head["queue_offset"].astype(np.int64), pa.int64()),
            msgid,
            tags,
            keys,
            props,
            _spans(data, rc.body_at, rc.body_len, pa.binary()),
            pa.array(head["born"].astype(np.int64) * 1000, ts),
            pa.array(rc.store_ts * 1000, ts),
            pa.array(gather_be(u8, s + _OFF_RECONSUME[hosts], 4).astype(np.int32), pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema), tags
