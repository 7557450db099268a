"""The official Go client (github.com/apache/rocketmq-client-go/v2, pinned in tests/reference/go/go.mod)
against Apache RocketMQ and against TidalMQ: a producer's sync sends, then a push consumer (from the first
offset, tag filter) receiving them; the same program, the same observations."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import uniq
from tests.reference.test_java5_client import Server, create_topic

pytestmark = pytest.mark.timeout(300)


def run_go(cache: Path, server: Server, topic: str, group: str, count: int) -> list[dict[str, Any]]:
    binary = cache / "go-clients" / "bin" / "goclient"
    proc = subprocess.run([str(binary), server.namesrv_addr, topic, group, str(count)], capture_output=True,
                          text=True, timeout=150)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines and lines[-1] == {"event": "done"}, (proc.stdout + proc.stderr)[-4000:]
    return lines[:-1]


def test_go_producer_and_push_consumer(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                       tmp_path: Path) -> None:
    topic = uniq("gotopic")
    create_topic(rocketmq_jars, tmp_path, server, topic)
    obs = run_go(reference_cache, server, topic, uniq("gogroup"), 6)
    sent = [o for o in obs if o["event"] == "sent"]
    got = sorted((o for o in obs if o["event"] == "received"), key=lambda o: o["body"])
    assert [o["status"] for o in sent] == [0] * 6  # SendOK
    assert all(len(o["id"]) == 32 and len(o["offsetId"]) == 32 for o in sent)
    assert [(o["id"], o["body"], o["queue"]) for o in got] == sorted(
        ((o["id"], o["body"], o["queue"]) for o in sent), key=lambda t: t[1])
    for o in got:
        i = o["body"].split()[1]
        assert (o["topic"], o["tag"], o["keys"], o["origin"], o["reconsumeTimes"]) == (
            topic, "TagG", f"gk{i}", "go", 0)
        assert o["storeHostSet"] and o["bornHostSet"]
