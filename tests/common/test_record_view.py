"""The one record view (common/record.py): RecordView and record_columns over the stored layout, every
field, IPv4/IPv6 hosts, both magic codes, batch-encoded records, truncated and damaged input."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidalmq.common import sysflag as sf
from tidalmq.common.record import (
    FIELDS,
    LAYOUTS,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    RecordError,
    dispatch_properties,
    encode_record,
    properties_ok,
    properties_span,
    view_record,
)
from tidalmq.common.record_batch import encode_batch_records
from tidalmq.common.record_columns import record_columns

V4 = bytes([10, 1, 2, 3])
V6 = bytes(range(1, 17))
CASES = list(itertools.product([V4, V6], [V4, V6], [MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2]))
IDS = [f"born{len(b)}-store{len(s)}-{'v2' if m == MESSAGE_MAGIC_CODE_V2 else 'v1'}" for b, s, m in CASES]


def _record(born: bytes, store: bytes, magic: int, body: bytes = b"body \x00\xff bytes") -> bytearray:
    return encode_record(topic="Topic-é", queue_id=7, body=body, properties={"TAGS": "t", "KEYS": "a b", "X": ""},
                         flag=3, sysflag=sf.COMPRESSED_FLAG | sf.TRANSACTION_COMMIT_TYPE, born_timestamp=1111,
                         born_host=born, born_port=4321, store_host=store, store_port=10911, reconsume_times=2,
                         prepared_transaction_offset=99, queue_offset=12, physical_offset=34567,
                         store_timestamp=2222, magic=magic)


def test_layout_follows_rocketmq_message_decoder() -> None:
    assert [f.name for f in FIELDS] == [
        "TOTALSIZE", "MAGICCODE", "BODYCRC", "QUEUEID", "FLAG", "QUEUEOFFSET", "PHYSICALOFFSET", "SYSFLAG",
        "BORNTIMESTAMP", "BORNHOST", "STORETIMESTAMP", "STOREHOST", "RECONSUMETIMES",
        "PREPARED_TRANSACTION_OFFSET", "BODY", "TOPIC", "PROPERTIES"]
    v4 = LAYOUTS[0].offsets
    assert (v4["sysflag"], v4["born_host"], v4["store_ts"], v4["store_host"], v4["body_len"]) == (36, 48, 56, 64, 84)
    both = LAYOUTS[sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG].offsets
    assert (both["store_ts"], both["store_host"], both["body_len"]) == (68, 76, 108)
    assert MIN_RECORD_SIZE == 91


@pytest.mark.parametrize(("born", "store", "magic"), CASES, ids=IDS)
def test_view_reads_every_field(born: bytes, store: bytes, magic: int) -> None:
    rec = bytes(b"junk" + _record(born, store, magic) + b"tail")
    v = view_record(rec, 4)
    assert (v.total, v.magic, v.end) == (len(rec) - 8, magic, len(rec) - 4)
    assert v.body_crc == zlib.crc32(b"body \x00\xff bytes") & 0x7FFFFFFF and v.crc_ok()
    assert (v.queue_id, v.flag, v.queue_offset, v.physical_offset) == (7, 3, 12, 34567)
    assert v.sysflag & ~(sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG) == sf.COMPRESSED_FLAG | sf.TRANSACTION_COMMIT_TYPE
    assert bool(v.sysflag & sf.BORNHOST_V6_FLAG) == (len(born) == 16)
    assert bool(v.sysflag & sf.STOREHOSTADDRESS_V6_FLAG) == (len(store) == 16)
    assert (v.born_timestamp, v.born_host_raw, v.born_port) == (1111, born, 4321)
    assert (v.store_timestamp, v.store_host_raw, v.store_port) == (2222, store, 10911)
    assert (v.reconsume_times, v.prepared_transaction_offset) == (2, 99)
    assert (v.body(), v.topic, v.properties) == (b"body \x00\xff bytes", "Topic-é", {"TAGS": "t", "KEYS": "a b", "X": ""})
    assert v.born_host[1] == 4321 and v.store_host == ((V6_TEXT if len(store) == 16 else "10.1.2.3"), 10911)
    assert v.msg_id.endswith(f"{34567:016X}")
    v.check(crc=True)
    m = v.to_stored()
    assert (m.topic, m.queue_offset, m.commit_log_offset, m.store_size, m.body) == (
        "Topic-é", 12, 34567, v.total, b"body \x00\xff bytes")


V6_TEXT = "102:304:506:708:90a:b0c:d0e:f10"


@pytest.mark.parametrize(("born", "store", "magic"), CASES, ids=IDS)
def test_columns_read_the_same_layout(born: bytes, store: bytes, magic: int) -> None:
    recs = [_record(born, store, magic, body=b"x" * i) for i in (0, 1, 300)]
    buf = b"".join(recs)
    starts = np.array([0, len(recs[0]), len(recs[0]) + len(recs[1])], dtype=np.int64)
    c = record_columns(np.frombuffer(buf, dtype=np.uint8), starts)
    assert c.ok.all()
    assert c.head["total"].tolist() == [len(r) for r in recs] and (c.head["magic"] == magic).all()
    assert c.head["queue_offset"].tolist() == [12] * 3 and c.head["phys"].tolist() == [34567] * 3
    assert c.store_ts.tolist() == [2222] * 3 and c.prepared.tolist() == [99] * 3
    assert c.body_len.tolist() == [0, 1, 300]
    assert [buf[a : a + n] for a, n in zip(c.topic_at.tolist(), c.topic_len.tolist(), strict=True)] == \
        ["Topic-é".encode()] * 3
    props = [buf[a : a + n] for a, n in zip(c.props_at.tolist(), c.props_len.tolist(), strict=True)]
    assert props == [b"TAGS\x01t\x02KEYS\x01a b\x02X\x01\x02"] * 3
    assert c.end.tolist() == (starts + [len(r) for r in recs]).tolist()
    assert [properties_span(r) for r in recs] == [(a - s, n) for a, s, n in
                                                  zip(c.props_at.tolist(), starts.tolist(), c.props_len.tolist(), strict=True)]


def test_columns_flag_records_whose_lengths_lie() -> None:
    good = _record(V4, V4, MESSAGE_MAGIC_CODE)
    long_topic = bytearray(good)
    long_topic[view_record(good).topic_at - 1] = 200  # topic length past the record's end
    v6_flags = bytearray(encode_record(topic="T", queue_id=0, body=b"", properties={}))
    v6_flags[39] |= sf.BORNHOST_V6_FLAG | sf.STOREHOSTADDRESS_V6_FLAG  # too short for IPv6 hosts
    buf = bytes(good + long_topic + v6_flags + good)
    starts = np.cumsum([0, len(good), len(long_topic), len(v6_flags)]).astype(np.int64)
    assert record_columns(np.frombuffer(buf, dtype=np.uint8), starts).ok.tolist() == [True, False, False, True]
    for s, ok in zip(starts.tolist(), [True, False, False, True], strict=True):
        if ok:
            view_record(buf, s)
        else:
            with pytest.raises(RecordError):
                view_record(buf, s)


def test_batch_records_view_like_single_ones() -> None:
    """Records built from a SEND_BATCH_MESSAGE body read back with every message's own fields."""
    from tidalmq.client.codec import encode_batch
    from tidalmq.client.message import Message

    msgs = [Message("B", b"m%d" % i * i, properties={"UNIQ_KEY": f"U{i}", "TAGS": "x"}) for i in range(4)]
    batch = encode_batch_records(encode_batch(msgs), topic="B", queue_id=1, sysflag=0, born_timestamp=5,
                                 born_host=V6, born_port=1, store_host=V4, store_port=10911)
    views = [view_record(r) for r in batch.records()]
    assert [(v.body(), v.properties["UNIQ_KEY"], v.topic, v.queue_id, v.born_host_raw) for v in views] == [
        (b"m%d" % i * i, f"U{i}", "B", 1, V6) for i in range(4)]
    assert all(v.crc_ok() for v in views)


