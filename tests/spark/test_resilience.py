"""Pipelines that ride out a broker restart and write exactly once (broker ``duplicationEnable``), what the
sink accepts (a 10-day deliverTime), and what it refuses up front (overwrite, SQL92 without
enablePropertyFilter)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import create_topic, produce, reader, stream_reader, topic_name, wait_dispatched
from tests.support import Standalone

pytestmark = pytest.mark.spark

# Defaults otherwise: timerMaxDelaySec 400 days, enablePropertyFilter false.
SETTINGS = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024), "duplicationEnable": "true"}


@pytest.fixture
def dedup_broker(tmp_path: Path) -> Iterator[Standalone]:
    with Standalone(tmp_path / "data", SETTINGS) as s:
        yield s


def _count(ns: str, topic: str) -> int:
    from tidalmq.client.sync import Admin

    try:
        with Admin(ns) as admin:
            return sum(q.max_offset - q.min_offset for q in admin.topic_status(topic))
    except Exception:  # the broker is restarting
        return -1


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def test_the_writers_name_server_check_rides_out_a_name_server_still_starting(tmp_path: Path) -> None:
    """Spark makes a streaming query's writer anew for every micro-batch, and the writer first checks that
    the NameServer answers: one that is (re)starting at that moment is waited for, as a send waits
    (until sendTimeoutMs); one that never answers is still an option error."""
    from tidalmq.spark.options import TidalMQOptionError, parse_write_options
    from tidalmq.spark.sink import _check_nameserver

    s = Standalone(tmp_path / "data", SETTINGS)
    starting = threading.Thread(target=s.start)
    starting.start()  # a Python process's start-up: the check's first try finds no NameServer listening
    try:
        began = time.monotonic()
        _check_nameserver(parse_write_options({"nameserver": s.namesrv_addr, "topic": "T"}, streaming=True))
        assert time.monotonic() - began < 10.0
    finally:
        starting.join(60)
        s.stop()
    with pytest.raises(TidalMQOptionError, match="no TidalMQ NameServer answers at .* within sendTimeoutMs=1000: client-side error"):
        _check_nameserver(parse_write_options({"nameserver": s.namesrv_addr, "topic": "T", "sendTimeoutMs": "1000"},
                                              streaming=True))


def test_stream_rides_out_broker_restart_and_writes_exactly_once(spark, dedup_broker, tmp_path) -> None:
    s = dedup_broker
    ns = s.namesrv_addr
    src, out = topic_name("BlipIn"), topic_name("BlipOut")
    create_topic(ns, src, 4)
    create_topic(ns, out, 4)
    produce(ns, src, 3000)
    q = (stream_reader(spark, ns, src, startingOffsets="earliest", maxMessagesPerTrigger="400").load()
         .selectExpr("body").writeStream.format("tidalmq").option("nameserver", ns).option("topic", out)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        _wait(lambda: _count(ns, out) >= 400, 90, "the first micro-batches")
        s.kill()  # mid-stream: reads, offset queries and writes all meet a dead broker
        s.start()
        produce(ns, src, 1000, start=3000)
        _wait(lambda: _count(ns, out) >= 4000 or q.exception() is not None, 120, "every message in the output")
        assert q.exception() is None, str(q.exception())
    finally:
        q.stop()
    # Every batch planned, from the checkpoint's offset log: the last one may have written its rows and been
    # stopped before it reported progress, so recentProgress can miss it.
    batches = {int(f.name) for f in (tmp_path / "ck" / "offsets").iterdir() if f.name.isdigit()}
    wait_dispatched(ns, out, 4000)
    rows = reader(spark, ns, out).load().select("body", "msgId").collect()
    bodies = sorted(bytes(r.body).decode() for r in rows)
    assert bodies == sorted(f"m{i}" for i in range(4000))  # each exactly once
    # The keys are the sink's deterministic ones: (query id, batch id, partition) + row.
    qid = q.id
    prefixes = {hashlib.blake2b(f"{qid}\x00{b}\x00{p}".encode(), digest_size=12).hexdigest().upper()
                for b in range(max(batches) + 1) for p in range(8)}
    strays = [r.msgId for r in rows if r.msgId[:24] not in prefixes]
    assert not strays, (strays[:5], len(strays), sorted(batches), qid)


def test_batch_write_killed_and_rerun_writes_each_row_once(spark, dedup_broker) -> None:
    """A write that dies halfway (a failing row in the second partition, after arrow batches of both
    partitions went out) and is re-run with the same ``writeId``: every row stored once."""
    ns = dedup_broker.namesrv_addr
    topic = topic_name("Rerun")
    create_topic(ns, topic, 4)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        def write(fail: bool) -> None:
            body = "if(id = 1900, raise_error('the job dies here'), cast(id as string))" if fail else \
                "cast(id as string)"
            (spark.range(0, 2000, 1, 2).selectExpr(f"{body} as body").write.format("tidalmq")
             .option("nameserver", ns).option("topic", topic).option("writeId", "nightly-2026-11-23")
             .mode("append").save())

        with pytest.raises(Exception, match="the job dies here"):
            write(fail=True)
        _wait(lambda: _count(ns, topic) > 0, 20, "the rows written before the failure")
        assert 0 < _count(ns, topic) < 2000
        write(fail=False)
        write(fail=False)  # and once more: nothing new
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    wait_dispatched(ns, topic, 2000)
    bodies = sorted(int(bytes(r.body)) for r in reader(spark, ns, topic).load().select("body").collect())
    assert bodies == list(range(2000))


def test_ten_day_deliver_time_and_errors_say_where(spark, dedup_broker) -> None:
    from pyspark.errors import AnalysisException

    ns = dedup_broker.namesrv_addr
    topic = topic_name("TenDays")
    create_topic(ns, topic, 1)
    ten_days = int(time.time() * 1000) + 10 * 86400 * 1000
    (spark.range(3).selectExpr("cast(id as string) as body", f"timestamp_millis({ten_days}) as deliverTime")
     .write.format("tidalmq").option("nameserver", ns).option("topic", topic).mode("append").save())
    assert _count(ns, topic) == 0  # scheduled, not delivered early
    too_far = int(time.time() * 1000) + 401 * 86400 * 1000
    with pytest.raises(Exception) as ei:
        (spark.range(1).selectExpr("'x' as body", f"timestamp_millis({too_far}) as deliverTime")
         .write.format("tidalmq").option("nameserver", ns).option("topic", topic).mode("append").save())
    assert "broker answered 13" in str(ei.value) and "max delay" in str(ei.value), str(ei.value)[-1500:]
    with pytest.raises(AnalysisException, match="cannot overwrite"):
        (spark.range(1).selectExpr("'x' as body").write.format("tidalmq").option("nameserver", ns)
         .option("topic", topic).mode("overwrite").save())


def test_sql92_without_property_filter_fails_at_load(spark, dedup_broker) -> None:
    ns = dedup_broker.namesrv_addr
    topic = topic_name("NoSql")
    create_topic(ns, topic, 1)
    with pytest.raises(Exception, match="refused the SQL92 filter"):
        reader(spark, ns, topic, subExpressionType="SQL92", subExpression="a > 1").load()
    with pytest.raises(Exception, match="not a valid SQL92 filter"):
        reader(spark, ns, topic, subExpressionType="SQL92", subExpression="a >").load()


def test_outage_fails_after_the_deadline_with_the_cause(spark, tmp_path) -> None:
    s = Standalone(tmp_path / "data", SETTINGS).start()
    ns = s.namesrv_addr
    topic = topic_name("Outage")
    create_topic(ns, topic, 1)
    produce(ns, topic, 10)
    df = reader(spark, ns, topic, **{"fetchOffset.retryIntervalMs": "100", "retryDeadlineMs": "2000"}).load()
    s.kill()
    began = time.monotonic()
    with pytest.raises(Exception, match=r"failed after \d+ tries over .* client-side error"):
        df.count()
    assert time.monotonic() - began < 60


@pytest.mark.timeout(900)
def test_broker_killed_mid_write_and_rerun_stores_each_row_once(spark, tmp_path) -> None:
    """As a user first meets the exactly-once sink (issue #45): a broker with ``duplicationEnable`` and no
    duplication.json yet, a 500,000-row write with a ``writeId`` whose broker is SIGKILLed and restarted
    half-way. The write rides out the restart (``sendTimeoutMs`` 120 s by default, like Kafka's
    ``delivery.timeout.ms``), the window is rebuilt from the CommitLog (two 64 MiB files), and a rerun of
    the write stores nothing again."""
    n = 500_000
    with Standalone(tmp_path / "data", SETTINGS) as s:
        ns = s.namesrv_addr
        topic = topic_name("KillWrite")
        create_topic(ns, topic, 4)
        assert not (tmp_path / "data" / "store" / "config" / "duplication.json").exists()
        killed: list[bool] = []
        errors: list[BaseException] = []

        def write() -> None:
            (spark.range(0, n, 1, 2).selectExpr("cast(id as string) as body").write.format("tidalmq")
             .option("nameserver", ns).option("topic", topic).option("writeId", "load-2026-12-02")
             .mode("append").save())

        def kill_half_way() -> None:  # beside the write: PySpark finds no data source from another thread
            try:
                _wait(lambda: _count(ns, topic) >= n // 5, 300, "a fifth of the rows")
                s.kill()
                killed.append(_count(ns, topic) < n)
                s.start()
            except BaseException as e:  # noqa: BLE001 - asserted below
                errors.append(e)

        t = threading.Thread(target=kill_half_way)
        t.start()
        try:
            write()  # rides out the restart
        finally:
            t.join(400)
        assert not t.is_alive() and not errors, errors
        assert killed == [True]  # the broker died while rows were still being written
        write()  # the rerun: every row is answered from the window
        wait_dispatched(ns, topic, n, timeout=120)
        assert _count(ns, topic) == n
        row = reader(spark, ns, topic).load().selectExpr("count(*) as rows", "count(distinct body) as bodies").first()
        assert (row.rows, row.bodies) == (n, n)
