"""TLS on the gRPC port (the remoting TLS keys and files): with tls.server.mode=enforcing the official 5.x
client with ``tls_enable=True`` sends and receives and a plain gRPC client gets nowhere; with permissive
both are served on the one port."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

import grpc
from tests.client.helpers import create_topic, uniq
from tests.security_transport.conftest import Certs, certs, server_tls  # noqa: F401 (the fixture)
from tests.support import Standalone

pytestmark = pytest.mark.timeout(120)
AGENT = Path(__file__).with_name("tls_agent.py")


def test_enforcing_tls_serves_the_official_client_and_refuses_plain(tmp_path: Path, certs: Certs) -> None:  # noqa: F811
    with Standalone(tmp_path / "data", server_tls(certs, "enforcing", **{"tls.enable": "true"})) as s:
        topic = uniq("g5tls")
        asyncio.run(create_topic(s.namesrv_addr, topic, 1, tls=True))
        env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca), "PYTHONPATH": os.getcwd()}
        out = subprocess.run([sys.executable, str(AGENT), s.grpc_endpoint, topic, uniq("g5tlsgroup")], env=env,
                             capture_output=True, text=True, timeout=90)
        assert out.returncode == 0 and out.stdout.startswith("OK "), out.stdout + out.stderr[-2000:]
        with grpc.insecure_channel(s.grpc_endpoint) as channel:
            request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
            with pytest.raises(grpc.RpcError) as e:
                MessagingServiceStub(channel).QueryRoute(request, timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def _agent(s: Standalone, certs: Certs, topic: str, mode: str) -> None:  # noqa: F811
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca), "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, str(AGENT), s.grpc_endpoint, topic, uniq("g5group"), mode], env=env,
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0 and out.stdout.startswith("OK "), f"{mode}: {out.stdout}{out.stderr[-2000:]}"


def test_permissive_serves_plain_and_tls_clients_on_one_port(tmp_path: Path, certs: Certs) -> None:  # noqa: F811
    with Standalone(tmp_path / "data", server_tls(certs, "permissive")) as s:
        topic = uniq("g5both")
        asyncio.run(create_topic(s.namesrv_addr, topic, 1))
        _agent(s, certs, topic, "tls")
        _agent(s, certs, topic, "plain")
        with grpc.insecure_channel(s.grpc_endpoint) as channel:  # a raw plain call too: the route
            request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
            route = MessagingServiceStub(channel).QueryRoute(request, timeout=10)
            assert route.status.code == definition_pb2.Code.OK and route.message_queues
