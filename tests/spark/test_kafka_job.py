"""A Kafka Structured Streaming job ported by its format name and server option (tests/spark/kafka_job.py):
Spark finds the ``tidalmq`` format itself (the ``pyspark_tidalmq`` module, no ``register`` call), the job's
Kafka options and columns work as written, and with a driver killed mid-stream and run again its Parquet
output and the topic it writes back hold each message once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce, topic_name, wait_dispatched

pytestmark = pytest.mark.spark
JOB = Path(__file__).with_name("kafka_job.py")
ROOT = Path(__file__).resolve().parents[2]


def _job(ns: str, topic_in: str, topic_out: str, work: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    log = (work.parent / f"job{len(list(work.parent.glob('job*.log')))}.log").open("wb")
    return subprocess.Popen([sys.executable, str(JOB), ns, topic_in, topic_out, str(work), *extra], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)


@pytest.mark.timeout(600)  # two driver processes (Spark's start-up each) and the batch write back
def test_unchanged_kafka_job_writes_each_message_once(spark, spark_broker, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from tidalmq.client.sync import PullConsumer

    ns = spark_broker.namesrv_addr
    topic_in, topic_out = topic_name("KafkaJobIn"), topic_name("KafkaJobOut")
    create_topic(ns, topic_in, 4)
    create_topic(ns, topic_out, 4)
    produce(ns, topic_in, 2000, batch=50)
    work = tmp_path / "work"
    job = _job(ns, topic_in, topic_out, work)
    try:
        deadline = time.monotonic() + 180
        while len(list((work / "checkpoint" / "commits").glob("[0-9]*"))) < 2:  # mid-stream: 200 a batch
            assert job.poll() is None, (tmp_path / "job0.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no micro-batch committed in time"
            time.sleep(0.1)
    finally:
        _kill(job)
    assert len(list((work / "checkpoint" / "commits").glob("[0-9]*"))) < 10, "the stream ended before the kill"
    produce(ns, topic_in, 500, start=2000, batch=50)
    rerun = _job(ns, topic_in, topic_out, work, "--available-now")
    try:
        assert rerun.wait(300) == 0, (tmp_path / "job1.log").read_text()[-3000:]
    finally:
        _kill(rerun)
    table = pq.read_table(work / "events").to_pylist()
    assert sorted(r["value"] for r in table) == sorted(f"m{i}" for i in range(2500))  # each once
    r = next(r for r in table if r["value"] == "m7")
    assert r["key"] == b"k7" and r["topic"] == topic_in and r["partition"] in range(4) and r["timestamp"]
    assert len({(r["partition"], r["offset"]) for r in table}) == 2500
    wait_dispatched(ns, topic_out, 2500)
    got: list[tuple[str, str]] = []
    with PullConsumer("KafkaJobCheck", ns) as c:
        for mq in c.fetch_queues(topic_out):
            got += [(m.body.decode(), " ".join(m.keys)) for m in c.pull_range(mq, 0, c.max_offset(mq))]
    assert sorted(got) == sorted((f"m{i}", f"k{i}") for i in range(2500))


def test_kafka_sink_columns_and_what_spark_refuses(spark, spark_broker) -> None:
    """The sink takes Kafka's columns (binary key and value, headers); a plain ``.save()`` (ErrorIfExists)
    is refused by PySpark itself for Python data sources, so the message is Spark's, before any task."""
    from pyspark.errors import AnalysisException

    from tidalmq.client.sync import PullConsumer

    ns = spark_broker.namesrv_addr
    topic = topic_name("KafkaSink")
    create_topic(ns, topic, 1)
    df = spark.range(3).selectExpr("cast(concat('k', id) as binary) as key", "cast(concat('v', id) as binary) as value",
                                   "array(named_struct('key', 'origin', 'value', cast('etl' as binary))) as headers")
    df.write.format("tidalmq").option("nameserver", ns).option("topic", topic).mode("append").save()
    with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("tidalmq").option("nameserver", ns).option("topic", topic).save()
    with pytest.raises(Exception, match="Kafka's 'partition': TidalMQ picks the queue"):
        (spark.range(1).selectExpr("'x' as value", "0 as partition").write.format("tidalmq")
         .option("nameserver", ns).option("topic", topic).mode("append").save())
    wait_dispatched(ns, topic, 3)
    with PullConsumer("KafkaSinkCheck", ns) as c:
        mq = c.fetch_queues(topic)[0]
        msgs = c.pull_range(mq, 0, c.max_offset(mq))
    assert sorted((m.body, " ".join(m.keys), m.properties.get("origin")) for m in msgs) == \
        [(f"v{i}".encode(), f"k{i}", "etl") for i in range(3)]
