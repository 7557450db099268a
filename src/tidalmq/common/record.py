"""The stored-message record of the CommitLog (RocketMQ's MessageDecoder layout), pure codec.

Layout, big-endian::

    TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 | PHYSICALOFFSET 8 |
    SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 (ip4+port) or 20 (ip6+port) | STORETIMESTAMP 8 |
    STOREHOST 8 or 20 | RECONSUMETIMES 4 | PREPARED_TRANSACTION_OFFSET 8 |
    BODYLEN 4 + BODY | TOPICLEN 1 (2 for the v2 magic) + TOPIC | PROPLEN 2 + PROPERTIES

The same bytes are what a PULL_MESSAGE response carries, so the read path never re-encodes.
The queue offset, physical offset and store timestamp are only known at append time:
``patch_for_append`` writes them into an already-encoded record.

Here: the field table and layouts, one record encoded (``encode_record``) and read in place
(``RecordView``). Batches of records are encoded in common/record_batch.py; many records are read
column-wise with numpy in common/record_columns.py.
"""

from __future__ import annotations

import ipaddress
import mmap
import operator
import struct
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np

from tidalmq.common import sysflag as sf

try:  # ISA-L's CRC32 (SIMD): the same CRC as zlib's, faster (docs/benchmarks.md, "Figures behind the code")
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - platforms without its wheels
    from zlib import crc32 as _crc32
from tidalmq.common.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_CRC32,
    PROPERTY_SEPARATOR,
    PROPERTY_SEPARATOR_BYTE,
    PROPERTY_SEPARATOR_BYTES,
    decode_properties,
    encode_properties,
    property_finder_bytes,
    property_key,
)
from tidalmq.common.msgid import LOOPBACK_IPV4, encode_offset_msg_id

MESSAGE_MAGIC_CODE = -626843481
MESSAGE_MAGIC_CODE_V2 = -626843477
BLANK_MAGIC_CODE = -875286124
END_FILE_MIN_BLANK_LENGTH = 8


# ---------------------------------------------------------------- the layout, declared once
class Field(NamedTuple):
    """One field of the stored record. ``code`` is its ``struct`` code; ``column`` its name in numpy
    columns and in ``RecordView``. Hosts are 4 (IPv4) or 16 (IPv6) address bytes and a 4-byte port, per
    SYSFLAG; BODY, TOPIC and PROPERTIES are a length (``width`` bytes; TOPIC's is 2 under the v2 magic)
    followed by that many bytes."""

    name: str
    column: str
    width: int
    code: str


_HOST = "host"
_SECTION = "section"
FIELDS: tuple[Field, ...] = (
    Field("TOTALSIZE", "total", 4, "i"),
    Field("MAGICCODE", "magic", 4, "i"),
    Field("BODYCRC", "crc", 4, "i"),
    Field("QUEUEID", "queue_id", 4, "i"),
    Field("FLAG", "flag", 4, "i"),
    Field("QUEUEOFFSET", "queue_offset", 8, "q"),
    Field("PHYSICALOFFSET", "phys", 8, "q"),
    Field("SYSFLAG", "sysflag", 4, "i"),
    Field("BORNTIMESTAMP", "born", 8, "q"),
    Field("BORNHOST", "born_host", 8, _HOST),
    Field("STORETIMESTAMP", "store_ts", 8, "q"),
    Field("STOREHOST", "store_host", 8, _HOST),
    Field("RECONSUMETIMES", "reconsume", 4, "i"),
    Field("PREPARED_TRANSACTION_OFFSET", "prepared", 8, "q"),
    Field("BODY", "body", 4, _SECTION),
    Field("TOPIC", "topic", 1, _SECTION),
    Field("PROPERTIES", "properties", 2, _SECTION),
)
_V6_HOSTS = sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG
assert _V6_HOSTS < 256  # both host flags live in SYSFLAG's low byte
_FIXED = FIELDS[: FIELDS.index(next(f for f in FIELDS if f.code == _SECTION))]


class Layout(NamedTuple):
    """Where the fixed fields sit for one combination of host address families."""

    offsets: dict[str, int]  # column -> offset from the record's start
    prefix: struct.Struct  # every fixed field and the body length (hosts as address bytes, port)
    body_at: int  # the first body byte


