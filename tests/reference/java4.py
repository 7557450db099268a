"""Runs the official Java client 4.x's scenarios (tests/reference/jvm/client4, tidalmq.reference.Client4) and
parses what they print: one JSON object a line, ``{"scenario": ..., "event": ..., ...}``."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.reference.apache import JAVA_OPTS_COMMON

Event = dict[str, Any]
CLIENT_TIMEOUT = 240.0  # every wait inside the program is bounded (60 s each); this bounds the JVM itself


def client4_classpath(cache: Path) -> str:
    built = cache / "jvm" / "client4"
    return f"{built / 'target' / 'client4-1.jar'}:{built / 'lib'}/*"


def client4_command(cache: Path, home: Path, namesrv: str, scenarios: list[str],
                    access: tuple[str, str] | None = None, *, run_id: str | None = None,
                    properties: dict[str, str] | None = None) -> list[str]:
    """The JVM's command line; ``namesrv`` "-" sets none (the clients then find it as RocketMQ's do, e.g.
    through ``properties`` rocketmq.namesrv.domain), ``run_id`` names the run's topics and groups."""
    home.mkdir(parents=True, exist_ok=True)
    props = [f"-Duser.home={home}", f"-Drocketmq.client.localOffsetStoreDir={home / 'offsets'}",
             f"-Drocketmq.client.logRoot={home / 'logs'}", *(f"-D{k}={v}" for k, v in (properties or {}).items())]
    if access is not None:
        props += [f"-Dj4.accessKey={access[0]}", f"-Dj4.secretKey={access[1]}"]
    return ["java", "-Xms64m", "-Xmx256m", *JAVA_OPTS_COMMON, *props, "-cp", client4_classpath(cache),
            "tidalmq.reference.Client4", namesrv, run_id or uuid.uuid4().hex[:8], *scenarios]


def parse_events(lines: list[str]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = defaultdict(list)
    for line in lines:
        if line.startswith("{"):
            ev = json.loads(line)
            out[ev["scenario"]].append(ev)
    return dict(out)


def run_client4(cache: Path, home: Path, namesrv: str, scenarios: list[str],
                access: tuple[str, str] | None = None) -> dict[str, list[Event]]:
    """Each scenario's events, by scenario; a scenario that threw has an ``error`` event."""
    cmd = client4_command(cache, home, namesrv, scenarios, access)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT, cwd=home)
    assert proc.returncode == 0, f"Client4 exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return parse_events(proc.stdout.splitlines())


def events(observed: dict[str, list[Event]], scenario: str, event: str | None = None) -> list[Event]:
    """The scenario's events (of one kind): a scenario that failed fails the caller with its error."""
    got = observed.get(scenario, [])
    errors = [e for e in got if e["event"] == "error"]
    assert not errors, f"{scenario}: {errors}"
    assert any(e["event"] == "done" for e in got), f"{scenario} never finished: {got}"
    return [e for e in got if event is None or e["event"] == event]


def decode_offset_msg_id(offset_msg_id: str) -> tuple[str, int]:
    """RocketMQ's offsetMsgId: the store host (IPv4 4 bytes + port 4 bytes) and the CommitLog offset (8 bytes),
    in upper-case hex."""
    raw = bytes.fromhex(offset_msg_id)
    assert len(raw) == 16, offset_msg_id
    host = ".".join(str(b) for b in raw[:4])
    return f"{host}:{int.from_bytes(raw[4:8], 'big')}", int.from_bytes(raw[8:], "big")
