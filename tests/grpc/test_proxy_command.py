"""``tidalmq proxy``: the gRPC endpoint as a process of its own in front of a NameServer and broker."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.harness import create_topic, uniq
from tests.grpc.conftest import Clients
from tests.grpc.test_messaging import message, receive_all
from tests.support import Standalone, free_port

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Standalone, str]]:
    s = Standalone(tmp_path / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
    s.grpc_port = -1  # the standalone serves no gRPC endpoint: the proxy does
    with s:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "tidalmq.cli", "proxy", "-n", s.namesrv_addr, "--grpc-port",
                                 str(port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the ready line, or "" if it died
            assert "proxy ready" in line, line
            yield s, f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)


def test_proxy_command_sends_and_receives(proxy: tuple[Standalone, str]) -> None:
    s, endpoint = proxy
    topic = uniq("gp")
    create_topic(s.namesrv_addr, topic, queues=2)
    clients = Clients(endpoint)
    try:
        p = clients.producer(topic)
        mid = p.send(message(topic, b"through the proxy", tag="P")).message_id
        c = clients.simple_consumer(uniq("gpgroup"), topic)
        got = receive_all(c, 1)
        assert [(m.message_id, m.tag) for m in got] == [(mid, "P")]
        c.ack(got[0])
    finally:
        clients.close()
