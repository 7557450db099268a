"""The official RocketMQ 5.x Node.js client (rocketmq-client-nodejs, pinned in tests/grpc/node/package.json,
installed by scripts/setup.sh with ``npm ci``) against a standalone's gRPC endpoint: send, then receive
with a SimpleConsumer, or with a PushConsumer. Skipped only when node or the installed client is missing.

The standalone holds a receive at most ``grpcClientConsumerMaxLongPollingTimeoutMillis`` and tells push
consumers to poll that long: the Node PushConsumer's shutdown waits for its poll in flight, so the key
bounds how long a push consumer takes to stop (30 s with the client's own default, 20 s with RocketMQ's)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

import grpc
from tests.compat.harness import uniq
from tests.support import ModuleTmp, Standalone

pytestmark = pytest.mark.timeout(90)
NODE_DIR = Path(__file__).with_name("node")
MAX_POLL_MS = 2000


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    with Standalone(module_tmp("grpc-node") / "data",
                    {"grpcClientConsumerMaxLongPollingTimeoutMillis": str(MAX_POLL_MS)}) as s:
        yield s


def _agent(broker: Standalone, topic: str, count: int, mode: str) -> dict[str, list[Any]]:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        pytest.skip("node or tests/grpc/node/node_modules missing: run scripts/setup.sh test")
    out = subprocess.run([node, "agent.js", broker.grpc_endpoint, topic, uniq("g5node"), str(count), mode],
                         cwd=NODE_DIR, capture_output=True, text=True, timeout=80)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, list[Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["sent"]) == count
    return result


def test_node_client_sends_and_receives(broker: Standalone, topic: str) -> None:
    result = _agent(broker, topic, 3, "simple")
    got = sorted(result["received"], key=lambda m: m["body"])
    assert [(m["id"], m["body"], m["tag"], m["keys"]) for m in got] == [
        (sent, f"node {i}", "node", [f"k{i}"]) for i, sent in enumerate(result["sent"])]


def test_node_push_consumer_receives_every_message(broker: Standalone, topic: str) -> None:
    """The PushConsumer discards a message whose body digest it cannot verify: with the endpoint's digest
    as RocketMQ's proxy writes it (MD5, upper-case hex) it gets every one of them."""
    result = _agent(broker, topic, 30, "push")
    assert sorted(m["id"] for m in result["received"]) == sorted(result["sent"])
    assert {m["body"] for m in result["received"]} == {f"node {i}" for i in range(30)}


def test_receives_are_held_at_most_the_max_long_polling(broker: Standalone, topic: str) -> None:
    """A push consumer is told the key's polling time, and a receive that asks to wait 30 s on an empty
    queue is answered once the key's 2 s are up."""
    group = uniq("g5poll")
    settings = definition_pb2.Settings(client_type=definition_pb2.ClientType.PUSH_CONSUMER,
                                       subscription=definition_pb2.Subscription(
                                           group=definition_pb2.Resource(name=group)))
    queue = definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic), id=-1)
    receive = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group), message_queue=queue, batch_size=1, auto_renew=False,
        filter_expression=definition_pb2.FilterExpression(type=definition_pb2.FilterType.TAG, expression="*"))
    receive.long_polling_timeout.FromSeconds(30)
    receive.invisible_duration.FromSeconds(30)
    metadata = [("x-mq-client-id", uniq("node-poll"))]
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        stub = MessagingServiceStub(channel)
        first = next(stub.Telemetry(iter([service_pb2.TelemetryCommand(settings=settings)]), metadata=metadata,
                                    timeout=10))
        assert first.settings.subscription.long_polling_timeout.ToMilliseconds() == MAX_POLL_MS
        started = time.monotonic()
        answers = list(stub.ReceiveMessage(receive, metadata=metadata, timeout=40))
        held = time.monotonic() - started
    assert answers[0].status.code == Code.MESSAGE_NOT_FOUND, answers[0].status
    assert MAX_POLL_MS / 1000 - 0.2 <= held < 10, f"held {held:.1f} s"
