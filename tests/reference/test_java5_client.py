"""The official 5.x Java client (rocketmq-client-java 5.0.8, tests/reference/jvm/client5) against Apache
RocketMQ's gRPC proxy and against TidalMQ's gRPC endpoint: the same program, the same observations.

Each scenario is one run of ``tidalmq.ref.Client5`` (a JVM, -Xmx256m) that prints JSON lines; the topics
are created beforehand with Apache's mqadmin on either server, with the message.type the 5.x producer needs
(RocketMQ's proxy checks it). Both servers check unresolved transactions every 2 s and accept recalls.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import uniq
from tests.reference.apache import JAVA_OPTS_COMMON, ApacheRocketMQ, mqadmin
from tests.support import ModuleTmp, Standalone

pytestmark = pytest.mark.timeout(300)

SETTINGS = {"transactionCheckInterval": "2000", "transactionTimeOut": "1000", "recallMessageEnable": "true"}
Server = ApacheRocketMQ | Standalone


@pytest.fixture(scope="module")
def apache(rocketmq_jars: Path, module_tmp: ModuleTmp) -> Iterator[ApacheRocketMQ]:
    """Apache RocketMQ with its gRPC proxy (cluster mode), for this module's tests."""
    with ApacheRocketMQ(rocketmq_jars, module_tmp("apache-rocketmq"), broker_settings=SETTINGS,
                        with_proxy=True) as ref:
        yield ref


