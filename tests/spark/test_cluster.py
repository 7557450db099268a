"""The source and sink on a Spark standalone cluster: a master and two workers started from the pyspark
installation (``bin/spark-class``), the pipeline submitted with ``spark-submit --master spark://...`` and
tidalmq shipped to the executors with ``--py-files`` (docs/spark.md "Running on a cluster")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce, topic_name, wait_dispatched
from tests.support import free_ports

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _spark_bin(name: str) -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / name)


def _env() -> dict[str, str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
    env.pop("SPARK_HOME", None)  # bin/spark-class finds the pyspark installation itself
    return env


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen([_spark_bin("spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=_env(), start_new_session=True)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` of a master with two 1-core, 512 MiB workers, all killed at the end."""
    # All at once: ports picked one by one may meet (or sit side by side), and a Spark daemon whose port is
    # taken binds the next one, so a worker's web UI once answered on the master's UI port.
    port, ui, *worker_ports = free_ports(6)
    procs = [_start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(ui)], tmp_path / "master.log")]
    url = f"spark://127.0.0.1:{port}"
    try:
        for i in range(2):
            work = tmp_path / f"worker{i}"
            work.mkdir()
            procs.append(_start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                 "--port", str(worker_ports[2 * i]), "--webui-port", str(worker_ports[2 * i + 1]),
                                 "--cores", "1",
                                 "--memory", "512m", "--work-dir", str(work)], tmp_path / f"worker{i}.log"))
        deadline = time.monotonic() + 90
        alive = 0
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    alive = json.load(r).get("aliveworkers", 0)
            except (OSError, ValueError):  # not up yet; or an HTML page, not the state (seen once in CI)
                alive = 0
            if alive == 2:
                break
            assert all(p.poll() is None for p in procs), f"a Spark daemon exited; logs in {tmp_path}"
            time.sleep(0.3)
        assert alive == 2, f"the workers did not register with the master in 90 s; logs in {tmp_path}"
        yield url
    finally:
        for p in reversed(procs):
            _stop(p)


def test_pipeline_on_a_standalone_cluster(cluster: str, spark_broker, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from tidalmq.client.sync import PullConsumer

    ns = spark_broker.namesrv_addr
    topic_in, topic_out = topic_name("ClusterIn"), topic_name("ClusterOut")
    create_topic(ns, topic_in, 4)
    create_topic(ns, topic_out, 4)
    produce(ns, topic_in, 500)
    # ship tidalmq as Spark documents for Python dependencies: a zip on --py-files
    shipped = Path(shutil.make_archive(str(tmp_path / "tidalmq"), "zip", ROOT / "src", "tidalmq"))
    work = tmp_path / "work"
    work.mkdir()
    cmd = [_spark_bin("spark-submit"), "--master", cluster, "--py-files", str(shipped),
           "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           str(ROOT / "tests" / "spark" / "cluster_job.py"), ns, topic_in, topic_out, str(work)]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    # the executors ran tidalmq from the shipped zip
    origins = (work / "executor-tidalmq.txt").read_text().split()
    assert origins and all("tidalmq.zip" in o for o in origins), origins
    # source -> parquet: every message once
    table = pq.read_table(work / "parquet")
    assert sorted(b.decode() for b in table.column("body").to_pylist()) == sorted(f"m{i}" for i in range(500))
    assert len(set(table.column("msgId").to_pylist())) == 500
    # parquet -> sink: checked with the client
    wait_dispatched(ns, topic_out, 500)
    got: list[tuple[str, str]] = []
    with PullConsumer("ClusterCheck", ns) as c:
        for mq in c.fetch_queues(topic_out):
            got += [(m.body.decode(), " ".join(m.keys)) for m in c.pull_range(mq, 0, c.max_offset(mq))]
    assert sorted(got) == sorted((f"m{i}", f"k{i}") for i in range(500))
