"""Fixtures of the PySpark suite: one ``tidalmq standalone`` and one SparkSession (local[2]) for the session.

pyspark is imported inside the fixtures only, so the default suite (without the ``spark`` extra) collects
these modules and skips them (marker ``spark``, option ``--run-spark``)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Standalone

BROKER_SETTINGS = {
    "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
    "enablePropertyFilter": "true",  # SQL92 subExpression
    "timerPrecisionMs": "100",  # scheduled writes: lateness below 0.1 s plus the service's latency
    "timerMaxDelaySec": "3600",  # a deliver time further ahead is refused by the broker (error surfacing)
}


@pytest.fixture(scope="session", autouse=True)
def spark_local_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Spark's scratch dirs (blockmgr-*, spark-*) under the session's temp dir, for the drivers the tests
    start and SIGKILL too: a killed driver cannot remove its own, and they would stay in /tmp."""
    before = os.environ.get("SPARK_LOCAL_DIRS")
    os.environ["SPARK_LOCAL_DIRS"] = str(tmp_path_factory.mktemp("spark-local"))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SPARK_LOCAL_DIRS", None)
        else:
            os.environ["SPARK_LOCAL_DIRS"] = before


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = Standalone(tmp_path_factory.mktemp("spark-broker") / "data", BROKER_SETTINGS)
    s.start()
    try:
        yield s
    finally:
        try:
            s.stop()
        except RuntimeError:
            pass


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from tidalmq.spark import register

    session = (SparkSession.builder.master("local[2]").appName("tidalmq-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


def topic_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def create_topic(ns: str, topic: str, queues: int = 4) -> None:
    from tidalmq.client.sync import Admin

    with Admin(ns) as admin:
        admin.create_topic(topic, queues)
        deadline = time.monotonic() + 10
        while True:  # the broker registers the new topic with the NameServer right after creating it
            try:
                if admin.route(topic).get("queueDatas"):
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)


def wait_dispatched(ns: str, topic: str, count: int, timeout: float = 20.0) -> None:
    """Until the ConsumeQueues of ``topic`` hold ``count`` messages (a send is acknowledged before its
    ConsumeQueue entry exists)."""
    from tidalmq.client.sync import Admin

    with Admin(ns) as admin:
        deadline = time.monotonic() + timeout
        while True:
            total = sum(q.max_offset - q.min_offset for q in admin.topic_status(topic))
            if total >= count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic} holds {total} messages, expected {count}")
            time.sleep(0.05)


def produce(ns: str, topic: str, n: int, *, tags: Any = None, start: int = 0, batch: int = 100) -> list[str]:
    """``n`` messages ``m<i>`` (keys ``k<i>``, property ``i``); returns their msg ids."""
    from tidalmq.client import Message
    from tidalmq.client.sync import Producer

    ids: list[str] = []
    with Producer("SparkTestProducers", ns) as p:
        for lo in range(start, start + n, batch):
            msgs = [Message(topic, f"m{i}".encode(), tags=tags(i) if callable(tags) else tags, keys=f"k{i}",
                            properties={"i": str(i)}) for i in range(lo, min(start + n, lo + batch))]
            ids += p.send_batch(msgs).msg_id.split(",")
    wait_dispatched(ns, topic, start + n)
    return ids


def reader(spark: Any, ns: str, topic: str, **options: str) -> Any:
    return spark.read.format("tidalmq").option("nameserver", ns).option("topic", topic).options(**options)


def stream_reader(spark: Any, ns: str, topic: str, **options: str) -> Any:
    return spark.readStream.format("tidalmq").option("nameserver", ns).option("topic", topic).options(**options)


def run_available_now(df: Any, tmp: Path, name: str) -> tuple[list[Any], list[int]]:
    """Run a streaming DataFrame with Trigger.AvailableNow into a memory table: (rows, rows per batch)."""
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp / name))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120), "the streaming query did not finish"
    if q.exception():
        raise AssertionError(str(q.exception()))
    rows = df.sparkSession.sql(f"select * from {name}").collect()
    return rows, [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