@pytest.fixture(scope="module")
def tidal(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    with Standalone(module_tmp("tidalmq") / "data", SETTINGS) as s:
        yield s


def create_topic(jars: Path, home: Path, server: Server, topic: str, kind: str = "NORMAL") -> None:
    out = mqadmin(jars, home, ["updateTopic", "-n", server.namesrv_addr, "-b", server.broker_addr, "-t", topic,
                               "-r", "4", "-w", "4", "-a", f"+message.type={kind}"])
    assert out.returncode == 0 and "success" in out.stdout, out.stdout + out.stderr


def fifo_group(jars: Path, home: Path, server: Server, group: str) -> None:
    out = mqadmin(jars, home, ["updateSubGroup", "-n", server.namesrv_addr, "-b", server.broker_addr, "-g", group,
                               "-o", "true"])
    assert out.returncode == 0 and "success" in out.stdout, out.stdout + out.stderr


def run(cache: Path, server: Server, scenario: str, topic: str, group: str, *extra: str,
        timeout: float = 200) -> list[dict[str, Any]]:
    """One Client5 run; its observations, the last ``{"done": scenario}`` checked and dropped."""
    built = cache / "jvm" / "client5"
    cp = f"{built}/target/client5-1.jar:{built}/lib/*"
    cmd = ["java", "-Xmx256m", *JAVA_OPTS_COMMON, "-Drocketmq.log.level=WARN", "-cp", cp, "tidalmq.ref.Client5",
           server.grpc_endpoint, scenario, topic, group, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines and lines[-1] == {"done": scenario}, (proc.stdout + proc.stderr)[-4000:]
    return lines[:-1]


def events(obs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in obs if o["event"] == kind]


def test_normal_send_and_simple_consumer(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                         tmp_path: Path) -> None:
    """Tag, keys, a user property, the message id the send answered, delivery attempt 1."""
    topic = uniq("j5normal")
    create_topic(rocketmq_jars, tmp_path, server, topic)
    obs = run(reference_cache, server, "normal", topic, uniq("j5g"))
    sent = {o["body"]: o["id"] for o in events(obs, "sent")}
    got = sorted(events(obs, "received"), key=lambda o: o["body"])
    assert [(o["body"], o["id"]) for o in got] == sorted(sent.items())
    for i, o in enumerate(got):
        assert (o["topic"], o["tag"], o["keys"], o["properties"], o["group"], o["attempt"]) == (
            topic, "TagA", ["common", f"k{i}"], {"color": "blue"}, None, 1)
        assert o["bornHostSet"] and o["bornTimestampSet"] and o["deliveryTimestamp"] is None


def test_fifo_message_groups_keep_their_order(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                              tmp_path: Path) -> None:
    """A FIFO topic and an orderly group: a PushConsumer gets each group's messages in send order."""
    topic, group = uniq("j5fifo"), uniq("j5gfifo")
    create_topic(rocketmq_jars, tmp_path, server, topic, "FIFO")
    fifo_group(rocketmq_jars, tmp_path, server, group)
    obs = run(reference_cache, server, "fifo", topic, group)
    got = events(obs, "received")
    for g in ("g0", "g1"):
        bodies = [o["body"] for o in got if o["group"] == g]
        assert bodies == [f"{g}-{i}" for i in range(8) if f"g{i % 2}" == g]


def test_delivery_timestamp_delays_the_message(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                               tmp_path: Path) -> None:
    topic = uniq("j5delay")
    create_topic(rocketmq_jars, tmp_path, server, topic, "DELAY")
    obs = run(reference_cache, server, "delay", topic, uniq("j5g"))
    (sent,) = events(obs, "sent")
    (got,) = events(obs, "received")
    assert got["id"] == sent["id"] and got["deliveryTimestamp"] == sent["deliverAt"]
    assert got["at"] >= sent["deliverAt"] - 100  # not before its time (the clocks are the same machine's)


def test_transaction_commit_rollback_and_check(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                               tmp_path: Path) -> None:
    """Committed: delivered; rolled back: not; left open: checked back by the server, committed by the
    checker, delivered."""
    topic = uniq("j5tx")
    create_topic(rocketmq_jars, tmp_path, server, topic, "TRANSACTION")
    obs = run(reference_cache, server, "transaction", topic, uniq("j5g"))
    assert sorted(o["body"] for o in events(obs, "received")) == ["commit", "unknown"]
    assert "unknown" in events(obs, "checked")[0]["bodies"]


def test_change_invisible_duration_redelivers(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                              tmp_path: Path) -> None:
    """changeInvisibleDuration(2 s) on an unacked message: received again within seconds, attempt 2."""
    topic = uniq("j5inv")
    create_topic(rocketmq_jars, tmp_path, server, topic)
    obs = run(reference_cache, server, "invisible", topic, uniq("j5g"))
    first, again = events(obs, "received")
    assert first["id"] == again["id"] and (first["attempt"], again["attempt"]) == (1, 2)
    assert 1500 <= again["afterChangeMs"] <= 15000


def test_push_consumer_receives_everything(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                           tmp_path: Path) -> None:
    topic = uniq("j5push")
    create_topic(rocketmq_jars, tmp_path, server, topic)
    obs = run(reference_cache, server, "push", topic, uniq("j5g"))
    assert sorted(o["id"] for o in events(obs, "received")) == sorted(o["id"] for o in events(obs, "sent"))
    assert {o["tag"] for o in events(obs, "received")} == {"P"}


def test_recall_of_a_delay_message(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                   tmp_path: Path) -> None:
    """Producer.recallMessage with the send's recall handle: answered with the message's id; the recalled
    message is never delivered, the one sent beside it is."""
    topic = uniq("j5recall")
    create_topic(rocketmq_jars, tmp_path, server, topic, "DELAY")
    obs = run(reference_cache, server, "recall", topic, uniq("j5g"))
    recalled, kept = events(obs, "sent")
    (recall,) = events(obs, "recall")
    assert recall["handleSet"] and recall["id"] == recalled["id"]
    assert [o["id"] for o in events(obs, "received")] == [kept["id"]]


def test_wrong_message_type_refused(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                    tmp_path: Path) -> None:
    """A NORMAL message to a FIFO topic: refused, by default, on both (RocketMQ's proxy checks types)."""
    topic = uniq("j5wrong")
    create_topic(rocketmq_jars, tmp_path, server, topic, "FIFO")
    (out,) = events(run(reference_cache, server, "wrongtype", topic, "unused"), "wrongtype")
    assert "id" not in out and out["error"]


def test_simple_consumer_drains_three_topics(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                             tmp_path: Path) -> None:
    """One SimpleConsumer subscribed to three topics drains 73 messages of each (219) in a few seconds:
    each receive long-polls the topics in turn, an empty one must not hold up the others."""
    topic = uniq("j5drain")
    for i in (1, 2, 3):
        create_topic(rocketmq_jars, tmp_path, server, f"{topic}-{i}")
    (drained,) = events(run(reference_cache, server, "drain", topic, uniq("j5g"), "73,73,73"), "drained")
    print(f"drain {type(server).__name__}: {drained}")  # the figures docs/compatibility.md quotes (-s)
    assert drained["count"] == 219
    assert drained["ms"] < 15_000, drained
