"""Smoke tests of bench/compare's JVM peers, Apache RocketMQ 5 and Apache Kafka, started by the harness's own
launchers (bench/compare/peers/rocketmq.py, kafka.py) from the reference cache: W1 --quick end to end, and
RocketMQ's own timer delivering scheduled messages (W5 --quick). Run with --run-reference (.ci/run); skipped
where java/mvn are missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.compare import workloads
from bench.compare.peers import kafka, rocketmq
from bench.compare.peers.jvm import missing_java

# JVMs fetched from Maven Central: with the reference suite (--run-reference), not the default run.
pytestmark = [pytest.mark.reference,
              pytest.mark.skipif(missing_java() is not None, reason=str(missing_java()))]


def test_rocketmq_w1_and_its_timer(tmp_path: Path) -> None:
    s = rocketmq.Server(tmp_path / "rocketmq")
    s.start()
    try:
        w1 = workloads.w1(s, "rocketmq", quick=True)
        w5 = workloads.w5(s, "rocketmq", quick=True)
        heap = s.live_memory()
    finally:
        s.stop()
    assert w1["received"] == w1["n"] and w1["paced_received"] == w1["paced_n"]
    # the broker JVM's CPU is what the harness measures
    assert w1["produced_per_s"] > 0 and w1["produce_broker_cores"] > 0 and w1["lat_p99_ms"] >= w1["lat_p50_ms"]
    assert w5["delivered"] == w5["n"]  # every timer message came, none before the harness stopped waiting
    assert heap.get("jvm_heap_used_after_gc", 0) > 0


def test_kafka_w1(tmp_path: Path) -> None:
    if kafka.Server.available() is not None:
        pytest.skip(str(kafka.Server.available()))  # aiokafka: the compare extra (bench/compare/install.sh)
    s = kafka.Server(tmp_path / "kafka")
    s.start()
    try:
        w1 = workloads.w1(s, "kafka", quick=True)
    finally:
        s.stop()
    assert w1["received"] == w1["n"] and w1["paced_received"] == w1["paced_n"]
    assert w1["produced_per_s"] > 0 and w1["produce_broker_cores"] > 0
    assert set(kafka.Server.unsupported) == {"W2", "W3", "W4", "W5"}
