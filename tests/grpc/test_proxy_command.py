"""``tidalmq proxy``: the gRPC endpoint as a process of its own in front of a NameServer and broker."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

import grpc
from tests.compat.harness import create_topic, uniq
from tests.grpc.conftest import Clients, typed_topic
from tests.grpc.test_messaging import message, receive_all
from tests.support import Standalone, free_port

pytestmark = pytest.mark.timeout(60)


@contextlib.contextmanager
def running_proxy(tmp_path: Path, *extra: str) -> Iterator[tuple[Standalone, str]]:
    """A standalone without a gRPC endpoint (its broker checks no message type) and ``tidalmq proxy``
    in front of it, with ``extra`` arguments."""
    s = Standalone(tmp_path / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
    s.grpc_port = -1  # the standalone serves no gRPC endpoint: the proxy does
    with s:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "tidalmq.cli", "proxy", "-n", s.namesrv_addr, "--grpc-port",
                                 str(port), *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the ready line, or "" if it died
            assert "proxy ready" in line, line
            yield s, f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Standalone, str]]:
    with running_proxy(tmp_path) as p:
        yield p


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


def test_proxy_checks_message_types_itself(tmp_path: Path) -> None:
    """``tidalmq proxy --set enableTopicMessageTypeCheck=true`` in front of a broker that checks nothing:
    the endpoint refuses a NORMAL message to a FIFO topic itself (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as
    RocketMQ's proxy), and sends a FIFO one."""
    with running_proxy(tmp_path, "--set", "enableTopicMessageTypeCheck=true") as (s, endpoint):
        topic = typed_topic(s, "FIFO")
        m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=b"x")
        m.system_properties.message_id = "0123456789ABCDEF0123456789ABCDEF"
        m.system_properties.message_type = definition_pb2.MessageType.NORMAL
        with grpc.insecure_channel(endpoint) as channel:
            stub = MessagingServiceStub(channel)
            resp = stub.SendMessage(service_pb2.SendMessageRequest(messages=[m]), timeout=10)
            assert resp.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, resp.status
            assert "the expected type is FIFO, but actual type is NORMAL" in resp.status.message
            m.system_properties.message_group = "g1"
            resp = stub.SendMessage(service_pb2.SendMessageRequest(messages=[m]), timeout=10)
            assert resp.status.code == Code.OK, resp.status
