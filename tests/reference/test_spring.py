"""rocketmq-spring-boot-starter 2.3.4 (Spring Boot 2.7, the line it is built against; no web server,
tests/reference/jvm/spring) against Apache RocketMQ and against TidalMQ: RocketMQTemplate.syncSend of one
message and a @RocketMQMessageListener receiving it, the NameServer given as rocketmq.name-server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.compat.harness import uniq
from tests.reference.apache import JAVA_OPTS_COMMON
from tests.reference.test_java5_client import Server, create_topic

pytestmark = pytest.mark.timeout(300)


def test_template_sync_send_and_listener(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                         tmp_path: Path) -> None:
    topic = uniq("springtopic")
    create_topic(rocketmq_jars, tmp_path, server, topic)
    built = reference_cache / "jvm" / "spring"
    cmd = ["java", "-Xmx256m", *JAVA_OPTS_COMMON, f"-Duser.home={tmp_path}", "-cp",
           f"{built}/target/spring-1.jar:{built}/lib/*", "tidalmq.ref.SpringApp",
           f"--rocketmq.name-server={server.namesrv_addr}", f"--rocketmq.producer.group={uniq('springp')}",
           f"--ref.topic={topic}", f"--ref.group={uniq('springc')}", "--spring.main.web-application-type=none",
           "--spring.main.banner-mode=off", "--logging.level.root=WARN"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, cwd=tmp_path)
    lines = {o["event"]: o for o in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert proc.returncode == 0 and "received" in lines, (proc.stdout + proc.stderr)[-4000:]
    sent, got = lines["sent"], lines["received"]
    assert sent["status"] == "SEND_OK"
    assert (got["id"], got["topic"], got["tags"], got["keys"], got["body"], got["reconsumeTimes"]) == (
        sent["id"], topic, "TagS", "sk1", "spring hello", 0)
