"""The record CRC (RocketMQ 5's ``__CRC32#`` property, enabledAppendPropCRC): its layout, that it covers every
byte of the record before it (header, body, topic, properties), and that batches, packed or in pieces, are
sealed as single records are."""

from __future__ import annotations

import struct
import zlib

import pytest

from tests.common.test_packed_batch import _encode, _item
from tidalmq.common.record import (
    CRC32_RESERVED_LEN,
    RecordError,
    encode_record,
    patch_for_append,
    record_crc_ok,
    reserve_record_crc,
    seal_record_crc,
    view_record,
)
from tidalmq.common.record_batch_crc import reserve_crc, seal_crc


def _sealed(props: str) -> bytearray:
    rec = encode_record(topic="T", queue_id=1, body=b"hello", properties=props)
    reserve_record_crc(rec)
    patch_for_append(rec, 0, 7, 4096, 1_700_000_000_000)
    seal_record_crc(rec, 0, len(rec))
    return rec


@pytest.mark.parametrize("props", ["KEYS\x01k1\x02", "KEYS\x01k1", ""], ids=["ended", "unended", "none"])
def test_trailer_is_rocketmqs_and_holds_the_crc_of_the_record_before_it(props: str) -> None:
    rec = _sealed(props)
    v = view_record(rec)
    assert v.total == len(rec) and v.body_crc == zlib.crc32(b"hello") & 0x7FFFFFFF  # BODYCRC stays the body's
    tail = bytes(rec[-CRC32_RESERVED_LEN:])
    assert tail[:9] == b"__CRC32#\x01" and tail[-1:] == b"\x02"
    assert int(tail[9:19][::-1]) == zlib.crc32(rec[:-CRC32_RESERVED_LEN]) & 0x7FFFFFFF  # digits low first
    client = dict(p.split("\x01") for p in props.split("\x02") if p)
    assert v.properties == {**client, "__CRC32#": tail[9:19].decode()}
    assert record_crc_ok(rec, 0, len(rec)) is True
    v.check()


def test_any_changed_byte_before_the_trailer_fails_it() -> None:
    rec = _sealed("KEYS\x01k1\x02TAGS\x01a\x02")
    for at in range(len(rec) - CRC32_RESERVED_LEN):
        bad = bytearray(rec)
        bad[at] ^= 0x01
        assert record_crc_ok(bad, 0, len(bad)) is False, at
    keys_at = bytes(rec).index(b"k1") + 1  # a value's letter: the properties stay well formed
    bad = bytearray(rec)
    bad[keys_at] ^= 0x01
    with pytest.raises(RecordError, match="record CRC mismatch"):
        view_record(bad).check()


def test_a_record_without_the_trailer_is_left_to_its_body_crc() -> None:
    rec = encode_record(topic="T", queue_id=1, body=b"hello", properties="KEYS\x01k1\x02")
    assert record_crc_ok(rec, 0, len(rec)) is None
    view_record(rec).check()


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "pieces"])
@pytest.mark.parametrize("ends", ["all", "none", "mixed"])
def test_a_batch_is_sealed_as_single_records_are(packed: bool, ends: str) -> None:
    props = [b"KEYS\x01k%02d" % i + (b"\x02" if ends == "all" or (ends == "mixed" and i % 2) else b"x")
             for i in range(20)]
    batch = _encode(b"".join(_item(b"b%03d" % i, p) for i, p in enumerate(props)), packed)
    client = [bytes(p) for p in batch.item_properties()]
    reserve_crc(batch)
    reserve_crc(batch)  # a put retried after a busy lock reserves again: nothing more is added
    batch.heads["queue_offset"] = range(5, 25)
    batch.heads["phys"] = batch.starts + (1 << 20)
    batch.patch_shared(8, struct.pack(">q", 1_700_000_000_000))
    seal_crc(batch)
    assert [bytes(p) for p in batch.item_properties()] == client
    recs = batch.records()
    for i, rec in enumerate(recs):
        v = view_record(rec)
        v.check()
        assert record_crc_ok(rec, 0, len(rec)) is True and v.queue_offset == 5 + i
        assert v.properties["KEYS"].startswith(f"k{i:02d}") and "__CRC32#" in v.properties
        assert rec[-CRC32_RESERVED_LEN - 1] == 2  # the client's last pair ended, where it was not


def test_records_checked_at_once_get_the_verdict_each_gets_alone() -> None:
    """``records_crc_sound`` over a span of records (sealed ones and one written without the trailer):
    True exactly when no record's ``record_crc_ok`` is False, whichever byte of the span is changed."""
    import numpy as np

    from tidalmq.common.record import records_crc_sound

    recs = [_sealed(f"KEYS\x01k{i}\x02TAGS\x01t\x02") for i in range(4)]
    recs.insert(2, encode_record(topic="T", queue_id=1, body=b"plain", properties="KEYS\x01p\x02"))
    span = bytearray(b"".join(recs))
    starts = np.cumsum([0] + [len(r) for r in recs[:-1]]).astype(np.int64)
    ends = starts + np.array([len(r) for r in recs], np.int64)

    def alone(buf: bytearray) -> bool:
        return all(record_crc_ok(buf, int(s), int(e - s)) is not False for s, e in zip(starts, ends, strict=True))

    assert records_crc_sound(memoryview(span), starts, ends) is True
    assert records_crc_sound(memoryview(span), starts[2:3], ends[2:3]) is True  # no trailer at all
    failed = 0
    for at in range(len(span)):
        bad = bytearray(span)
        bad[at] ^= 0x01
        verdict = alone(bad)
        failed += not verdict
        assert records_crc_sound(memoryview(bad), starts, ends) is verdict, at
    assert failed > len(span) // 2  # the flips the CRC covers (the plain record's, and none of 4 trailers, pass)
