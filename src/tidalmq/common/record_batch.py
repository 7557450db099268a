"""The records of a SEND_BATCH_MESSAGE (``encode_batch_records``): a batch body (MessageDecoder's
encodeMessages layout) turned into stored records without copying the bodies, as a ``RecordBatch``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from itertools import repeat
from typing import final

import numpy as np

from tidalmq.common import sysflag as sf
from tidalmq.common.columns import gather_be
from tidalmq.common.message import (
    NAME_VALUE_SEPARATOR_BYTES,
    PROPERTY_SEPARATOR_BYTES,
    property_name_finder_bytes,
    property_run_pattern,
)
from tidalmq.common.record import (
    _I,
    _Q,
    DISPATCH_NAMES,
    DISPATCH_PROPERTIES,
    HEAD_DTYPE,
    MESSAGE_MAGIC_CODE,
    POS_BORNHOST,
    DispatchProperties,
    RecordError,
    _crc32,
)

# A batch item (MessageDecoder.encodeMessages): totalsize, magic, bodycrc, flag, bodylen, then the body,
# a 2-byte properties length and the properties.
_BATCH_ITEM_DTYPE = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("flag", ">i4"), ("body_len", ">i4")])
_AR20 = np.arange(20, dtype=np.int64)
# A batch's properties joined with this mark in front of each message's (``RecordBatch.joined_properties``): an
# empty name with an empty value, which no valid properties hold, ending with the separator the first name needs.
PROPERTIES_MARK = PROPERTY_SEPARATOR_BYTES + NAME_VALUE_SEPARATOR_BYTES * 2 + PROPERTY_SEPARATOR_BYTES
_DISPATCH_NAMES = frozenset(DISPATCH_NAMES)
_LAYOUT_NAMES_MAX = 32  # more properties a message than this: read message by message
# From this many messages on, a batch whose properties are all as long as each other is read as a byte matrix
# (``_fixed_width_layout``: a fixed cost a batch, then next to nothing a message) rather than by the regex (a
# search a message): below it the fixed cost is more than the regex's (docs/benchmarks.md, "Figures behind
# the code").
_FIXED_WIDTH_MIN = 128
# From this many messages on, a batch whose items are all as long as each other, with bodies all as long, is
# encoded as one matrix of whole records, a row each (``_packed_batch``: a numpy store a column block, no step
# a message but the body CRC), and written as one buffer; else as five pieces a record. Below 16 messages the
# matrix's fixed cost (about twenty numpy stores) is most of what it saves (docs/benchmarks.md, "Figures behind
# the code").
_PACKED_MIN = 16
# ... and whose items are at most this long: the matrix is a copy of the request's bodies, which the CommitLog
# makes anyway for a batch of small pieces (it joins them: _JOIN_BELOW in the store's CommitLog), but not for large
# bodies, which it writes from the request with pwritev.
_PACKED_ITEM_MAX = 4096


@dataclass(frozen=True, slots=True, eq=False)  # eq=False: ``rows`` is an array
class PropertyLayout:
    """A batch whose messages all carry the same property names in the same order, each name once and every
    pair ending with a separator (what one client's batch nearly always is): the names, and per name the
    column of its values, one a message. Found by one regex match a message, or where every message's
    properties are as long, as slices of a byte matrix (``batch_layout``); every
    check that reads names (the forbidden ones, the lite topic, the timer's) then reads them once a batch."""

    names: tuple[bytes, ...]
    columns: tuple[tuple[bytes, ...], ...]  # one per name, in ``names`` order
    # Read as a byte matrix (``_fixed_width_layout``): a row a message, its PROPERTIES_MARK then its
    # properties, and per name where its value lies in a row; None when read by the regex.
    rows: np.ndarray | None = None
    spans: tuple[tuple[int, int], ...] | None = None

    def column(self, name: bytes) -> tuple[bytes, ...] | None:
        try:
            return self.columns[self.names.index(name)]
        except ValueError:
            return None

    def digit_column(self, name: bytes) -> list[int] | None:
        """The values of ``name`` as integers, read from the byte matrix, for a caller that has checked they
        are all decimal digits, at most 18 of them; None for a layout read by the regex (or a name it lacks)."""
        if self.rows is None or self.spans is None or name not in self.names:
            return None
        a, b = self.spans[self.names.index(name)]
        weights = 10 ** np.arange(b - a - 1, -1, -1, dtype=np.int64)
        return ((self.rows[:, a:b].astype(np.int64) - 48) @ weights).tolist()

    def dispatch_found(self) -> list[DispatchProperties]:
        """Per message, what ``record.dispatch_properties`` finds in its properties."""
        named = [(name, col) for name, col in zip(self.names, self.columns, strict=True) if name in _DISPATCH_NAMES]
        n = len(self.columns[0])
        if not named:
            return [[] for _ in range(n)]
        return [list(pairs) for pairs in zip(*(zip(repeat(name, n), col, strict=True) for name, col in named), strict=True)]

    def select(self, keep: list[int]) -> PropertyLayout:
        return PropertyLayout(self.names, tuple(tuple(col[i] for i in keep) for col in self.columns),
                              None if self.rows is None else self.rows[keep], self.spans)


@functools.lru_cache(maxsize=64)
def _layout_pattern(names: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """One message's properties of the layout ``names``, after its mark; a group a value."""
    return property_run_pattern(PROPERTIES_MARK, names)


def batch_layout(joined: bytes, first: bytes | memoryview, n: int) -> PropertyLayout | None:
    """The layout of the ``n`` messages whose properties ``joined`` holds (each after a PROPERTIES_MARK),
    taken from the first message's (``first``); None unless every message has it.

    The matches are checked to tile ``joined`` (their lengths, from the values, add up to it) and the
    name/value separators to be exactly the marks' and the names': then no value holds one and no message's
    properties hold a mark of their own, so the n matches are the n messages, one each. Messages whose
    properties are all as long as the first's are read without the regex (``_fixed_width_layout``)."""
    parts = bytes(first).split(PROPERTY_SEPARATOR_BYTES)
    if parts[-1] or len(parts) - 1 > _LAYOUT_NAMES_MAX:
        return None  # the last pair lacks its separator (or there are too many to compile)
    names = tuple(p.split(NAME_VALUE_SEPARATOR_BYTES, 1)[0] for p in parts[:-1])
    k = len(names)
    if not k or not all(names) or len(set(names)) != k or joined.count(NAME_VALUE_SEPARATOR_BYTES) != n * (2 + k):
        return None
    width = len(PROPERTIES_MARK) + len(first)
    if n >= _FIXED_WIDTH_MIN and width * n == len(joined) and joined.count(PROPERTY_SEPARATOR_BYTES) == n * (2 + k):
        by_width = _fixed_width_layout(joined, n, width, parts[:-1], names)
        if by_width is not None:
            return by_width
    found = _layout_pattern(names).findall(joined)
    if len(found) != n:
        return None
    columns: tuple[tuple[bytes, ...], ...] = tuple(zip(*found, strict=True)) if k > 1 else (tuple(found),)
    fixed = len(PROPERTIES_MARK) + sum(map(len, names)) + 2 * k
    if n * fixed + sum(len(b"".join(col)) for col in columns) != len(joined):
        return None
    return PropertyLayout(names, columns)


def _fixed_width_layout(joined: bytes, n: int, width: int, pairs: list[bytes],
                        names: tuple[bytes, ...]) -> PropertyLayout | None:
    """``batch_layout`` when every message's properties are as long as the first's (a client's
    batch of fixed-length values: unique keys, deliver times): ``joined`` as an (n, width) byte matrix, each
    row checked against the first where it holds the mark, a name, or a separator, and each name's values
    read as one slice of columns. None when a row differs there.

    The caller has checked that both separators occur exactly as often as n copies of the first message's
    layout hold them: with every row holding them where the first does, no value holds either, and the
    rows are the messages (each mark's empty pair begins a row), so each value is where the first's is."""
    rows = np.frombuffer(joined, dtype=np.uint8).reshape(n, width)
    fixed_at: list[int] = list(range(len(PROPERTIES_MARK)))
    spans: list[tuple[int, int]] = []
    at = len(PROPERTIES_MARK)
    for pair, name in zip(pairs, names, strict=True):
        value_at = at + len(name) + 1
        fixed_at += range(at, value_at)  # the name and its name/value separator
        spans.append((value_at, at + len(pair)))
        at += len(pair)
        fixed_at.append(at)  # the separator that ends the pair
        at += 1
    cols = np.array(fixed_at, dtype=np.intp)
    if n > 1 and (rows[1:, cols] != rows[0, cols]).any():
        return None
    columns = tuple(tuple(np.ascontiguousarray(rows[:, a:b]).view(f"V{b - a}").ravel().tolist()) if b > a
                    else (b"",) * n for a, b in spans)
    return PropertyLayout(names, columns, rows, tuple(spans))


@functools.lru_cache(maxsize=16)
def _encoded_names(names: tuple[str, ...]) -> frozenset[bytes]:
    return frozenset(n.encode() for n in names)


@functools.lru_cache(maxsize=16)
def _property_names_pattern(names: tuple[str, ...]) -> re.Pattern[bytes]:
    """Matches any of ``names`` as a property name in ``RecordBatch.joined_properties()``: a name there
    always follows a separator and precedes a name/value one. Beginning with a literal lets re jump from
    separator to separator."""
    return property_name_finder_bytes(names)


@final  # lets ``type(x) is RecordBatch`` narrow both ways (the CommitLog put loop tells it from a list)
@dataclass(slots=True)
class RecordBatch:
    """The records of a SEND_BATCH_MESSAGE as the buffers that make them up, in order: per record its
    48-byte head, the part every record shares, and slices of the request body (nothing is copied).

    The fields only known at append time live in ``heads`` (QUEUEOFFSET, PHYSICALOFFSET: one numpy
    store each for the whole batch) and ``shared`` (STORETIMESTAMP, the same for the whole batch); the
    CommitLog patches them there and hands ``pieces`` to pwritev."""

    pieces: list[bytes | bytearray | memoryview]
    heads: np.ndarray  # HEAD_DTYPE, one per record (``pieces`` holds views of it)
    shared: bytearray  # born host+port | store timestamp | store host+port | reconsume | prepared offset
    sizes: np.ndarray  # int64: each record's length
    sysflag: int  # the same for every record (so are the host address lengths)
    # Per record, what ``dispatch_properties`` finds in its properties: read while the batch is encoded,
    # so dispatching the batch right after its append need not read the records back. None: made from
    # ``layout`` when asked (``dispatch_properties``); the reput reads the layout's columns instead.
    found: list[DispatchProperties] | None
    # Per record, its properties (a view, without the 2-byte length): kept by the encoder, which slices them
    # anyway, for the checks and the timer rewrite that read them next. None: read them from ``pieces``.
    item_props: list[memoryview] | None = None
    # Per record, its ConsumeQueue tag code when the rewrite that made it knows it (``redirect``: a parked
    # timer message's deliver time); None: the dispatch computes it from ``dispatch_properties``.
    tag_codes: list[int] | None = None
    joined_props: bytes | None = None  # ``joined_properties()``, once made
    # The client's properties as columns when every record has the same names (``batch_layout``); kept by
    # ``redirect``, which appends the same names to every record (they describe the client's part).
    layout: PropertyLayout | None = None
    layout_is_all: bool = True  # False after ``redirect``: the records' properties hold more names
    # Every record whole, a row each, when all are as long (``_packed_batch``): ``pieces`` is then its one
    # buffer, ``heads`` a view of its first 48 columns, and each row holds a copy of ``shared`` (patched
    # with it: ``patch_shared``). ``topic_at`` / ``props_at``: the columns where a row's topic (its length
    # byte) and its properties (their 2-byte length) begin. None: five pieces a record.
    packed: np.ndarray | None = None
    topic_at: int = 0
    props_at: int = 0
    # The bytes of record CRC trailer (common/record_batch_crc.py) at the end of each packed row's
    # properties: not the client's, so ``item_properties`` leaves them out. 0: none reserved.
    trailer: int = 0
    crc_reserved: bool = False

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        return int(self.sizes.sum())

    @property
    def starts(self) -> np.ndarray:
        """Where each record begins, relative to the first."""
        return np.cumsum(self.sizes) - self.sizes

    @property
    def dispatch_properties(self) -> list[DispatchProperties]:
        if self.found is None:
            assert self.layout is not None
            self.found = self.layout.dispatch_found()
        return self.found

    def item_properties(self) -> list[memoryview]:
        """Each record's properties (without their 2-byte length)."""
        if self.item_props is None:
            if self.packed is not None:
                data, size, at = memoryview(self.pieces[0]), self.packed.shape[1], self.props_at + 2
                self.item_props = [data[a + at : a + size - self.trailer] for a in range(0, len(data), size)]
            else:
                self.item_props = [memoryview(pm)[2:] for pm in self.pieces[4::5]]
        return self.item_props

    def packed_properties(self) -> np.ndarray | None:
        """Each record's properties (without their 2-byte length), a row each, when the batch is packed."""
        return None if self.packed is None else self.packed[:, self.props_at + 2 : self.packed.shape[1] - self.trailer]

    def patch_shared(self, at: int, data: bytes) -> None:
        """Write ``data`` at ``at`` in the part every record shares (the CommitLog's STORETIMESTAMP), in
        every row too when the batch is packed."""
        self.shared[at : at + len(data)] = data
        if self.packed is not None:
            self.packed[:, POS_BORNHOST + at : POS_BORNHOST + at + len(data)] = np.frombuffer(data, dtype=np.uint8)

    def pack(self, rows: np.ndarray, topic_at: int, props_at: int) -> None:
        """Hold ``rows`` (a record each, all as long) as the batch's records."""
        self.packed, self.topic_at, self.props_at = rows, topic_at, props_at
        self.pieces = [rows.reshape(-1).data]
        self.heads = rows[:, :POS_BORNHOST].view(HEAD_DTYPE).reshape(len(rows))

    def unpack(self) -> None:
        """Five pieces a record again (views of the rows; the shared part is ``shared`` itself), for a
        change that leaves the records of different lengths."""
        rows = self.packed
        assert rows is not None
        data, size = memoryview(self.pieces[0]), rows.shape[1]
        ta, pa, shared = self.topic_at, self.props_at, self.shared
        pieces: list[bytes | bytearray | memoryview] = []
        for a in range(0, len(data), size):
            pieces += (data[a : a + POS_BORNHOST], shared, data[a + POS_BORNHOST + len(shared) : a + ta],
                       data[a + ta : a + pa], data[a + pa : a + size])
        self.pieces, self.packed = pieces, None

    def joined_properties(self) -> bytes:
        """Every record's properties, each after a PROPERTIES_MARK, in one buffer: searched once for the
        names of a whole batch (a property's name always follows a separator, and values hold none)."""
        if self.joined_props is None:
            self.joined_props = PROPERTIES_MARK + PROPERTIES_MARK.join(self.item_properties())
        return self.joined_props

    def first_carried(self, names: tuple[str, ...]) -> str | None:
        """The first of ``names`` (in record order) that one of the records carries as a property, or None."""
        if self.layout is not None and self.layout_is_all:
            wanted = _encoded_names(names)
            return next((n.decode() for n in self.layout.names if n in wanted), None)
        found = _property_names_pattern(names).search(self.joined_properties())
        return None if found is None else found.group(1).decode()

    def carries(self, names: tuple[str, ...]) -> bool:
        """Whether one of the records carries a property named in ``names``."""
        return self.first_carried(names) is not None

    def redirect(self, topic: str, queue_id: int, properties: list[bytes] | np.ndarray,
                 dispatch_properties: list[DispatchProperties] | None, tag_codes: list[int] | None = None) -> None:
        """Store every record in ``topic`` / ``queue_id`` with new properties, one per record, each with
        its 2-byte length in front (the timer rewrite of a batch: each message parked in the timer topic
        with its own deliver time). Only the topic and properties pieces change; bodies stay views of the
        request. ``dispatch_properties``: what ``record.dispatch_properties`` finds in the new properties,
        as the caller knows them (nothing is read again; None: the client's, as ``layout`` holds them, when
        the new properties append only names the dispatch reads from ``tag_codes``); ``tag_codes``: each
        record's ConsumeQueue tag code in ``topic``, where the caller knows it: the dispatch takes it as it
        is, and the properties it comes from (the timer topic's TIMER_OUT_MS) may be left out of
        ``dispatch_properties``. ``properties`` may be a uint8 matrix, a record's properties a row (all as
        long): a packed batch then stays packed."""
        n = len(self)
        if len(properties) != n:
            raise ValueError(f"{len(properties)} properties for {n} records")
        if dispatch_properties is None:
            if self.layout is None:
                raise ValueError("no dispatch properties given and no layout to take them from")
        elif len(dispatch_properties) != n:
            raise ValueError(f"{len(dispatch_properties)} dispatch properties for {n} records")
        if tag_codes is not None and len(tag_codes) != n:
            raise ValueError(f"{len(tag_codes)} tag codes for {n} records")
        topic_b = topic.encode("utf-8")
        if len(topic_b) > 127:
            raise RecordError(f"topic too long for the v1 record: {len(topic_b)} bytes")
        topic_part = bytes([len(topic_b)]) + topic_b
        if self.packed is not None and not isinstance(properties, np.ndarray) and n \
                and len(set(map(len, properties))) == 1:  # all as long (parked ones whose deliver times are)
            properties = np.frombuffer(b"".join(properties), dtype=np.uint8).reshape(n, len(properties[0]))
        if isinstance(properties, np.ndarray) and properties.shape[1] > 32769:
            raise RecordError(f"properties too long: {properties.shape[1] - 2} bytes > 32767")
        if isinstance(properties, np.ndarray) and self.packed is not None:
            rows, ta = self.packed, self.topic_at
            out = np.empty((n, ta + len(topic_part) + properties.shape[1]), dtype=np.uint8)
            out[:, :ta] = rows[:, :ta]
            out[:, ta : ta + len(topic_part)] = np.frombuffer(topic_part, dtype=np.uint8)
            out[:, ta + len(topic_part) :] = properties
            self.pack(out, ta, ta + len(topic_part))
            new_sizes = np.full(n, out.shape[1], dtype=np.int64)
        else:
            if isinstance(properties, np.ndarray):
                data, step = properties.tobytes(), properties.shape[1]
                properties = [data[a : a + step] for a in range(0, len(data), step)]
            if self.packed is not None:
                self.unpack()
            new_lens = np.fromiter(map(len, properties), dtype=np.int64, count=n)
            if (new_lens > 32769).any():
                i = int(np.argmax(new_lens > 32769))
                raise RecordError(f"properties too long: {len(properties[i]) - 2} bytes > 32767")
            pieces = self.pieces
            old_lens = (np.fromiter(map(len, pieces[3::5]), dtype=np.int64, count=n)
                        + np.fromiter(map(len, pieces[4::5]), dtype=np.int64, count=n))
            pieces[3::5] = [topic_part] * n
            pieces[4::5] = properties
            new_sizes = self.sizes + (new_lens + len(topic_part) - old_lens)
        self.item_props = self.joined_props = None
        self.layout_is_all = False
        if dispatch_properties is not None:
            self.found = dispatch_properties
            self.layout = None
        self.tag_codes = tag_codes
        self.sizes = new_sizes
        self.heads["total"] = self.sizes
        self.heads["queue_id"] = queue_id

    def select(self, keep: list[int]) -> RecordBatch:
        """The records at the indices ``keep``, in that order, as a batch of their own (bodies stay
        views of the request; heads and the shared part are copied: appending one batch never patches
        the other's)."""
        shared = bytearray(self.shared)
        pieces: list[bytes | bytearray | memoryview] = []
        if self.packed is not None:
            rows = self.packed[keep]
            heads = rows[:, :POS_BORNHOST].view(HEAD_DTYPE).reshape(len(keep))
        else:
            rows = None
            heads = self.heads[keep].copy()
            view = heads.view("u1").data
            for j, i in enumerate(keep):
                p = 5 * i
                pieces += (view[48 * j : 48 * j + 48], shared, *self.pieces[p + 2 : p + 5])
        props, codes, found, layout = self.item_props, self.tag_codes, self.found, self.layout
        batch = RecordBatch(pieces, heads, shared, self.sizes[keep].copy(), self.sysflag,
                            None if found is None else [found[i] for i in keep],
                            None if props is None else [props[i] for i in keep],
                            None if codes is None else [codes[i] for i in keep],
                            layout=None if layout is None else layout.select(keep), layout_is_all=self.layout_is_all,
                            trailer=self.trailer, crc_reserved=self.crc_reserved)
        if rows is not None:
            batch.pack(rows, self.topic_at, self.props_at)
        return batch

    def records(self) -> list[bytes]:
        """One buffer per record (copies; for tools and tests)."""
        data = b"".join(self.pieces)
        return [data[a : a + n] for a, n in zip(self.starts.tolist(), self.sizes.tolist(), strict=True)]


def encode_batch_records(
    batch_body: bytes | memoryview,
    *,
    topic: str,
    queue_id: int,
    sysflag: int,
    born_timestamp: int,
    born_host: bytes,
    born_port: int,
    store_host: bytes,
    store_port: int,
    reconsume_times: int = 0,
    forbidden_properties: tuple[str, ...] = (),
) -> RecordBatch:
    """Turn a SEND_BATCH_MESSAGE body into stored records without copying the bodies.

    One pass walks the items' TOTALSIZE chain; their fixed fields are then read and checked with numpy,
    and the heads built column by column; a last pass computes each body's CRC and lists the pieces.
    Raises ``RecordError`` for a malformed body, or for a message carrying one of
    ``forbidden_properties`` (the error names it).
    """
    topic_b = topic.encode("utf-8")
    if len(topic_b) > 127:
        raise RecordError(f"topic too long for the v1 record: {len(topic_b)} bytes")
    sysflag &= ~(sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG)
    if len(born_host) == 16:
        sysflag |= sf.BORNHOST_V6_FLAG
    if len(store_host) == 16:
        sysflag |= sf.STOREHOSTADDRESS_V6_FLAG
    shared = bytearray(born_host + _I.pack(born_port) + _Q.pack(0) + store_host + _I.pack(store_port)
                       + _I.pack(reconsume_times) + _Q.pack(0))
    topic_part = bytes([len(topic_b)]) + topic_b
    mv = memoryview(batch_body).cast("B")
    n = len(mv)
    batch = None
    if n >= 22 * _PACKED_MIN:
        (first_total,) = _I.unpack_from(mv, 0)
        if 22 <= first_total <= _PACKED_ITEM_MAX and n % first_total == 0 and n // first_total >= _PACKED_MIN:
            batch = _packed_batch(mv, first_total, shared, topic_part, queue_id, sysflag, born_timestamp)
    if batch is None:
        batch = _pieces_batch(mv, shared, topic_part, queue_id, sysflag, born_timestamp)
    if forbidden_properties and (name := batch.first_carried(forbidden_properties)) is not None:
        raise RecordError(f"the property {name} is not supported for batched messages")
    return batch


def _heads(count: int, sizes: int | np.ndarray, flags: np.ndarray, queue_id: int, sysflag: int,
           born_timestamp: int) -> np.ndarray:
    """The batch's 48-byte record heads as columns: what the items and the request give (the body CRC is
    the caller's to fill; QUEUEOFFSET and PHYSICALOFFSET the CommitLog's, at append)."""
    heads = np.zeros(count, dtype=HEAD_DTYPE)
    heads["total"] = sizes
    heads["magic"] = MESSAGE_MAGIC_CODE
    heads["queue_id"] = queue_id
    heads["flag"] = flags
    heads["sysflag"] = sysflag
    heads["born"] = born_timestamp
    return heads


def _dispatch_found(props: list[memoryview]) -> list[DispatchProperties]:
    """What the dispatch reads in each message's properties, for a batch whose properties share no layout:
    a search a message (record.dispatch_properties, inlined)."""
    find = DISPATCH_PROPERTIES.findall
    separator = PROPERTY_SEPARATOR_BYTES
    return [find(separator + item) for item in props]


def _packed_batch(mv: memoryview, item_size: int, shared: bytearray, topic_part: bytes, queue_id: int,
                  sysflag: int, born_timestamp: int) -> RecordBatch | None:
    """The batch as one matrix of records (``RecordBatch.packed``) when its items are all ``item_size``
    long with bodies all as long as each other; None when they are not (or are malformed: the piece by
    piece encoder then says how). A numpy store a column block; one step a message, its body's CRC."""
    n = len(mv)
    count = n // item_size
    m = np.frombuffer(mv, dtype=np.uint8).reshape(count, item_size)
    items = m[:, :20].view(_BATCH_ITEM_DTYPE).reshape(count)
    body_len = int(items["body_len"][0])
    p = 20 + body_len  # where an item's 2-byte properties length is
    if not (0 <= body_len and p + 2 <= item_size and (items["total"] == item_size).all()
            and (items["body_len"] == body_len).all()
            and (((m[:, p].astype(np.int64) << 8) | m[:, p + 1]) == item_size - p - 2).all()):
        return None
    topic_at = POS_BORNHOST + len(shared) + 4 + body_len
    props_at = topic_at + len(topic_part)
    size = props_at + item_size - p
    crc32 = _crc32
    crcs = np.array([crc32(mv[a : a + body_len]) for a in range(20, n, item_size)], dtype=np.int64) & 0x7FFFFFFF
    heads = _heads(count, size, items["flag"], queue_id, sysflag, born_timestamp)
    heads["crc"] = crcs
    rows = np.empty((count, size), dtype=np.uint8)
    rows[:, :POS_BORNHOST] = heads.view(np.uint8).reshape(count, POS_BORNHOST)
    rows[:, POS_BORNHOST : POS_BORNHOST + len(shared)] = np.frombuffer(shared, dtype=np.uint8)
    rows[:, POS_BORNHOST + len(shared) : topic_at] = m[:, 16:p]  # BODYLEN, BODY
    rows[:, topic_at:props_at] = np.frombuffer(topic_part, dtype=np.uint8)
    rows[:, props_at:] = m[:, p:]  # PROPLEN, PROPERTIES
    marked = np.empty((count, len(PROPERTIES_MARK) + item_size - p - 2), dtype=np.uint8)
    marked[:, : len(PROPERTIES_MARK)] = np.frombuffer(PROPERTIES_MARK, dtype=np.uint8)
    marked[:, len(PROPERTIES_MARK) :] = m[:, p + 2 :]
    joined = marked.tobytes()
    batch = RecordBatch([], heads, shared, np.full(count, size, dtype=np.int64), sysflag, None, None,
                        joined_props=joined)
    batch.pack(rows, topic_at, props_at)
    batch.layout = batch_layout(joined, mv[p + 2 : item_size], count)
    if batch.layout is None:
        batch.found = _dispatch_found(batch.item_properties())
    return batch


def _pieces_batch(mv: memoryview, shared: bytearray, topic_part: bytes, queue_id: int, sysflag: int,
                  born_timestamp: int) -> RecordBatch:
    """The batch as five pieces a record: a walk along the items' TOTALSIZE chain, their fixed fields read
    and checked with numpy, the heads built column by column, then a pass that computes each body's CRC and
    lists the pieces."""
    n = len(mv)
    starts: list[int] = []
    add = starts.append
    total_at = _I.unpack_from
    pos = 0
    while pos < n:
        if pos + 20 > n:
            raise RecordError("batch body truncated")
        total = total_at(mv, pos)[0]
        if total < 22 or pos + total > n:
            raise RecordError(f"batch message at {pos} has an illegal size")
        add(pos)
        pos += total
    count = len(starts)
    s = np.array(starts, dtype=np.int64)
    u8 = np.frombuffer(mv, dtype=np.uint8)
    items = u8[s[:, None] + _AR20].view(_BATCH_ITEM_DTYPE).ravel()
    total = items["total"].astype(np.int64)
    body_len = items["body_len"].astype(np.int64)
    bad = (body_len < 0) | (body_len + 22 > total)
    if bad.any():
        raise RecordError(f"batch message at {starts[int(np.argmax(bad))]} has an illegal size")
    props_at = s + 20 + body_len  # the 2-byte properties length
    bad = props_at + 2 + gather_be(u8, props_at, 2, signed=False) != s + total
    if bad.any():
        raise RecordError(f"batch message at {starts[int(np.argmax(bad))]} has an illegal properties length")
    # A record takes the item from BODYLEN on, with the topic inserted before PROPLEN.
    sizes = total + (48 + len(shared) + len(topic_part) - 16)
    heads = _heads(count, sizes, items["flag"], queue_id, sysflag, born_timestamp)
    head_view = heads.view(np.uint8).data  # the bytes' memoryview (numpy's stubs give 3.12+ only __buffer__)
    crcs: list[int] = []
    crc_add = crcs.append
    crc32 = _crc32
    pieces: list[bytes | bytearray | memoryview] = []
    props: list[memoryview] = []
    props_add = props.append
    for h, a, p, e in zip(range(0, 48 * count, 48), starts, props_at.tolist(), (s + total).tolist(), strict=True):
        crc_add(crc32(mv[a + 20 : p]))
        pm = mv[p:e]
        pieces += (head_view[h : h + 48], shared, mv[a + 16 : p], topic_part, pm)
        props_add(pm[2:])
    heads["crc"] = np.array(crcs, dtype=np.int64) & 0x7FFFFFFF
    # The properties read once for the batch: one match a message when they share a layout, else a search
    # a message for what the dispatch reads.
    joined = PROPERTIES_MARK + PROPERTIES_MARK.join(props)
    layout = batch_layout(joined, props[0], count) if count else None
    found = _dispatch_found(props) if layout is None else None
    return RecordBatch(pieces, heads, shared, sizes, sysflag, found, props, joined_props=joined, layout=layout)
