"""The stored-message record of the CommitLog (RocketMQ's MessageDecoder layout), pure codec.

Layout, big-endian::

    TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 | PHYSICALOFFSET 8 |
    SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 (ip4+port) or 20 (ip6+port) | STORETIMESTAMP 8 |
    STOREHOST 8 or 20 | RECONSUMETIMES 4 | PREPARED_TRANSACTION_OFFSET 8 |
    BODYLEN 4 + BODY | TOPICLEN 1 (2 for the v2 magic) + TOPIC | PROPLEN 2 + PROPERTIES

The same bytes are what a PULL_MESSAGE response carries, so the read path never re-encodes.
The queue offset, physical offset and store timestamp are only known at append time:
``patch_for_append`` writes them into an already-encoded record.
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass, field

import numpy as np

from tidalmq.common import sysflag as sf
from tidalmq.common.columns import gather_be

try:  # ISA-L's CRC32 (SIMD): the same CRC as zlib's, ~3.5x faster on 1 KiB bodies
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - platforms without its wheels
    from zlib import crc32 as _crc32
from tidalmq.common.message import decode_properties, encode_properties
from tidalmq.common.msgid import encode_offset_msg_id

MESSAGE_MAGIC_CODE = -626843481
MESSAGE_MAGIC_CODE_V2 = -626843477
BLANK_MAGIC_CODE = -875286124
END_FILE_MIN_BLANK_LENGTH = 8

# Offsets of the fields that are patched at append time (IPv4 or IPv6 born host alike up to SYSFLAG).
POS_TOTALSIZE = 0
POS_MAGIC = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_FLAG = 16
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNTIMESTAMP = 40
POS_BORNHOST = 48

_HEAD = struct.Struct(">iiiiiqqiq")  # totalsize .. borntimestamp (48 bytes)
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">H")
_TAIL4 = struct.Struct(">4si q 4si iq")  # bornhost(ip4)+port, storets, storehost+port, reconsume, prepared
_TAIL6 = struct.Struct(">16si q 16si iq")


class RecordError(ValueError):
    """A record that does not decode (torn, corrupt or not a record at all)."""


@dataclass(slots=True)
class StoredMessage:
    """A decoded CommitLog record (MessageExt)."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    body: bytes
    flag: int = 0
    sysflag: int = 0
    body_crc: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    store_host_bytes: bytes = b"\x7f\x00\x00\x01"

    @property
    def msg_id(self) -> str:
        """The offset msgId: store host, port and CommitLog offset."""
        return encode_offset_msg_id(self.store_host_bytes, self.store_host[1], self.commit_log_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


def _addr_text(raw: bytes) -> str:
    import ipaddress

    return str(ipaddress.ip_address(raw))


def encode_record(
    *,
    topic: str,
    queue_id: int,
    body: bytes | memoryview,
    properties: dict[str, str] | str,
    flag: int = 0,
    sysflag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x7f\x00\x00\x01",
    born_port: int = 0,
    store_host: bytes = b"\x7f\x00\x00\x01",
    store_port: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    body_crc: int | None = None,
) -> bytearray:
    """Encode one record. Host flags in ``sysflag`` are set from the address lengths."""
    props = properties if isinstance(properties, str) else encode_properties(properties)
    props_b = props.encode("utf-8")
    topic_b = topic.encode("utf-8")
    if len(topic_b) > 127:
        raise RecordError(f"topic too long for the v1 record: {len(topic_b)} bytes")
    if len(props_b) > 32767:
        raise RecordError(f"properties too long: {len(props_b)} bytes > 32767")
    v6_born = len(born_host) == 16
    v6_store = len(store_host) == 16
    sysflag &= ~(sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG)
    if v6_born:
        sysflag |= sf.BORNHOST_V6_FLAG
    if v6_store:
        sysflag |= sf.STOREHOSTADDRESS_V6_FLAG
    crc = _crc32(body) & 0x7FFFFFFF if body_crc is None else body_crc
    born_len = 20 if v6_born else 8
    store_len = 20 if v6_store else 8
    total = 48 + born_len + 8 + store_len + 4 + 8 + 4 + len(body) + 1 + len(topic_b) + 2 + len(props_b)
    out = bytearray(total)
    _HEAD.pack_into(
        out, 0, total, MESSAGE_MAGIC_CODE, crc, queue_id, flag, queue_offset, physical_offset, sysflag, born_timestamp
    )
    pos = 48
    out[pos : pos + born_len - 4] = born_host
    _I.pack_into(out, pos + born_len - 4, born_port)
    pos += born_len
    _Q.pack_into(out, pos, store_timestamp)
    pos += 8
    out[pos : pos + store_len - 4] = store_host
    _I.pack_into(out, pos + store_len - 4, store_port)
    pos += store_len
    _I.pack_into(out, pos, reconsume_times)
    _Q.pack_into(out, pos + 4, prepared_transaction_offset)
    pos += 12
    _I.pack_into(out, pos, len(body))
    pos += 4
    out[pos : pos + len(body)] = body
    pos += len(body)
    out[pos] = len(topic_b)
    out[pos + 1 : pos + 1 + len(topic_b)] = topic_b
    pos += 1 + len(topic_b)
    _H.pack_into(out, pos, len(props_b))
    out[pos + 2 :] = props_b
    return out


def store_timestamp_pos(sysflag: int) -> int:
    return POS_BORNHOST + (20 if sysflag & sf.BORNHOST_V6_FLAG else 8)


def patch_for_append(buf: bytearray | memoryview, base: int, queue_offset: int, physical_offset: int,
                     store_timestamp: int) -> None:
    """Fill in the fields only known when the record is appended."""
    _Q.pack_into(buf, base + POS_QUEUEOFFSET, queue_offset)
    _Q.pack_into(buf, base + POS_PHYSICALOFFSET, physical_offset)
    sysflag = _I.unpack_from(buf, base + POS_SYSFLAG)[0]
    _Q.pack_into(buf, base + store_timestamp_pos(sysflag), store_timestamp)


def encode_blank(size: int) -> bytes:
    """The BLANK record that fills the end of a CommitLog file."""
    return struct.pack(">ii", size, BLANK_MAGIC_CODE)


def peek_size_magic(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    return struct.unpack_from(">ii", buf, pos)


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False,
                  read_body: bool = True) -> StoredMessage:
    """Decode the record at ``pos``. Raises ``RecordError`` for a torn or corrupt record."""
    n = len(buf)
    if pos + 8 > n:
        raise RecordError("truncated record header")
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise RecordError(f"bad magic code {magic} at {pos}")
    if total < 48 or pos + total > n:
        raise RecordError(f"bad total size {total} at {pos}")
    try:
        (_, _, crc, queue_id, flag, queue_offset, phys, sysflag, born_ts) = _HEAD.unpack_from(buf, pos)
        p = pos + 48
        if sysflag & sf.BORNHOST_V6_FLAG:
            bh, bport = struct.unpack_from(">16si", buf, p)
            p += 20
        else:
            bh, bport = struct.unpack_from(">4si", buf, p)
            p += 8
        store_ts = _Q.unpack_from(buf, p)[0]
        p += 8
        if sysflag & sf.STOREHOSTADDRESS_V6_FLAG:
            sh, sport = struct.unpack_from(">16si", buf, p)
            p += 20
        else:
            sh, sport = struct.unpack_from(">4si", buf, p)
            p += 8
        reconsume, prepared = struct.unpack_from(">iq", buf, p)
        p += 12
        body_len = _I.unpack_from(buf, p)[0]
        p += 4
        if body_len < 0 or p + body_len > pos + total:
            raise RecordError(f"bad body length {body_len} at {pos}")
        body = bytes(buf[p : p + body_len]) if read_body else b""
        if check_crc and (_crc32(buf[p : p + body_len]) & 0x7FFFFFFF) != crc:
            raise RecordError(f"body CRC mismatch at {pos}")
        p += body_len
        if magic == MESSAGE_MAGIC_CODE_V2:
            tlen = _H.unpack_from(buf, p)[0]
            p += 2
        else:
            tlen = buf[p]
            p += 1
        topic = bytes(buf[p : p + tlen]).decode("utf-8")
        p += tlen
        plen = _H.unpack_from(buf, p)[0]
        p += 2
        props = decode_properties(bytes(buf[p : p + plen]).decode("utf-8")) if plen else {}
        p += plen
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        raise RecordError(f"corrupt record at {pos}: {e}") from e
    if p != pos + total:
        raise RecordError(f"record length mismatch at {pos}: fields end at {p - pos}, total {total}")
    return StoredMessage(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        commit_log_offset=phys,
        store_size=total,
        body=body,
        flag=flag,
        sysflag=sysflag,
        body_crc=crc,
        born_timestamp=born_ts,
        born_host=(_addr_text(bh), bport),
        store_timestamp=store_ts,
        store_host=(_addr_text(sh), sport),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        properties=props,
        store_host_bytes=bytes(sh),
    )


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ stores CRC32 masked to a non-negative int (UtilAll.crc32 & 0x7FFFFFFF)."""
    return _crc32(body) & 0x7FFFFFFF


# A batch item (MessageDecoder.encodeMessages): totalsize, magic, bodycrc, flag, bodylen, then the body,
# a 2-byte properties length and the properties.
_BATCH_ITEM_DTYPE = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("flag", ">i4"), ("body_len", ">i4")])
_AR20 = np.arange(20, dtype=np.int64)
# The first 48 bytes of a record, TOTALSIZE .. BORNTIMESTAMP.
HEAD_DTYPE = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
                       ("queue_offset", ">i8"), ("phys", ">i8"), ("sysflag", ">i4"), ("born", ">i8")])
assert HEAD_DTYPE.itemsize == 48


# The properties the store's dispatch reads (ConsumeQueue tag code, index keys, the schedule topics'
# deliver times), found in a record's properties read from the byte before them (the low byte of
# their length): a name follows that first byte or a \x02 separator. Values come back as bytes.
DISPATCH_PROPERTIES = re.compile(rb"(?:\A[\s\S]|\x02)(TAGS|KEYS|UNIQ_KEY|DELAY|TIMER_OUT_MS)\x01([^\x02]*)")
DispatchProperties = list[tuple[bytes, bytes]]


@functools.lru_cache(maxsize=16)
def _property_names_pattern(names: tuple[str, ...]) -> re.Pattern[bytes]:
    """Matches any of ``names`` as a property name in a stored properties string."""
    alternatives = b"|".join(re.escape(n.encode()) for n in names)
    return re.compile(rb"(?:^|\x02)(" + alternatives + rb")\x01")


@functools.lru_cache(maxsize=16)
def _name_markers(names: tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(n.encode() + b"\x01" for n in names)


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
    # Per record, what DISPATCH_PROPERTIES finds in its properties: read while the batch is encoded,
    # so dispatching the batch right after its append need not read the records back.
    dispatch_properties: list[DispatchProperties]

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        return int(self.sizes.sum())

    @property
    def starts(self) -> np.ndarray:
        """Where each record begins, relative to the first."""
        return np.cumsum(self.sizes) - self.sizes

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
    head_view = memoryview(heads.view(np.uint8))
    crcs: list[int] = []
    crc_add = crcs.append
    crc32 = _crc32
    pieces: list[bytes | bytearray | memoryview] = []
    props: list[memoryview] = []
    props_add = props.append
    found: list[DispatchProperties] = []
    found_add = found.append
    find = DISPATCH_PROPERTIES.findall
    for h, a, p, e in zip(range(0, 48 * count, 48), starts, props_at.tolist(), (s + total).tolist(), strict=True):
        crc_add(crc32(mv[a + 20 : p]))
        pm = mv[p:e]
        pieces += (head_view[h : h + 48], shared, mv[a + 16 : p], topic_part, pm)
        props_add(pm)
        found_add(find(pm[1:]))
    heads["crc"] = np.array(crcs, dtype=np.int64) & 0x7FFFFFFF
    if forbidden_properties:
        _refuse_properties(props, forbidden_properties)
    return RecordBatch(pieces, heads, shared, sizes, sysflag, found)


def _refuse_properties(props: list[memoryview], names: tuple[str, ...]) -> None:
    """RecordError naming the first of ``names`` that one of the messages carries. ``props`` are the
    messages' 2-byte properties lengths and properties."""
    pattern = _property_names_pattern(names)
    # One search over them all first (a name then follows a separator or a length): cheap, and
    # almost always negative; then find which message really carries one.
    joined = b"\x02".join(props)
    if not any(marker in joined for marker in _name_markers(names)):
        return
    for pm in props:
        found = pattern.search(pm[2:])
        if found is not None:
            raise RecordError(f"the property {found.group(1).decode()} is not supported for batched messages")
