"""The tidalmq sink on real Spark: every column, ordered writes by sharding key, scheduled writes (deliver
time, delay level) that arrive on time, streaming writes, and errors (schema at planning, broker at run)."""

from __future__ import annotations

import time

import pytest

from tests.spark.conftest import (
    create_topic,
    reader,
    run_available_now,
    stream_reader,
    topic_name,
    wait_dispatched,
)

pytestmark = pytest.mark.spark


def _writer(df, ns: str, **options: str):
    return df.write.format("tidalmq").option("nameserver", ns).options(**options).mode("append")


def test_write_all_columns_and_read_back(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SinkAll")
    create_topic(ns, topic, 4)
    df = spark.range(500).selectExpr(
        "cast(id as string) as body", f"'{topic}' as topic", "if(id % 2 = 0, 'even', 'odd') as tags",
        "array(concat('k', cast(id as string)), 'all') as keys", "map('n', cast(id as string)) as properties")
    _writer(df, ns).save()
    wait_dispatched(ns, topic, 500)
    rows = reader(spark, ns, topic).load().collect()
    assert len(rows) == 500
    r = next(x for x in rows if bytes(x.body) == b"42")
    assert r.tags == "even" and r.keys == "k42 all" and r.properties["n"] == "42"
    assert reader(spark, ns, topic, subExpression="odd").load().count() == 250
    # binary bodies and the default topic from the option
    _writer(spark.range(10).selectExpr("cast(cast(id as string) as binary) as body"), ns, topic=topic).save()
    wait_dispatched(ns, topic, 510)


def test_sharding_key_keeps_order_per_key(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SinkOrder")
    create_topic(ns, topic, 4)
    df = spark.range(0, 2000, 1, 2).selectExpr("concat(cast(id % 7 as string), ':', cast(id as string)) as body",
                                               "cast(id % 7 as string) as shardingKey")
    _writer(df, ns, topic=topic, batchSize="16").save()
    wait_dispatched(ns, topic, 2000)
    rows = reader(spark, ns, topic).load().select("queueId", "queueOffset", "body").collect()
    by_key: dict[str, list[tuple[int, int, int]]] = {}
    for r in rows:
        key, seq_text = bytes(r.body).decode().split(":")
        by_key.setdefault(key, []).append((r.queueId, r.queueOffset, int(seq_text)))
    for key, entries in by_key.items():
        assert len({q for q, _, _ in entries}) == 1, f"key {key} spread over queues"
        # within one Spark partition the rows of a key are in order; there are two input partitions
        per_task: dict[bool, list[int]] = {}
        for _q, _off, seq in sorted(entries):
            per_task.setdefault(seq < 1000, []).append(seq)
        for seqs in per_task.values():
            assert seqs == sorted(seqs), f"key {key} out of order"


def test_scheduled_writes_arrive_on_time(spark, spark_broker) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SinkTimer")
    create_topic(ns, topic, 2)
    now_ms = int(time.time() * 1000)
    due = now_ms + 4000
    df = spark.range(40).selectExpr("cast(id as string) as body",
                                    f"timestamp_millis({due} + id * 50) as deliverTime")
    t0 = time.time()
    _writer(df, ns, topic=topic).save()
    assert time.time() * 1000 < due, "the write took longer than the schedule: the test cannot tell"
    # delay level 1 = 1 s
    _writer(spark.range(5).selectExpr("concat('lvl', cast(id as string)) as body", "1 as delayLevel"), ns,
            topic=topic).save()
    assert reader(spark, ns, topic).load().filter("not body like 'lvl%'").count() == 0  # nothing early
    wait_dispatched(ns, topic, 45, timeout=30)
    rows = reader(spark, ns, topic).load().collect()
    assert len(rows) == 45
    lateness = []
    for r in rows:
        body = bytes(r.body).decode()
        if body.startswith("lvl"):
            assert r.storeTimestamp.timestamp() >= t0 + 0.9
            continue
        want = int(r.properties["TIDALMQ_DELIVER_MS"])
        assert want == due + int(body) * 50
        stored = int(round(r.storeTimestamp.timestamp() * 1000))
        lateness.append(stored - want)
    assert min(lateness) >= 0, f"delivered early: {min(lateness)} ms"
    assert max(lateness) < 1500, f"delivered late: {max(lateness)} ms"


def test_stream_write(spark, spark_broker, tmp_path) -> None:
    ns = spark_broker.namesrv_addr
    src, dst = topic_name("SinkSrc"), topic_name("SinkDst")
    create_topic(ns, src, 2)
    create_topic(ns, dst, 2)
    _writer(spark.range(300).selectExpr("cast(id as string) as body", "'t' as tags"), ns, topic=src).save()
    wait_dispatched(ns, src, 300)
    q = (stream_reader(spark, ns, src, startingOffsets="earliest").load().select("body", "tags", "keys")
         .writeStream.format("tidalmq").option("nameserver", ns).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    wait_dispatched(ns, dst, 300)
    rows, _ = run_available_now(stream_reader(spark, ns, dst, startingOffsets="earliest").load(), tmp_path, "dst")
    assert sorted(int(bytes(r.body)) for r in rows) == list(range(300))


def test_errors(spark, spark_broker) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException, PythonException

    ns = spark_broker.namesrv_addr
    topic = topic_name("SinkErr")
    create_topic(ns, topic, 1)
    with pytest.raises(AnalysisException, match="column 'body' must be string or binary"):
        _writer(spark.range(3).selectExpr("id as body"), ns, topic=topic).save()
    with pytest.raises(AnalysisException, match="column 'payload' is not a column the tidalmq sink writes"):
        _writer(spark.range(3).selectExpr("cast(id as string) as payload"), ns, topic=topic).save()
    with pytest.raises(AnalysisException, match="columns 'body' and 'value' are both written as the message's body"):
        _writer(spark.range(3).selectExpr("'x' as body", "'y' as value"), ns, topic=topic).save()
    with pytest.raises(AnalysisException, match="column 'key' must be string or binary"):
        _writer(spark.range(3).selectExpr("'x' as value", "id as key"), ns, topic=topic).save()
    with pytest.raises(AnalysisException, match="column 'deliverTime' must be timestamp"):
        _writer(spark.range(3).selectExpr("'x' as body", "'soon' as deliverTime"), ns, topic=topic).save()
    with pytest.raises(AnalysisException, match="unknown option"):
        _writer(spark.range(3).selectExpr("'x' as body"), ns, topc=topic).save()
    # the broker refuses a deliver time beyond its timerMaxDelaySec (3600 s here): a task failure that says so
    far = int(time.time() * 1000) + 2 * 3600 * 1000
    with pytest.raises((PythonException, Py4JJavaError, Exception)) as ei:
        _writer(spark.range(2).selectExpr("'x' as body", f"timestamp_millis({far}) as deliverTime"), ns,
                topic=topic, retries="0").save()
    assert "tidalmq sink" in str(ei.value) and "max delay" in str(ei.value), str(ei.value)[-1500:]
