"""The Spark source over a topic spread across two broker groups (docs/spark.md, docs/replication.md): one
NameServer, broker groups ``broker-a`` (the standalone's) and ``broker-b`` (a ``tidalmq broker`` of its
own), the topic's queues on both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ha.support import Broker
from tests.spark.conftest import create_topic, produce, reader, run_available_now, stream_reader, topic_name
from tests.support import ModuleTmp, Standalone

pytestmark = pytest.mark.spark

SETTINGS = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024), "timerWheelEnable": "false"}


@pytest.fixture(scope="module")
def two_groups(module_tmp: ModuleTmp) -> Iterator[str]:
    root = module_tmp("two-groups")
    with Standalone(root / "a", {**SETTINGS, "brokerName": "broker-a"}) as a:
        b = Broker(root / "b", a.namesrv_addr, {**SETTINGS, "brokerName": "broker-b"})
        with b:
            yield a.namesrv_addr


def test_batch_and_stream_read_every_queue_of_both_groups(spark: Any, two_groups: str, tmp_path: Path) -> None:
    ns = two_groups
    topic = topic_name("SparkTwoGroups")
    create_topic(ns, topic, 4)  # on every master: 4 queues on each group
    ids = produce(ns, topic, 400, batch=10)  # 40 batches, round-robin over the 8 queues
    rows = reader(spark, ns, topic).load().collect()
    assert sorted(r.msgId for r in rows) == sorted(ids)
    assert {(r.broker, r.queueId) for r in rows} == {(b, q) for b in ("broker-a", "broker-b") for q in range(4)}
    streamed, _ = run_available_now(stream_reader(spark, ns, topic, startingOffsets="earliest").load(), tmp_path,
                                    "two_groups")
    assert sorted(r.msgId for r in streamed) == sorted(ids)