def _layout(born_v6: bool, store_v6: bool) -> Layout:
    offsets: dict[str, int] = {}
    fmt = ">"
    pos = 0
    for f in _FIXED:
        offsets[f.column] = pos
        if f.code == _HOST:
            v6 = born_v6 if f.name == "BORNHOST" else store_v6
            fmt += "16si" if v6 else "4si"
            pos += 20 if v6 else 8
        else:
            fmt += f.code
            pos += f.width
    offsets["body_len"] = pos
    fmt += "i"
    prefix = struct.Struct(fmt)
    assert prefix.size == pos + 4
    return Layout(offsets, prefix, prefix.size)


# Indexed by SYSFLAG & _V6_HOSTS.
LAYOUTS: dict[int, Layout] = {
    (sf.BORNHOST_V6_FLAG if b else 0) | (sf.STOREHOSTADDRESS_V6_FLAG if s else 0): _layout(b, s)
    for b in (False, True) for s in (False, True)
}
_V4 = LAYOUTS[0]
# Per host combination, indexed by (SYSFLAG & _V6_HOSTS) >> _HOSTS_SHIFT (a tuple index is cheaper than a
# dict lookup on the per-record paths): (prefix unpack, its size), and STORETIMESTAMP's offset.
_HOSTS_SHIFT = min(sf.BORNHOST_V6_FLAG, sf.STOREHOSTADDRESS_V6_FLAG).bit_length() - 1
assert [k >> _HOSTS_SHIFT for k in sorted(LAYOUTS)] == list(range(len(LAYOUTS)))
_BY_HOSTS = tuple((LAYOUTS[k].prefix.unpack_from, LAYOUTS[k].body_at) for k in sorted(LAYOUTS))
_STORE_TS_AT = tuple(LAYOUTS[k].offsets["store_ts"] for k in sorted(LAYOUTS))
# The smallest record: IPv4 hosts, empty body, topic and properties.
MIN_RECORD_SIZE = _V4.body_at + 1 + 2

# Offsets of the fields before BORNHOST (the same for every layout).
POS_TOTALSIZE = _V4.offsets["total"]
POS_MAGIC = _V4.offsets["magic"]
POS_BODYCRC = _V4.offsets["crc"]
POS_QUEUEID = _V4.offsets["queue_id"]
POS_FLAG = _V4.offsets["flag"]
POS_QUEUEOFFSET = _V4.offsets["queue_offset"]
POS_PHYSICALOFFSET = _V4.offsets["phys"]
POS_SYSFLAG = _V4.offsets["sysflag"]
POS_BORNTIMESTAMP = _V4.offsets["born"]
POS_BORNHOST = _V4.offsets["born_host"]
_SYSFLAG_LOW_BYTE = POS_SYSFLAG + 3
# v1 and v2 magic codes differ in their last byte.
_V2_MAGIC_LOW_BYTE = MESSAGE_MAGIC_CODE_V2 & 0xFF
assert MESSAGE_MAGIC_CODE & 0xFF != _V2_MAGIC_LOW_BYTE

# The fields before BORNHOST as one numpy record (48 bytes).
HEAD_DTYPE = np.dtype([(f.column, f">i{f.width}") for f in _FIXED[: _FIXED.index(
    next(f for f in _FIXED if f.code == _HOST))]])
assert HEAD_DTYPE.itemsize == POS_BORNHOST

