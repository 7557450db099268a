"""The official RocketMQ 5.x Node.js client (rocketmq-client-nodejs, pinned in tests/grpc/node/package.json,
installed by scripts/setup.sh with ``npm ci``) against a standalone's gRPC endpoint: send, then receive
with a SimpleConsumer, or with a PushConsumer. Skipped only when node or the installed client is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import uniq
from tests.support import Standalone

pytestmark = pytest.mark.timeout(90)
NODE_DIR = Path(__file__).with_name("node")


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