@pytest.mark.parametrize(("born", "store", "magic"), CASES, ids=IDS)
def test_every_truncation_raises(born: bytes, store: bytes, magic: int) -> None:
    rec = bytes(_record(born, store, magic))
    for cut in range(len(rec)):
        with pytest.raises(RecordError):
            view_record(rec[:cut])


def test_damage_is_caught_by_structure_property_text_or_crc() -> None:
    rec = bytes(_record(V4, V4, MESSAGE_MAGIC_CODE))
    at, n = properties_span(rec)

    def flipped(i: int, value: int | None = None) -> bytearray:
        bad = bytearray(rec)
        bad[i] = value if value is not None else bad[i] ^ 0x80
        return bad

    with pytest.raises(RecordError, match="magic"):
        view_record(flipped(4))
    with pytest.raises(RecordError, match="length"):
        view_record(flipped(at - 1, 0xFF))  # PROPLEN
    # a non-UTF-8 byte, a lost separator: the record still parses, the check refuses it
    for bad in (flipped(at + 1), flipped(at + 4, ord("x")), flipped(at + 5, 2)):
        v = view_record(bad)
        with pytest.raises(RecordError, match="properties"):
            v.check(crc=False)
    body_byte = LAYOUTS[0].body_at
    with pytest.raises(RecordError, match="CRC"):
        view_record(flipped(body_byte)).check(crc=True)
    view_record(rec).check(crc=True)


@pytest.mark.parametrize(("raw", "ok"), [
    (b"", True), (b"A\x01b\x02", True), (b"A\x01b", True), (b"A\x01\x02B\x01c\x02", True),
    (b"A\x01b\x02\x02", False), (b"\x01b\x02", False), (b"Ab\x02", False), (b"A\x01b\x01c\x02", False),
    (b"A\x01\xff\x02", False)])
def test_properties_ok(raw: bytes, ok: bool) -> None:
    assert properties_ok(raw) is ok


_DISPATCH_NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"TIMER_OUT_MS", b"__LITE_TOPIC")
# Pieces properties are made of: the dispatch's names, names that begin like them, separators, values.
_PIECES = st.sampled_from([*(n + b"\x01" for n in _DISPATCH_NAMES), b"TAGSX\x01", b"XKEYS\x01", b"WAIT\x01",
                           b"\x01", b"\x02", b"v", b"1790000000000", b"\xff\x00"])


def _split_reference(props: bytes) -> list[tuple[bytes, bytes]]:
    """The dispatch's properties, read the slow way: each \\x02-separated item that starts with a name
    and \\x01 gives (name, the rest of the item)."""
    out = []
    for item in props.split(b"\x02"):
        name, sep, value = item.partition(b"\x01")
        if sep and name in _DISPATCH_NAMES:
            out.append((name, value))
    return out


@given(st.lists(_PIECES, max_size=24).map(b"".join), st.binary(max_size=3), st.binary(max_size=3))
def test_dispatch_properties_are_each_named_item_of_the_properties_and_nothing_around_them(
        props: bytes, before: bytes, after: bytes) -> None:
    buf = before + props + after
    assert dispatch_properties(buf, len(before), len(before) + len(props)) == _split_reference(props)
    assert dispatch_properties(memoryview(buf), len(before), len(before) + len(props)) == _split_reference(props)
