"""Smoke tests of bench/compare's JVM peers, Apache RocketMQ 5 and Apache Kafka, started by the harness's own
launchers (bench/compare/peers/rocketmq.py, kafka.py) from the reference cache: W1 --quick end to end, and
RocketMQ's own timer delivering scheduled messages (W5 --quick); and the Java load generator
(bench/compare/jload.py) against TidalMQ, RocketMQ and Kafka. Run with --run-reference (.ci/run); skipped
where java/mvn are missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.compare import jload, workloads
from bench.compare.peers import kafka, kafka_java, rocketmq, rocketmq_java, tidalmq_java
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


def test_java_load_generator_drives_tidalmq(tmp_path: Path) -> None:
    """The Java load generator (RocketMQ's official client) against TidalMQ: W1 sends arrive whole, the broker's
    CPU is counted per phase, and timer messages sent in batches (each with its own deliver time) come at
    their deliver time, none before it; the pending-scale enqueue in batches stores every message."""
    s = tidalmq_java.Server(tmp_path / "tidalmq")
    s.start()
    try:
        w1 = jload.w1(s, "tidalmq_java", quick=True)
        jload._setup(s, "tidalmq_java", "jlate", "jbulk")
        late = jload.Phase(s, topic="jlate", phase="timer-late", rate=500, seconds=1, lead_ms=3000, size=100,
                           window=4, batch=64, wait_s=30).run(120)
        bulk = jload.enqueue_pending(s, "jbulk", 5_000, 120, 7 * 86_400_000, 30 * 86_400_000,
                                     tidalmq_java.TIMER_BATCH)
    finally:
        s.stop()
    assert bulk["send_errors"] == 0, bulk["first_send_error"]
    assert bulk["pending"] == 5_000 and not bulk["cut_short"] and len(bulk["enqueue_per_s_by_tenth"]) == 10
    assert bulk["client"] == f"java, batches of {tidalmq_java.TIMER_BATCH}"
    assert w1["received"] == w1["n"]
    assert w1["paced_received"] + w1["paced_send_errors"] == w1["paced_n"]
    assert w1["produce_broker_cores"] > 0 and w1["lat_p99_ms"] >= w1["lat_p50_ms"]
    assert late["errors"] == 0 and late["received"] == late["expected"] == 500
    assert late["early"] == 0 and late["duplicates"] == 0


def test_java_load_generator_drives_rocketmq_timer(tmp_path: Path) -> None:
    """The same program against Apache RocketMQ 5: its timer delivers what the load generator scheduled, and
    the pending-scale enqueue reports a rate for each tenth."""
    s = rocketmq_java.Server(tmp_path / "rocketmq")
    s.start()
    try:
        jload._setup(s, "rocketmq_java", "jlate", "jbulk")
        late = jload.Phase(s, topic="jlate", phase="timer-late", rate=500, seconds=1, lead_ms=3000, size=100,
                           window=64, wait_s=30).run(120)
        bulk = jload.enqueue_pending(s, "jbulk", 5_000, 120, 7 * 86_400_000, 30 * 86_400_000)
    finally:
        s.stop()
    assert late["errors"] == 0 and late["received"] == late["expected"] == 500
    assert late["early"] == 0
    # an async send the broker refused as busy (its send queue's wait, on a loaded machine) is counted, not lost
    assert bulk["pending"] + bulk["send_errors"] == 5_000, bulk["first_send_error"]
    assert bulk["pending"] > 0 and not bulk["cut_short"] and len(bulk["enqueue_per_s_by_tenth"]) == 10


def test_kafka_through_its_java_client(tmp_path: Path) -> None:
    """Kafka's W1 through its own Java client (KafkaLoad): every record arrives, the broker's CPU is counted."""
    if kafka_java.Server.available() is not None:
        pytest.skip(str(kafka_java.Server.available()))
    s = kafka_java.Server(tmp_path / "kafka")
    s.start()
    try:
        w1 = jload.w1(s, "kafka_java", quick=True)
    finally:
        s.stop()
    assert w1["received"] == w1["n"] and w1["paced_received"] + w1["paced_send_errors"] == w1["paced_n"]
    assert w1["produce_broker_cores"] > 0 and w1["lat_p99_ms"] >= w1["lat_p50_ms"]
