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
