"""Exactly-once reading with Spark's checkpoint: the driver is killed (SIGKILL, JVM and all) mid-stream,
restarted from the checkpoint, and the Parquet sink holds every message exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce, topic_name

pytestmark = pytest.mark.spark
JOB = Path(__file__).with_name("stream_job.py")
ROOT = Path(__file__).resolve().parents[2]


def _job(ns: str, topic: str, out: Path, ck: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen([sys.executable, str(JOB), ns, topic, str(out), str(ck), *extra], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def test_kill_driver_restart_from_checkpoint_exactly_once(spark, spark_broker, tmp_path) -> None:
    ns = spark_broker.namesrv_addr
    topic = topic_name("SparkEOS")
    create_topic(ns, topic, 4)
    ids = produce(ns, topic, 3000, batch=50)
    out, ck = tmp_path / "out", tmp_path / "ck"
    job = _job(ns, topic, out, ck)
    try:
        deadline = time.monotonic() + 180
        # wait until a few micro-batches are committed, then kill the driver in the middle of the stream
        while len(list((ck / "commits").glob("[0-9]*"))) < 3:
            assert job.poll() is None, "the streaming job died"
            assert time.monotonic() < deadline, "no micro-batch committed in time"
            time.sleep(0.1)
        time.sleep(0.4)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    committed = len(list((ck / "commits").glob("[0-9]*")))
    assert committed < 30, "the job finished before it was killed; the test needs a longer stream"
    produce(ns, topic, 500, start=3000, batch=50)  # more arrives while the pipeline is down
    restart = _job(ns, topic, out, ck, "--available-now")
    try:
        assert restart.wait(240) == 0, "the restarted job failed"
    finally:
        if restart.poll() is None:
            os.killpg(restart.pid, signal.SIGKILL)
    rows = spark.read.parquet(str(out)).collect()
    got = [r.msgId for r in rows]
    assert len(got) == 3500, f"{len(got)} rows, {len(set(got))} distinct"
    assert len(set(got)) == 3500
    assert set(ids) <= set(got)
