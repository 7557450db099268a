"""The records of a SEND_BATCH_MESSAGE (``encode_batch_records``): a batch body (MessageDecoder's
encodeMessages layout) turned into stored records without copying the bodies, as a ``RecordBatch``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import final

import numpy as np

from tidalmq.common import sysflag as sf
from tidalmq.common.columns import gather_be
from tidalmq.common.record import (
    _I,
    _Q,
    DISPATCH_PROPERTIES,
    HEAD_DTYPE,
    MESSAGE_MAGIC_CODE,
    DispatchProperties,
    RecordError,
    _crc32,
)

# A batch item (MessageDecoder.encodeMessages): totalsize, magic, bodycrc, flag, bodylen, then the body,
# a 2-byte properties length and the properties.
_BATCH_ITEM_DTYPE = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("flag", ">i4"), ("body_len", ">i4")])
_AR20 = np.arange(20, dtype=np.int64)


@functools.lru_cache(maxsize=16)
def _property_names_pattern(names: tuple[str, ...]) -> re.Pattern[bytes]:
    """Matches any of ``names`` as a property name in ``RecordBatch.joined_properties()``: a name there
    always follows a separator and precedes a name/value one. Beginning with a literal lets re jump from
    separator to separator."""
    alternatives = b"|".join(re.escape(n.encode()) for n in names)
    return re.compile(rb"\x02(" + alternatives + rb")\x01")


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
    # so dispatching the batch right after its append need not read the records back.
    dispatch_properties: list[DispatchProperties]
    # Per record, its properties (a view, without the 2-byte length): kept by the encoder, which slices them
    # anyway, for the checks and the timer rewrite that read them next. None: read them from ``pieces``.
    item_props: list[memoryview] | None = None
    # Per record, its ConsumeQueue tag code when the rewrite that made it knows it (``redirect``: a parked
    # timer message's deliver time); None: the dispatch computes it from ``dispatch_properties``.
    tag_codes: list[int] | None = None
    joined_props: bytes | None = None  # ``joined_properties()``, once made

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        return int(self.sizes.sum())

    @property
    def starts(self) -> np.ndarray:
        """Where each record begins, relative to the first."""
        return np.cumsum(self.sizes) - self.sizes

    def item_properties(self) -> list[memoryview]:
        """Each record's properties (without their 2-byte length)."""
        if self.item_props is None:
            self.item_props = [memoryview(pm)[2:] for pm in self.pieces[4::5]]
        return self.item_props

    def joined_properties(self) -> bytes:
        """Every record's properties, each after a separator, in one buffer: searched once for the names
        of a whole batch (a property's name always follows a separator, and values hold none)."""
        if self.joined_props is None:
            self.joined_props = b"\x02" + b"\x02".join(self.item_properties())
        return self.joined_props

    def first_carried(self, names: tuple[str, ...]) -> str | None:
        """The first of ``names`` (in record order) that one of the records carries as a property, or None."""
        found = _property_names_pattern(names).search(self.joined_properties())
        return None if found is None else found.group(1).decode()

    def carries(self, names: tuple[str, ...]) -> bool:
        """Whether one of the records carries a property named in ``names``."""
        return self.first_carried(names) is not None

    def redirect(self, topic: str, queue_id: int, properties: list[bytes],
                 dispatch_properties: list[DispatchProperties], tag_codes: list[int] | None = None) -> None:
        """Store every record in ``topic`` / ``queue_id`` with new properties, one per record, each with
        its 2-byte length in front (the timer rewrite of a batch: each message parked in the timer topic
        with its own deliver time). Only the topic and properties pieces change; bodies stay views of the
        request. ``dispatch_properties``: what ``record.dispatch_properties`` finds in the new properties,
        as the caller knows them (nothing is read again); ``tag_codes``: each record's ConsumeQueue tag code
        in ``topic``, where the caller knows it: the dispatch takes it as it is, and the properties it comes
        from (the timer topic's TIMER_OUT_MS) may be left out of ``dispatch_properties``."""
        n = len(self)
        if len(properties) != n:
            raise ValueError(f"{len(properties)} properties for {n} records")
        if len(dispatch_properties) != n:
            raise ValueError(f"{len(dispatch_properties)} dispatch properties for {n} records")
        if tag_codes is not None and len(tag_codes) != n:
            raise ValueError(f"{len(tag_codes)} tag codes for {n} records")
        topic_b = topic.encode("utf-8")
        if len(topic_b) > 127:
            raise RecordError(f"topic too long for the v1 record: {len(topic_b)} bytes")
        topic_part = bytes([len(topic_b)]) + topic_b
        new_lens = np.fromiter(map(len, properties), dtype=np.int64, count=n)
        if (new_lens > 32769).any():
            i = int(np.argmax(new_lens > 32769))
            raise RecordError(f"properties too long: {len(properties[i]) - 2} bytes > 32767")
        pieces = self.pieces
        old_lens = (np.fromiter(map(len, pieces[3::5]), dtype=np.int64, count=n)
                    + np.fromiter(map(len, pieces[4::5]), dtype=np.int64, count=n))
        pieces[3::5] = [topic_part] * n
        pieces[4::5] = properties
        self.item_props = self.joined_props = None
        self.dispatch_properties = dispatch_properties
        self.tag_codes = tag_codes
        self.sizes = self.sizes + (new_lens + len(topic_part) - old_lens)
        self.heads["total"] = self.sizes
        self.heads["queue_id"] = queue_id

    def select(self, keep: list[int]) -> RecordBatch:
        """The records at the indices ``keep``, in that order, as a batch of their own (bodies stay
        views of the request; heads and the shared part are copied: appending one batch never patches
        the other's)."""
        heads = self.heads[keep].copy()
        view = heads.view("u1").data
        shared = bytearray(self.shared)
        pieces: list[bytes | bytearray | memoryview] = []
        for j, i in enumerate(keep):
            p = 5 * i
            pieces += (view[48 * j : 48 * j + 48], shared, *self.pieces[p + 2 : p + 5])
        props, codes = self.item_props, self.tag_codes
        return RecordBatch(pieces, heads, shared, self.sizes[keep].copy(), self.sysflag,
                           [self.dispatch_properties[i] for i in keep],
                           None if props is None else [props[i] for i in keep],
                           None if codes is None else [codes[i] for i in keep])

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
    heads = np.zeros(count, dtype=HEAD_DTYPE)
    heads["total"] = sizes
    heads["magic"] = MESSAGE_MAGIC_CODE
    heads["queue_id"] = queue_id
    heads["flag"] = items["flag"]
    heads["sysflag"] = sysflag
    heads["born"] = born_timestamp
    head_view = heads.view(np.uint8).data  # the bytes' memoryview (numpy's stubs give 3.12+ only __buffer__)
    crcs: list[int] = []
    crc_add = crcs.append
    crc32 = _crc32
    pieces: list[bytes | bytearray | memoryview] = []
    props: list[memoryview] = []
    props_add = props.append
    found: list[DispatchProperties] = []
    found_add = found.append
    find = DISPATCH_PROPERTIES.findall  # dispatch_properties, inlined
    separator = b"\x02"
    for h, a, p, e in zip(range(0, 48 * count, 48), starts, props_at.tolist(), (s + total).tolist(), strict=True):
        crc_add(crc32(mv[a + 20 : p]))
        pm = mv[p:e]
        pieces += (head_view[h : h + 48], shared, mv[a + 16 : p], topic_part, pm)
        item = pm[2:]
        props_add(item)
        found_add(find(separator + item))
    heads["crc"] = np.array(crcs, dtype=np.int64) & 0x7FFFFFFF
    batch = RecordBatch(pieces, heads, shared, sizes, sysflag, found, props)
    if forbidden_properties and (name := batch.first_carried(forbidden_properties)) is not None:
        raise RecordError(f"the property {name} is not supported for batched messages")
    return batch
