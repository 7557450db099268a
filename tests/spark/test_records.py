"""The Spark source's Arrow columns come from the one record view (docs/broker.md "The record view").
In the Spark suite (``--run-spark``), where pyarrow is installed."""

from __future__ import annotations

import zlib

import pytest

from tests.common.test_record_view import CASES, _record
from tidalmq.common import sysflag as sf
from tidalmq.common.record import RecordError

pytestmark = pytest.mark.spark


def test_spark_columns_read_records_through_the_view() -> None:
    from tidalmq.spark.records import decode_bodies

    recs = [_record(b, s, m) for b, s, m in CASES]
    table = decode_bodies([(b"".join(recs), 0, 100)], "broker-a").to_pydict()
    assert table["topic"] == ["Topic-é"] * len(CASES) and table["tags"] == ["t"] * len(CASES)
    assert table["keys"] == ["a b"] * len(CASES) and table["queueOffset"] == [12] * len(CASES)
    # COMPRESSED is set but the body does not inflate: kept as it is, as MessageDecoder does
    assert table["body"] == [b"body \x00\xff bytes"] * len(CASES)
    second = bytearray(recs[1])
    second[4] ^= 0xFF  # its magic
    with pytest.raises(RecordError):
        decode_bodies([(bytes(recs[0] + second), 0, 100)], "b")


def test_kafka_shape_of_the_columns() -> None:
    from tidalmq.spark.records import KAFKA_ARROW_SCHEMA, KAFKA_ARROW_SCHEMA_HEADERS, decode_bodies, to_kafka

    native = decode_bodies([(b"".join(_record(b, s, m) for b, s, m in CASES), 0, 100)], "broker-a")
    plain = to_kafka(native, include_headers=False)
    assert plain.schema == KAFKA_ARROW_SCHEMA
    k = plain.to_pydict()
    n = len(CASES)
    assert k["key"] == [b"a b"] * n and k["value"] == native.column("body").to_pylist()
    assert k["partition"] == native.column("queueId").to_pylist() and k["offset"] == [12] * n
    assert k["timestamp"] == native.column("bornTimestamp").to_pylist() and k["timestampType"] == [0] * n
    with_headers = to_kafka(native, include_headers=True)
    assert with_headers.schema == KAFKA_ARROW_SCHEMA_HEADERS
    headers = with_headers.column("headers").to_pylist()[0]
    props = dict(native.column("properties").to_pylist()[0])
    assert {h["key"]: h["value"].decode() for h in headers} == props and "TAGS" in props


def _random_records(n: int, seed: int) -> list[bytes]:
    """Records of every layout (IPv4/IPv6 hosts, magic v1/v2) with properties of every shape the text
    format allows: none at all, empty values, a value holding the name separator, a name given twice,
    non-ASCII text, an empty UNIQ_KEY (the offset id stands in)."""
    import random

    from tidalmq.common.record import encode_record

    rnd = random.Random(seed)
    names = ["TAGS", "KEYS", "UNIQ_KEY", "a", "bé", "x"]
    values = ["", "v", "vé\x01w", "t1", "k1 k2", "0" * 32]
    out = []
    for i in range(n):
        born, store, magic = CASES[i % len(CASES)]
        props = {rnd.choice(names): rnd.choice(values) for _ in range(rnd.randint(0, 5))}
        out.append(bytes(encode_record(
            topic=rnd.choice(["T", "Tö", "%RETRY%g"]), queue_id=rnd.randint(0, 3), body=rnd.randbytes(rnd.randint(0, 40)),
            properties=props, born_timestamp=rnd.randint(0, 2**41), born_host=born, born_port=rnd.randint(1, 65535),
            store_host=store, store_port=10911, store_timestamp=rnd.randint(0, 2**41), reconsume_times=rnd.randint(0, 16),
            queue_offset=i, physical_offset=rnd.randint(0, 2**40), magic=magic)))
    return out


@pytest.mark.parametrize("tags", [None, frozenset({"t1"}), frozenset({"v", ""})], ids=["all", "t1", "v-or-empty"])
def test_column_wise_decode_matches_the_row_by_row_one(tags: frozenset[str] | None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The source's decode reads all records of a batch column by column (numpy and Arrow, no object a
    row); each row is what decoding the records one by one gives, for every layout and properties shape,
    queue-offset range and tag filter."""
    from tidalmq.spark import records

    recs = _random_records(3000, seed=7)
    pieces = [(b"".join(recs[k : k + 37]), 150, 2850) for k in range(0, len(recs), 37)]
    expected = records.decode_bodies(pieces, "broker-a", tags, one_by_one=True).to_pydict()
    assert 0 < len(expected["topic"]) <= 2700 and (tags is None) == (len(expected["topic"]) == 2700)

    def no_fallback(*_a: object, **_k: object) -> None:
        raise AssertionError("the batch went row by row")

    monkeypatch.setattr(records, "RowColumns", no_fallback)
    cols = records.Columns("broker-a")
    for body, lo, hi in pieces:
        cols.add_body(body, lo, hi, tags)
    assert cols.last_offset == 2849
    assert cols.take().to_pydict() == expected


def test_a_compressed_body_is_inflated() -> None:
    from tidalmq.common.record import encode_record
    from tidalmq.spark.records import decode_bodies

    body = b"hello " * 50
    rec = encode_record(topic="T", queue_id=0, body=zlib.compress(body), properties={"UNIQ_KEY": "U1"},
                        sysflag=sf.COMPRESSED_FLAG, queue_offset=0)
    plain = encode_record(topic="T", queue_id=0, body=b"as is", properties={"UNIQ_KEY": "U2"}, queue_offset=1)
    table = decode_bodies([(bytes(rec + plain), 0, 2)], "b").to_pydict()
    assert table["body"] == [body, b"as is"] and table["msgId"] == ["U1", "U2"]


def test_text_that_is_not_utf8_is_a_record_error() -> None:
    from tidalmq.spark.records import decode_bodies

    rec = bytearray(_random_records(1, seed=1)[0])
    rec[-2] = 0xFF  # inside the properties: no longer UTF-8
    good = _random_records(2, seed=2)
    with pytest.raises(RecordError, match="not UTF-8"):
        decode_bodies([(good[0] + bytes(rec) + good[1], 0, 10)], "b")
    with pytest.raises(RecordError):
        decode_bodies([(good[0] + good[1][:-5], 0, 10)], "b")  # the last record cut short