_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">H")
_II = struct.Struct(">ii")


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
    store_host_bytes: bytes = LOOPBACK_IPV4

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
    born_host: bytes = LOOPBACK_IPV4,
    born_port: int = 0,
    store_host: bytes = LOOPBACK_IPV4,
    store_port: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    body_crc: int | None = None,
    magic: int = MESSAGE_MAGIC_CODE,
) -> bytearray:
    """Encode one record. Host flags in ``sysflag`` are set from the address lengths; the v2 ``magic``
    gives the topic a 2-byte length."""
    props = properties if isinstance(properties, str) else encode_properties(properties)
    props_b = props.encode("utf-8")
    topic_b = topic.encode("utf-8")
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    if len(topic_b) > (32767 if v2 else 127):
        raise RecordError(f"topic too long for the record: {len(topic_b)} bytes")
    if len(props_b) > 32767:
        raise RecordError(f"properties too long: {len(props_b)} bytes > 32767")
    sysflag = (sysflag & ~_V6_HOSTS) | (sf.BORNHOST_V6_FLAG if len(born_host) == 16 else 0) \
        | (sf.STOREHOSTADDRESS_V6_FLAG if len(store_host) == 16 else 0)
    crc = _crc32(body) & 0x7FFFFFFF if body_crc is None else body_crc
    layout = LAYOUTS[sysflag & _V6_HOSTS]
    pos = layout.body_at
    topic_len_width = 2 if v2 else 1
    total = pos + len(body) + topic_len_width + len(topic_b) + 2 + len(props_b)
    out = bytearray(total)
    layout.prefix.pack_into(out, 0, total, magic, crc, queue_id, flag, queue_offset, physical_offset, sysflag,
                            born_timestamp, born_host, born_port, store_timestamp, store_host, store_port,
                            reconsume_times, prepared_transaction_offset, len(body))
    out[pos : pos + len(body)] = body
    pos += len(body)
    out[pos : pos + topic_len_width] = len(topic_b).to_bytes(topic_len_width, "big")
    pos += topic_len_width
    out[pos : pos + len(topic_b)] = topic_b
    pos += len(topic_b)
    _H.pack_into(out, pos, len(props_b))
    out[pos + 2 :] = props_b
    return out


def store_timestamp_pos(sysflag: int) -> int:
    return _STORE_TS_AT[(sysflag & _V6_HOSTS) >> _HOSTS_SHIFT]


def patch_for_append(buf: bytearray | memoryview, base: int, queue_offset: int, physical_offset: int,
                     store_timestamp: int) -> None:
    """Fill in the fields only known when the record is appended."""
    _Q.pack_into(buf, base + POS_QUEUEOFFSET, queue_offset)
    _Q.pack_into(buf, base + POS_PHYSICALOFFSET, physical_offset)
    _Q.pack_into(buf, base + _STORE_TS_AT[(buf[base + _SYSFLAG_LOW_BYTE] & _V6_HOSTS) >> _HOSTS_SHIFT],
                 store_timestamp)


def encode_blank(size: int) -> bytes:
    """The BLANK record that fills the end of a CommitLog file."""
    return _II.pack(size, BLANK_MAGIC_CODE)


