"""The official RocketMQ 5.x Node.js client (rocketmq-client-nodejs, pinned in tests/grpc/node/package.json,
installed by scripts/setup.sh with ``npm ci``) against a standalone's gRPC endpoint: send, then receive
with a SimpleConsumer. Skipped only when node or the installed client is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.compat.harness import uniq
from tests.support import Standalone

pytestmark = pytest.mark.timeout(90)
NODE_DIR = Path(__file__).with_name("node")


def test_node_client_sends_and_receives(broker: Standalone, topic: str) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        pytest.skip("node or tests/grpc/node/node_modules missing: run scripts/setup.sh test")
    out = subprocess.run([node, "agent.js", broker.grpc_endpoint, topic, uniq("g5node"), "3"], cwd=NODE_DIR,
                         capture_output=True, text=True, timeout=80)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["sent"]) == 3
    got = sorted(result["received"], key=lambda m: m["body"])
    assert [(m["id"], m["body"], m["tag"], m["keys"]) for m in got] == [
        (sent, f"node {i}", "node", [f"k{i}"]) for i, sent in enumerate(result["sent"])]
