"""The tidalmq source on real Spark (local[2]): batch and streaming reads, every starting-offset form, tag
and SQL92 filtering, admission control, committed group offsets, and errors at load()."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce, reader, run_available_now, stream_reader, topic_name

pytestmark = pytest.mark.spark


def test_batch_read_all_columns(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkAll")
    create_topic(ns, topic, 4)
    ids = produce(ns, topic, 400, tags=lambda i: "A" if i % 2 else "B")
    df = reader(spark, ns, topic).load()
    assert df.schema.fieldNames() == ["topic", "broker", "queueId", "queueOffset", "msgId", "tags", "keys",
                                      "properties", "body", "bornTimestamp", "storeTimestamp", "reconsumeTimes"]
    rows = df.collect()
    assert len(rows) == 400
    assert sorted(r.msgId for r in rows) == sorted(ids)  # the client id (UNIQ_KEY), as MessageExt.msg_id
    by_body = {bytes(r.body).decode(): r for r in rows}
    r = by_body["m7"]
    assert r.topic == topic and r.tags == "A" and r.keys == "k7" and r.properties["i"] == "7"
    assert r.properties["UNIQ_KEY"] == r.msgId and r.reconsumeTimes == 0
    assert r.storeTimestamp >= r.bornTimestamp
    # offsets are dense per queue, from 0
    per_queue: dict[int, list[int]] = {}
    for row in rows:
        per_queue.setdefault(row.queueId, []).append(row.queueOffset)
    for offs in per_queue.values():
        assert sorted(offs) == list(range(len(offs)))


def test_batch_offsets_forms(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkOffs")
    create_topic(ns, topic, 2)
    produce(ns, topic, 100, batch=10)  # batches of 10, round-robin over the two queues
    counts = {r.queueId: r["count"] for r in reader(spark, ns, topic).load().groupBy("queueId").count().collect()}
    assert sum(counts.values()) == 100
    assert reader(spark, ns, topic, startingOffsets="latest").load().count() == 0
    broker = reader(spark, ns, topic).load().first().broker
    # per-queue JSON, both key forms, -2 = earliest; unnamed queues start at the earliest
    start = json.dumps({topic: {f"{broker}:0": 10, "1": -2}})
    assert reader(spark, ns, topic, startingOffsets=start).load().count() == 100 - min(10, counts.get(0, 0))
    end = json.dumps({topic: {f"{broker}:0": 5, f"{broker}:1": 3}})
    got = reader(spark, ns, topic, endingOffsets=end).load().select("queueId", "queueOffset").collect()
    assert sorted((r.queueId, r.queueOffset) for r in got) == [(0, i) for i in range(5)] + [(1, i) for i in range(3)]
    # timestamp: only what was stored at or after it
    time.sleep(0.05)
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    produce(ns, topic, 30, start=100)
    later = reader(spark, ns, topic, startingOffsets=f"timestamp:{ts}").load()
    assert sorted(bytes(r.body).decode() for r in later.collect()) == sorted(f"m{i}" for i in range(100, 130))
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1000)) + f".{ts % 1000:03d}Z"
    assert reader(spark, ns, topic, startingOffsets=f"timestamp:{iso}").load().count() == 30
    # large backlogs are split into several partitions of one queue
    split = reader(spark, ns, topic, maxRecordsPerPartition="20").load()
    assert split.rdd.getNumPartitions() >= 130 // 20
    assert split.count() == 130


def test_tag_and_sql92_filtering(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkTags")
    create_topic(ns, topic, 2)
    produce(ns, topic, 300, tags=lambda i: "ABC"[i % 3])
    rows = reader(spark, ns, topic, subExpression="A || C").load().select("tags").collect()
    assert len(rows) == 200 and {r.tags for r in rows} == {"A", "C"}
    sql = reader(spark, ns, topic, subExpressionType="SQL92", subExpression="i < 10").load()
    assert sorted(int(r.properties["i"]) for r in sql.collect()) == list(range(10))
    streamed, _ = run_available_now(stream_reader(spark, ns, topic, startingOffsets="earliest", subExpression="B")
                                    .load(), Path(spark_broker.data_dir).parent, "tags_b")
    assert len(streamed) == 100 and {r.tags for r in streamed} == {"B"}


def test_stream_starting_forms_and_admission_control(spark, spark_broker, tmp_path) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkStream")
    create_topic(ns, topic, 2)
    produce(ns, topic, 200)
    rows, batches = run_available_now(
        stream_reader(spark, ns, topic, startingOffsets="earliest", maxMessagesPerTrigger="50").load(),
        tmp_path, "s_earliest")
    assert len(rows) == 200 and len({r.msgId for r in rows}) == 200
    assert len(batches) >= 4 and max(batches) <= 50  # honoured through latestOffset(start, ReadMaxRows)
    rows, _ = run_available_now(stream_reader(spark, ns, topic, startingOffsets="latest").load(), tmp_path, "s_latest")
    assert rows == []
    broker = rows and rows[0].broker or reader(spark, ns, topic).load().first().broker
    start = json.dumps({topic: {f"{broker}:0": 0, f"{broker}:1": -1}})
    rows, _ = run_available_now(stream_reader(spark, ns, topic, startingOffsets=start).load(), tmp_path, "s_json")
    assert rows and {r.queueId for r in rows} == {0}
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    produce(ns, topic, 20, start=200)
    rows, _ = run_available_now(stream_reader(spark, ns, topic, startingOffsets=f"timestamp:{ts}").load(),
                                tmp_path, "s_ts")
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(f"m{i}" for i in range(200, 220))


def test_stream_latest_sees_new_messages_and_commits_group(spark, spark_broker, tmp_path) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkLive")
    group = topic_name("SparkGroup")
    create_topic(ns, topic, 2)
    produce(ns, topic, 10)
    df = stream_reader(spark, ns, topic, consumerGroup=group).load()  # latest by default
    q = (df.writeStream.format("memory").queryName("live").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while not q.recentProgress and time.monotonic() < deadline:
            time.sleep(0.1)
        produce(ns, topic, 50, start=10)
        while spark.sql("select count(*) c from live").first().c < 50 and time.monotonic() < deadline:
            time.sleep(0.2)
        rows = spark.sql("select body from live").collect()
        assert sorted(bytes(r.body).decode() for r in rows) == sorted(f"m{i}" for i in range(10, 60))
        # Spark commits a batch's end when it plans the next one (as with Kafka): one more message, and
        # everything before it is committed to the broker, where mqadmin consumerProgress shows the pipeline's lag
        from tidalmq.client.sync import Admin

        produce(ns, topic, 1, start=60)
        with Admin(ns) as admin:
            while time.monotonic() < deadline:
                progress = admin.consumer_progress(group, topic)
                if progress and sum(p.consumer_offset for p in progress) >= 60:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"group offsets not committed: {progress}")
    finally:
        q.stop()


def test_errors_at_load(spark, spark_broker) -> None:
    from pyspark.errors import AnalysisException

    from tests.support import free_port

    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkErr")
    create_topic(ns, topic, 1)

    def fails(fn, *needles: str) -> None:
        with pytest.raises(AnalysisException) as ei:
            fn()
        for n in needles:
            assert n in str(ei.value), str(ei.value)[-2000:]

    fails(lambda: reader(spark, ns, "NoSuchTopic_xyz").load(), "topic 'NoSuchTopic_xyz' does not exist")
    fails(lambda: reader(spark, f"127.0.0.1:{free_port()}", topic).load(), "option 'nameserver'",
          "no TidalMQ NameServer answers")
    fails(lambda: reader(spark, spark_broker.broker_addr, topic).load(), "option 'nameserver'",
          f"{spark_broker.broker_addr} is not a NameServer", "a broker's port?")
    fails(lambda: stream_reader(spark, ns, topic, maxOffsetsPerTrigger="abc").load(),
          "option 'maxOffsetsPerTrigger' must be an integer")
    fails(lambda: reader(spark, ns, topic, startingOffset="earliest").load(), "unknown option", "startingOffsets")
    fails(lambda: reader(spark, ns, topic, startingOffsets="yesterday").load(), "option 'startingOffsets'")
    fails(lambda: reader(spark, ns, topic, failOnDataLoss="maybe").load(), "option 'failOnDataLoss'")
    fails(lambda: stream_reader(spark, ns, "NoSuchTopic_xyz").load(), "topic 'NoSuchTopic_xyz' does not exist")
    fails(lambda: stream_reader(spark, ns, topic, maxMessagesPerTrigger="-1").load(), "maxMessagesPerTrigger")
    fails(lambda: spark.read.format("tidalmq").option("nameserver", ns).load(), "'topic'", "'topicPattern'")


def test_topic_pattern(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    prefix = topic_name("SparkPat")
    for suffix in ("a", "b"):
        create_topic(ns, f"{prefix}_{suffix}", 1)
        produce(ns, f"{prefix}_{suffix}", 5)
    df = spark.read.format("tidalmq").option("nameserver", ns).option("topicPattern", f"{prefix}_.*").load()
    assert sorted(r.topic for r in df.select("topic").distinct().collect()) == [f"{prefix}_a", f"{prefix}_b"]
    both = reader(spark, ns, f"{prefix}_a,{prefix}_b").load()
    assert both.count() == 10
