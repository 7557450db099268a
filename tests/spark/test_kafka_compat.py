"""A Kafka source job ported to tidalmq by changing the format name and the address: Kafka's option
spellings and its source schema, on real Spark (local[2])."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce, run_available_now, topic_name

pytestmark = pytest.mark.spark


def _kafka_reader(reader, ns: str, **options: str):
    return reader.format("tidalmq").option("nameserver", ns).options(**options)


def test_kafka_options_and_schema_in_batch(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkKafka")
    create_topic(ns, topic, 2)
    produce(ns, topic, 40, batch=10)
    df = _kafka_reader(spark.read, ns, subscribe=topic, kafkaCompatibleSchema="true", includeHeaders="true").load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]
    rows = df.collect()
    assert len(rows) == 40
    r = next(r for r in rows if bytes(r.value) == b"m7")
    assert bytes(r.key) == b"k7" and r.topic == topic and r.timestampType == 0
    assert {h.key: bytes(h.value) for h in r.headers}["i"] == b"7"
    # Kafka's query from its docs: cast key and value to strings
    assert df.selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v").where("v = 'm3'").first().k == "k3"
    # assign: only queue 1
    only1 = _kafka_reader(spark.read, ns, assign=json.dumps({topic: [1]}), kafkaCompatibleSchema="true").load()
    got = only1.collect()
    assert got and {g.partition for g in got} == {1} and len(got) == sum(1 for r in rows if r.partition == 1)
    # by timestamp: only what was stored at or after it, queue by queue
    time.sleep(0.05)
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    produce(ns, topic, 20, start=40)
    later = _kafka_reader(spark.read, ns, subscribe=topic, kafkaCompatibleSchema="true",
                          startingOffsetsByTimestamp=json.dumps({topic: {"0": ts, "1": ts}})).load()
    assert sorted(bytes(x.value).decode() for x in later.collect()) == sorted(f"m{i}" for i in range(40, 60))
    until = _kafka_reader(spark.read, ns, subscribe=topic,
                          endingOffsetsByTimestamp=json.dumps({topic: {"0": ts, "1": ts}})).load()
    assert until.count() == 40


def test_min_offsets_per_trigger_waits_for_max_trigger_delay(spark, spark_broker, tmp_path: Path) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkMinTrig")
    create_topic(ns, topic, 2)
    produce(ns, topic, 30)
    df = _kafka_reader(spark.readStream, ns, subscribe=topic, startingOffsets="earliest", kafkaCompatibleSchema="true",
                       minOffsetsPerTrigger="1000", maxTriggerDelay="3s", maxOffsetsPerTrigger="5000").load()
    # AvailableNow never waits for minOffsetsPerTrigger (it would wait forever)
    rows, _ = run_available_now(df, tmp_path, "min_now")
    assert len(rows) == 30
    q = (df.writeStream.format("memory").queryName("min_trig").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while spark.sql("select count(*) c from min_trig").first().c < 30 and time.monotonic() < deadline:
            time.sleep(0.1)  # the first trigger is not held (as Kafka's)
        first_done = time.monotonic()
        produce(ns, topic, 10, start=30)  # fewer than minOffsetsPerTrigger: held until maxTriggerDelay
        while spark.sql("select count(*) c from min_trig").first().c < 40 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert spark.sql("select count(*) c from min_trig").first().c == 40
        assert time.monotonic() - first_done >= 3.0 - 0.5  # the delay counts from the batch, a bit before
    finally:
        q.stop()