def peek_size_magic(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    return _II.unpack_from(buf, pos)


# ---------------------------------------------------------------- one record, read in place
class RecordView(tuple):
    """One stored record read where it lies: its fixed fields unpacked at once (one ``struct`` call),
    its body, topic and properties located, and only copied or decoded when asked for.

    ``view_record`` builds it and checks the record's structure; ``check`` adds what costs more (the
    property text, the body CRC). Every reader of records (the store's scans, the pull path's checks,
    the schedule and transaction services, the client, Spark) goes through this class or through
    ``record_columns`` (common/record_columns.py), which reads the same layout column-wise.

    A tuple of the unpacked fixed fields, then the positions found, in ``ITEMS`` order: building one
    is a single allocation, and a hot loop may unpack it at once instead of calling a property per
    field (Spark's columns do)."""

    __slots__ = ()
    ITEMS: ClassVar[tuple[str, ...]] = (
        "total", "magic", "body_crc", "queue_id", "flag", "queue_offset", "physical_offset", "sysflag",
        "born_timestamp", "born_host_raw", "born_port", "store_timestamp", "store_host_raw", "store_port",
        "reconsume_times", "prepared_transaction_offset", "body_len",  # the prefix, in FIELDS order
        "buf", "pos", "body_at", "topic_at", "topic_len", "props_at", "props_len")

    total: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_host_raw: bytes
    born_port: int
    store_timestamp: int
    store_host_raw: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_len: int
    buf: bytes | bytearray | memoryview
    pos: int
    body_at: int
    topic_at: int
    topic_len: int
    props_at: int
    props_len: int

    @property
    def end(self) -> int:
        """The position after the record in ``buf``."""
        return self.pos + self.total

    def body(self) -> bytes:
        return bytes(self.buf[self.body_at : self.body_at + self.body_len])

    def body_view(self) -> memoryview:
        return memoryview(self.buf)[self.body_at : self.body_at + self.body_len]

    @property
    def topic_raw(self) -> bytes:
        return bytes(self.buf[self.topic_at : self.topic_at + self.topic_len])

    @property
    def topic(self) -> str:
        try:
            return self.topic_raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordError(f"corrupt record at {self.pos}: topic is not UTF-8") from e

    @property
    def properties_raw(self) -> bytes:
        return bytes(self.buf[self.props_at : self.props_at + self.props_len])

    @property
    def properties(self) -> dict[str, str]:
        if not self.props_len:
            return {}
        try:
            return decode_properties(self.properties_raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise RecordError(f"corrupt record at {self.pos}: properties are not UTF-8") from e

    @property
    def born_host(self) -> tuple[str, int]:
        return _addr_text(self.born_host_raw), self.born_port

    @property
    def store_host(self) -> tuple[str, int]:
        return _addr_text(self.store_host_raw), self.store_port

    @property
    def msg_id(self) -> str:
        """The offset msgId: store host, port and CommitLog offset."""
        return encode_offset_msg_id(self.store_host_raw, self.store_port, self.physical_offset)

    def crc_ok(self) -> bool:
        return body_crc(self.body_view()) == self.body_crc

    def check(self, *, crc: bool = True) -> None:
        """Raise ``RecordError`` unless the properties read as encoded name/value pairs of UTF-8 text
        and (``crc``) the body matches BODYCRC. The body CRC does not cover the topic or properties;
        this structural check is what catches a damaged separator or an undecodable byte there; the record
        CRC (``__CRC32#``, when the record carries one) catches any other changed byte."""
        if self.props_len and not properties_ok(self.buf[self.props_at : self.props_at + self.props_len]):
            raise RecordError(f"corrupt record at {self.pos}: properties are not name/value pairs")
        if crc and not self.crc_ok():
            raise RecordError(f"body CRC mismatch at {self.pos}")
        if crc and record_crc_ok(self.buf, self.pos, self.total) is False:
            raise RecordError(f"record CRC mismatch at {self.pos}")

    def to_stored(self, *, read_body: bool = True) -> StoredMessage:
        """The record as a ``StoredMessage`` (every field decoded)."""
        return StoredMessage(
            topic=self.topic,
            queue_id=self.queue_id,
            queue_offset=self.queue_offset,
            commit_log_offset=self.physical_offset,
            store_size=self.total,
            body=self.body() if read_body else b"",
            flag=self.flag,
            sysflag=self.sysflag,
            body_crc=self.body_crc,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            store_timestamp=self.store_timestamp,
            store_host=self.store_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
            properties=self.properties,
            store_host_bytes=bytes(self.store_host_raw),
        )


assert RecordView.ITEMS.index("buf") == len(_V4.prefix.unpack(bytes(_V4.prefix.size)))
for _i, _name in enumerate(RecordView.ITEMS):
    setattr(RecordView, _name, property(operator.itemgetter(_i)))
_new_view = tuple.__new__


def view_record(buf: bytes | bytearray | memoryview | mmap.mmap, pos: int = 0) -> RecordView:
    """The record at ``pos`` of ``buf``, its structure checked: MAGICCODE, TOTALSIZE within ``buf``, and
    the body, topic and properties lengths adding up to TOTALSIZE. Raises ``RecordError`` otherwise."""
    try:
        unpack, fixed = _BY_HOSTS[(buf[pos + _SYSFLAG_LOW_BYTE] & _V6_HOSTS) >> _HOSTS_SHIFT]
        fields = unpack(buf, pos)
    except (IndexError, struct.error):
        raise RecordError(f"truncated record at {pos}: {len(buf) - pos} bytes") from None
    total, magic, body_len = fields[0], fields[1], fields[16]
    body_at = pos + fixed
    if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
        raise RecordError(f"bad magic code {magic} at {pos}")
    end = pos + total
    if end > len(buf) or end < body_at + 3:
        raise RecordError(f"bad total size {total} at {pos}")
    p = body_at + body_len
    if body_len < 0 or p + 3 > end:
        raise RecordError(f"bad body length {body_len} at {pos}")
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = buf[p]
        topic_at = p + 1
    else:
        topic_len = (buf[p] << 8) | buf[p + 1]
        topic_at = p + 2
    p = topic_at + topic_len
    if p + 2 > end:
        raise RecordError(f"bad topic length {topic_len} at {pos}")
    props_len = (buf[p] << 8) | buf[p + 1]
    if p + 2 + props_len != end:
        raise RecordError(f"record length mismatch at {pos}: fields end at {p + 2 + props_len - pos}, "
                          f"total {total}")
    return _new_view(RecordView, fields + (buf, pos, body_at, topic_at, topic_len, p + 2, props_len))


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False,
                  read_body: bool = True) -> StoredMessage:
    """Decode the record at ``pos``. Raises ``RecordError`` for a torn or corrupt record."""
    v = view_record(buf, pos)
    if check_crc and not v.crc_ok():
        raise RecordError(f"body CRC mismatch at {pos}")
    return v.to_stored(read_body=read_body)


def properties_ok(raw: bytes | bytearray | memoryview) -> bool:
    """Whether a stored properties section reads as RocketMQ writes it (common/message.py): UTF-8 text of
    name/value items, each ended by the property separator (the last one's may be missing), every name
    non-empty and every item holding exactly one name/value separator."""
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError:
        return False
    items = text.split(PROPERTY_SEPARATOR)
    if not items[-1]:
        items.pop()
    for item in items:
        if item.count(NAME_VALUE_SEPARATOR) != 1 or item[0] == NAME_VALUE_SEPARATOR:
            return False
    return True


def properties_span(record: bytes | bytearray | memoryview) -> tuple[int, int]:
    """Where the properties of one trusted record (the store's own, just read) start, and their length,
    without building a view: the filter's hot path."""
    layout = LAYOUTS[record[_SYSFLAG_LOW_BYTE] & _V6_HOSTS]
    p = layout.body_at + _I.unpack_from(record, layout.body_at - 4)[0]
    if record[POS_MAGIC + 3] == _V2_MAGIC_LOW_BYTE:
        p += 2 + ((record[p] << 8) | record[p + 1])
    else:
        p += 1 + record[p]
    return p + 2, (record[p] << 8) | record[p + 1]


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ stores CRC32 masked to a non-negative int (UtilAll.crc32 & 0x7FFFFFFF)."""
    return _crc32(body) & 0x7FFFFFFF



# ---------------------------------------------------------------- the record CRC (RocketMQ 5's PROPERTY_CRC32)
# With enabledAppendPropCRC RocketMQ 5 ends a record's properties with a pair ``__CRC32#`` = ten decimal digits
# (least significant first), its separator included: the CRC (masked as BODYCRC) of every byte of the record before those 19
# bytes, so the header, topic and properties are covered as well as the body. BODYCRC stays the body's.
CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + 10 + 1
_CRC_NAME = property_key(PROPERTY_CRC32).encode()
CRC_PLACEHOLDER = _CRC_NAME + b"0" * 10 + PROPERTY_SEPARATOR_BYTES
_CRC_NAME_AT = -CRC32_RESERVED_LEN  # where the trailer begins, from the record's end
_CRC_DIGITS_AT = _CRC_NAME_AT + len(_CRC_NAME)


def crc_digits(crc: int) -> bytes:
    """The trailer's ten digits for ``crc``: its decimal digits, least significant first, zero-padded."""
    return (b"%010d" % crc)[::-1]


def crc_trailer(props: bytes | bytearray | memoryview) -> bytes:
    """What to append to properties ``props`` for the CRC: a separator when the last pair lacks its own,
    then the placeholder trailer (``seal_record_crc`` fills in its digits)."""
    return CRC_PLACEHOLDER if not props or props[-1] == PROPERTY_SEPARATOR_BYTE else PROPERTY_SEPARATOR_BYTES + CRC_PLACEHOLDER


def reserve_record_crc(rec: bytearray) -> None:
    """Append the CRC trailer to the properties of one encoded record (TOTALSIZE and PROPLEN follow).
    Raises ``RecordError`` when the properties would exceed 32767 bytes."""
    at, n = properties_span(rec)
    tail = crc_trailer(rec[at : at + n])
    if n + len(tail) > 32767:
        raise RecordError(f"properties too long: {n + len(tail)} bytes > 32767")
    rec += tail
    _H.pack_into(rec, at - 2, n + len(tail))
    _I.pack_into(rec, POS_TOTALSIZE, len(rec))


def has_record_crc(record: bytes | bytearray | memoryview | mmap.mmap, pos: int, total: int) -> bool:
    """Whether the record at ``pos`` (``total`` bytes) ends with a CRC trailer."""
    start = pos + total + _CRC_NAME_AT
    return total > MIN_RECORD_SIZE + CRC32_RESERVED_LEN and record[start : start + len(_CRC_NAME)] == _CRC_NAME


def seal_record_crc(buf: bytearray | memoryview, pos: int, total: int) -> None:
    """Write the CRC of the record at ``pos`` into its trailer (after every other field is final)."""
    end = pos + total
    crc = _crc32(buf[pos : end + _CRC_NAME_AT]) & 0x7FFFFFFF
    buf[end + _CRC_DIGITS_AT : end - 1] = crc_digits(crc)


def record_crc_ok(record: bytes | bytearray | memoryview | mmap.mmap, pos: int, total: int) -> bool | None:
    """The record CRC's verdict for the record at ``pos``: None when it carries no trailer (written without
    enabledAppendPropCRC), else whether every byte before the trailer matches it."""
    end = pos + total
    tail = bytes(record[end + _CRC_NAME_AT : end])  # one copy of the 19 bytes, then plain bytes operations
    if tail[:_CRC_DIGITS_AT - _CRC_NAME_AT] != _CRC_NAME or total <= MIN_RECORD_SIZE + CRC32_RESERVED_LEN:
        return None
    digits = tail[_CRC_DIGITS_AT - _CRC_NAME_AT : -1]
    if not digits.isdigit() or tail[-1] != PROPERTY_SEPARATOR_BYTE:
        return False
    return int(digits[::-1]) == _crc32(record[pos : end + _CRC_NAME_AT]) & 0x7FFFFFFF

_TRAILER_AT = np.arange(_CRC_NAME_AT, 0, dtype=np.int64)
_CRC_NAME_U8 = np.frombuffer(_CRC_NAME, np.uint8)
_DIGIT_WEIGHTS = 10 ** np.arange(10, dtype=np.int64)  # the trailer's digits, least significant first


def records_crc_sound(buf: memoryview, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether no record ``buf[starts[i] : ends[i]]`` (each longer than ``MIN_RECORD_SIZE +
    CRC32_RESERVED_LEN``) fails its record CRC: ``record_crc_ok`` for many at once, a record without a
    trailer passing as its None does. The trailers are one matrix; each CRC is still a call over its bytes."""
    tails = np.frombuffer(buf, np.uint8)[ends[:, None] + _TRAILER_AT]
    named = tails[:, : len(_CRC_NAME)] == _CRC_NAME_U8
    if not named.any():
        return True
    if not named.all():  # some records carry no trailer (enabledAppendPropCRC was off when they were written)
        has = named.all(axis=1)
        tails, starts, ends = tails[has], starts[has], ends[has]
    digits = tails[:, len(_CRC_NAME) : -1] - ord("0")  # uint8: anything but a digit wraps above 9
    if (digits > 9).any() or (tails[:, -1] != PROPERTY_SEPARATOR_BYTE).any():
        return False
    crcs = [_crc32(buf[a:b]) & 0x7FFFFFFF for a, b in zip(starts.tolist(), (ends + _CRC_NAME_AT).tolist(), strict=True)]
    return crcs == (digits.astype(np.int64) @ _DIGIT_WEIGHTS).tolist()


# The properties the store's dispatch reads (ConsumeQueue tag code, index keys, the schedule topics'
# deliver times), found with a separator put in front (``dispatch_properties``): copying the few dozen bytes
# to put it there costs less than a pattern that also matches at the start (docs/benchmarks.md, "Figures
# behind the code").
DISPATCH_NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"TIMER_OUT_MS", b"__LITE_TOPIC")
DISPATCH_PROPERTIES = property_finder_bytes(DISPATCH_NAMES)
DispatchProperties = list[tuple[bytes, bytes]]
_SEPARATOR = PROPERTY_SEPARATOR_BYTES


def dispatch_properties(buf: bytes | bytearray | memoryview | mmap.mmap, start: int, end: int
                        ) -> DispatchProperties:
    """The (name, value) pairs of the dispatch's properties in ``buf[start:end]`` (a record's properties,
    without their length), in order; values as bytes."""
    return DISPATCH_PROPERTIES.findall(_SEPARATOR + buf[start:end])
