"""The Spark source's Arrow columns come from the one record view (docs/broker.md "The record view").
In the Spark suite (``--run-spark``), where pyarrow is installed."""

from __future__ import annotations

import pytest

from tests.common.test_record_view import CASES, _record
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
