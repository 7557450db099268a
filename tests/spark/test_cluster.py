"""The source and sink on a Spark standalone cluster, by the recipe of docs/spark.md ("Running on a
cluster") run as it is written there: a master and two workers started from the pyspark installation
(``bin/spark-class``), the topics created and filled, tidalmq shipped to the executors with ``--py-files``
and the pipeline (tests/spark/cluster_job.py) submitted with ``spark-submit --master spark://...``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.spark.conftest import wait_dispatched
from tests.support import free_ports

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def recipe() -> str:
    """The bash block after ``<!-- cluster-recipe -->`` in docs/spark.md."""
    text = (ROOT / "docs" / "spark.md").read_text()
    m = re.search(r"<!-- cluster-recipe -->\n```bash\n(.*?)\n```", text, re.S)
    assert m, "docs/spark.md has no cluster recipe"
    return m.group(1)


@pytest.mark.timeout(600)
def test_the_documented_recipe_runs_as_written(spark_broker, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from tidalmq.client.sync import PullConsumer

    ns = spark_broker.namesrv_addr
    port, ui = free_ports(2)
    work = tmp_path / "work"
    env = dict(os.environ, NAMESRV=ns, MASTER_PORT=str(port), MASTER_UI_PORT=str(ui), WORK=str(work))
    env.pop("SPARK_HOME", None)  # bin/spark-class finds the pyspark installation itself
    log = tmp_path / "recipe.log"
    with log.open("wb") as out:
        p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", recipe()], cwd=ROOT, env=env, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = p.wait(480)
    finally:
        try:  # the daemons it started, if it stopped before its last line
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 20
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    assert rc == 0, log.read_text()[-4000:]
    # the executors ran tidalmq from the shipped zip
    origins = (work / "pipeline" / "executor-tidalmq.txt").read_text().split()
    assert origins and all("tidalmq.zip" in o for o in origins), origins
    # source -> parquet: every message once
    table = pq.read_table(work / "pipeline" / "parquet")
    assert sorted(b.decode() for b in table.column("body").to_pylist()) == sorted(f"m{i}" for i in range(500))
    assert len(set(table.column("msgId").to_pylist())) == 500
    # parquet -> sink: checked with the client
    wait_dispatched(ns, "OutTopic", 500)
    got: list[tuple[str, str]] = []
    with PullConsumer("ClusterCheck", ns) as c:
        for mq in c.fetch_queues("OutTopic"):
            got += [(m.body.decode(), " ".join(m.keys)) for m in c.pull_range(mq, 0, c.max_offset(mq))]
    assert sorted(got) == sorted((f"m{i}", f"k{i}") for i in range(500))
