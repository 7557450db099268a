"""Record, property, msgId, tag hash and fastjson codecs."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidalmq.common import fastjson
from tidalmq.common.message import decode_properties, encode_properties
from tidalmq.common.msgid import UniqIdGenerator, decode_offset_msg_id, encode_offset_msg_id
from tidalmq.common.record import (
    BLANK_MAGIC_CODE,
    RecordError,
    decode_record,
    encode_blank,
    encode_record,
    patch_for_append,
    peek_size_magic,
)
from tidalmq.common.sysflag import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG
from tidalmq.common.taghash import java_string_hash, tags_hash_code

prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), min_size=1, max_size=20)


@given(st.dictionaries(prop_text, st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), max_size=20), max_size=8))
def test_properties_roundtrip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


def test_java_string_hash_matches_known_values() -> None:
    # Values computed by Java's String.hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648
    assert tags_hash_code(None) == 0


def test_offset_msg_id_roundtrip_ipv4_and_ipv6() -> None:
    mid = encode_offset_msg_id(bytes([127, 0, 0, 1]), 10911, 123456)
    assert len(mid) == 32 and mid == mid.upper()
    assert decode_offset_msg_id(mid) == ("127.0.0.1", 10911, 123456)
    mid6 = encode_offset_msg_id(bytes(15) + b"\x01", 10911, 7)
    assert len(mid6) == 56
    assert decode_offset_msg_id(mid6) == ("::1", 10911, 7)
    with pytest.raises(ValueError):
        decode_offset_msg_id("abc")


def test_uniq_ids_are_unique_and_32_hex() -> None:
    gen = UniqIdGenerator()
    ids = {gen.next_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_uniq_ids_of_a_batch_continue_the_counter() -> None:
    gen = UniqIdGenerator()
    first = gen.next_id()
    batch = gen.next_ids(70000)  # wraps the 16-bit counter
    after = gen.next_id()
    ids = [first, *batch, after]
    assert all(len(i) == 32 and i[:20] == first[:20] for i in ids)  # ip, pid, generator: one prefix
    counters = [int(i[-4:], 16) for i in ids]
    assert all((b - a) & 0xFFFF == 1 for a, b in zip(counters, counters[1:], strict=False))
    assert len(set(gen.next_ids(5000))) == 5000 and gen.next_ids(0) == []


def test_encode_properties_skips_none_and_writes_non_strings() -> None:
    assert encode_properties({"A": "1", "B": "x y"}) == "A\x011\x02B\x01x y\x02"
    assert encode_properties({"A": None, "B": 2}) == "B\x012\x02"  # type: ignore[dict-item]
    assert encode_properties({}) == "" and encode_properties(None) == ""


@given(
    body=st.binary(max_size=2000),
    topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,100}", fullmatch=True),
    props=st.dictionaries(prop_text, prop_text, max_size=5),
    v6=st.booleans(),
    qid=st.integers(0, 1000),
)
def test_record_roundtrip(body: bytes, topic: str, props: dict[str, str], v6: bool, qid: int) -> None:
    host = bytes(16) if v6 else bytes([10, 0, 0, 1])
    rec = encode_record(topic=topic, queue_id=qid, body=body, properties=props, born_host=host, born_port=5,
                        store_host=host, store_port=10911, born_timestamp=42, reconsume_times=3)
    patch_for_append(rec, 0, queue_offset=17, physical_offset=4096, store_timestamp=99)
    m = decode_record(rec, check_crc=True)
    assert (m.topic, m.queue_id, m.body, m.properties) == (topic, qid, body, props)
    assert (m.queue_offset, m.commit_log_offset, m.store_timestamp, m.born_timestamp) == (17, 4096, 99, 42)
    assert m.reconsume_times == 3 and m.store_size == len(rec)
    assert m.body_crc == zlib.crc32(body) & 0x7FFFFFFF
    assert bool(m.sysflag & BORNHOST_V6_FLAG) == v6 and bool(m.sysflag & STOREHOSTADDRESS_V6_FLAG) == v6
    assert m.store_host[1] == 10911


def test_record_field_offsets_follow_rocketmq_layout() -> None:
    rec = encode_record(topic="T", queue_id=2, body=b"xyz", properties={"a": "b"}, flag=5, born_timestamp=1)
    import struct

    total, magic, crc, qid, flag, qoff, poff, sysflag, born = struct.unpack_from(">iiiiiqqiq", rec)
    assert total == len(rec) and magic == -626843481 and qid == 2 and flag == 5 and born == 1
    # body length sits after bornhost(8) storets(8) storehost(8) reconsume(4) prepared(8)
    assert struct.unpack_from(">i", rec, 48 + 8 + 8 + 8 + 4 + 8) == (3,)
    assert rec.endswith(b"\x00\x04a\x01b\x02")


def test_corrupt_records_raise() -> None:
    rec = encode_record(topic="T", queue_id=0, body=b"hello", properties={})
    bad = bytearray(rec)
    bad[-10] ^= 0xFF  # inside the body
    with pytest.raises(RecordError):
        decode_record(bad, check_crc=True)
    with pytest.raises(RecordError):
        decode_record(rec[:-1])
    with pytest.raises(RecordError):
        decode_record(b"\x00" * 64)
    assert peek_size_magic(encode_blank(100)) == (100, BLANK_MAGIC_CODE)


def test_fastjson_integer_keys_both_ways() -> None:
    text = fastjson.dumps({"brokerAddrs": {0: "127.0.0.1:10911", 1: "x"}, "s": "a,1:b"})
    assert text == '{"brokerAddrs":{0:"127.0.0.1:10911",1:"x"},"s":"a,1:b"}'
    assert fastjson.loads(text) == {"brokerAddrs": {"0": "127.0.0.1:10911", "1": "x"}, "s": "a,1:b"}


@given(st.lists(st.tuples(st.binary(max_size=300), st.dictionaries(prop_text, prop_text, max_size=3), st.integers(0, 7)),
                min_size=1, max_size=8), st.booleans())
def test_batch_records_equal_one_by_one_encoding(items: list[tuple[bytes, dict[str, str], int]], v6: bool) -> None:
    import struct

    from tidalmq.common.record_batch import encode_batch_records

    host = bytes(16) if v6 else bytes([10, 0, 0, 2])
    parts = []
    for body, props, flag in items:
        pb = encode_properties(props).encode()
        parts.append(struct.pack(">iiiii", 20 + len(body) + 2 + len(pb), 0, 0, flag, len(body)) + body
                     + struct.pack(">h", len(pb)) + pb)
    recs = encode_batch_records(b"".join(parts), topic="TB", queue_id=3, sysflag=0, born_timestamp=5, born_host=host,
                                born_port=7, store_host=host, store_port=10911, reconsume_times=0)
    expected = [encode_record(topic="TB", queue_id=3, body=body, properties=props, flag=flag, born_timestamp=5,
                              born_host=host, born_port=7, store_host=host, store_port=10911)
                for body, props, flag in items]
    assert recs.records() == expected
    assert recs.sizes.tolist() == [len(r) for r in expected]
    # each record's properties, as the checks and the timer rewrite read them: kept by the encoder, kept
    # by a selection, and those of the new properties once redirected
    texts = [encode_properties(props).encode() for _, props, _ in items]
    assert [bytes(p) for p in recs.item_properties()] == texts
    keep = list(range(len(items)))[::-2]
    assert [bytes(p) for p in recs.select(keep).item_properties()] == [texts[i] for i in keep]
    moved = [t + b"REAL_TOPIC\x01TB\x02" for t in texts]
    assert recs.carries(("REAL_TOPIC",)) == any("REAL_TOPIC" in props for _, props, _ in items)
    recs.redirect("TT", 0, [struct.pack(">H", len(m)) + m for m in moved],
                  [list(d) for d in recs.dispatch_properties])
    assert [bytes(p) for p in recs.item_properties()] == moved
    assert recs.carries(("REAL_TOPIC",)) and not recs.carries(("NO_SUCH",))


# Names that are, contain or begin like the ones looked for, values that hold them and a name/value separator.
_near_names = st.sampled_from(["DELAY", "MYDELAY", "DELAYX", "REAL_TOPIC", "KEYS", "TAGS", "D"])
_near_values = st.sampled_from(["", "3", "DELAY", "x\x01DELAY", "REAL_TOPIC\x01y", "\x01"])


@given(st.lists(st.lists(st.tuples(_near_names, _near_values), max_size=4), min_size=1, max_size=6),
       st.booleans())
def test_a_batch_names_the_first_property_it_carries_as_its_records_would(
        records: list[list[tuple[str, str]]], unended: bool) -> None:
    """``RecordBatch.first_carried`` (one search over the batch's joined properties) finds what reading the
    records one by one finds: the first record holding one of the names as a property name, its first such
    property; nothing for a name that only begins, ends or holds one, or a value that holds one."""
    import struct

    from tidalmq.common.record_batch import encode_batch_records

    parts = []
    for fields in records:
        pb = "".join(f"{k}\x01{v}\x02" for k, v in fields).encode()
        if unended and pb:
            pb = pb[:-1]  # a client's last property without its separator
        parts.append(struct.pack(">iiiii", 20 + 1 + 2 + len(pb), 0, 0, 0, 1) + b"b" + struct.pack(">h", len(pb)) + pb)
    recs = encode_batch_records(b"".join(parts), topic="TB", queue_id=3, sysflag=0, born_timestamp=5,
                                born_host=bytes(4), born_port=7, store_host=bytes(4), store_port=10911)
    names = ("DELAY", "REAL_TOPIC")
    expected = next((k for fields in records for k, _ in fields if k in names), None)
    assert recs.first_carried(names) == expected
    assert recs.carries(names) == (expected is not None)


def test_malformed_batch_body_raises() -> None:
    from tidalmq.common.record_batch import encode_batch_records

    kw = dict(topic="T", queue_id=0, sysflag=0, born_timestamp=0, born_host=bytes(4), born_port=0,
              store_host=bytes(4), store_port=0)
    with pytest.raises(RecordError):
        encode_batch_records(b"\x00\x00\x00\x30" + b"\x00" * 10, **kw)  # type: ignore[arg-type]
    with pytest.raises(RecordError):
        encode_batch_records(b"\x00\x00\x00\x16" + b"\x00" * 12 + b"\x00\x00\x00\x05" + b"\x00\x00", **kw)  # type: ignore[arg-type]


@given(st.binary(max_size=5000), st.integers(0, 16))
def test_body_crc_is_rocketmqs_masked_crc32(body: bytes, cut: int) -> None:
    import zlib

    from tidalmq.common.record import body_crc

    view = memoryview(body)[cut:]
    assert body_crc(view) == zlib.crc32(view) & 0x7FFFFFFF


def test_fastjson_object_keys_written_and_read_as_rocketmqs() -> None:
    """fastjson writes a map keyed by objects (ConsumeStats' offsetTable by MessageQueue) with the object as
    the key; read back, the key is its JSON text. An object inside a list is not taken for a key."""
    key = fastjson.object_key({"brokerName": "b", "queueId": 0, "topic": "T"})
    text = fastjson.dumps({"consumeTps": 0.5, "offsetTable": {key: {"brokerOffset": 3}}, "l": [{"a": {1: 2}}, {}]})
    assert text == ('{"consumeTps":0.5,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":3}},'
                    '"l":[{"a":{1:2}},{}]}')
    back = fastjson.loads(text)
    assert back["offsetTable"] == {'{"brokerName":"b","queueId":0,"topic":"T"}': {"brokerOffset": 3}}
    assert back["l"] == [{"a": {"1": 2}}, {}]
