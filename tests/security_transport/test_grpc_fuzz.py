"""Malformed gRPC requests (docs/security.md, "The gRPC endpoint"): every method of MessagingService,
fed bodies that are not its protobuf, answers BAD_REQUEST in its Status with a short message, the
methods the endpoint does not serve answer NOT_IMPLEMENTED, and the endpoint logs no traceback and at
most one line per method and kind every 10 s, however many such calls come.

The endpoint runs in this process (ACL off) with a NameServer and no broker: none of these requests
gets as far as asking one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from google.protobuf.message import DecodeError

import grpc
from tidalmq.namesrv.server import NameServer
from tidalmq.proxy.config import ProxyConfig
from tidalmq.proxy.handlers import NOT_SERVED, SERVICE
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv
from tidalmq.proxy.server import GrpcServer

pytestmark = pytest.mark.timeout(120)

METHODS = sv.DESCRIPTOR.services_by_name["MessagingService"].methods
MALFORMED = [
    b"\xff",  # field 31, wire type 7: no such wire type
    b"\x0a\xff\xff\xff\xff\x0f",  # a length far past the end
    b"\x08",  # a varint cut short
    b"\x0a\x05\x0a\x03\xff\xfe\xfd",  # a string that is not UTF-8 (the first field's resource name)
    b"\x0a" + b"\xff" * 11,  # a length varint over ten bytes
]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[asyncio.AbstractEventLoop, str]]:
    loop = asyncio.new_event_loop()
    ns = NameServer("127.0.0.1", 0)
    loop.run_until_complete(ns.start())
    server = GrpcServer("127.0.0.1", f"127.0.0.1:{ns.port}", ProxyConfig(grpc_server_port=0))
    loop.run_until_complete(server.start())
    try:
        yield loop, f"127.0.0.1:{server.port}"
    finally:
        loop.run_until_complete(server.stop())
        loop.run_until_complete(ns.stop())
        loop.close()


async def call_raw(channel: grpc.aio.Channel, method: object, body: bytes) -> object:
    """One call with ``body`` as the request's bytes; the first response message."""
    path = f"/{SERVICE}/{method.name}"  # type: ignore[attr-defined]
    response_type = getattr(sv, method.output_type.name)  # type: ignore[attr-defined]
    if method.client_streaming:  # type: ignore[attr-defined]
        stream = channel.stream_stream(path, response_deserializer=response_type.FromString)
        call = stream(iter([body]), timeout=10)
        return await call.read()
    if method.server_streaming:  # type: ignore[attr-defined]
        call = channel.unary_stream(path, response_deserializer=response_type.FromString)(body, timeout=10)
        return await call.read()
    return await channel.unary_unary(path, response_deserializer=response_type.FromString)(body, timeout=10)


@pytest.fixture
def records() -> Iterator[Records]:
    h = Records()
    root = logging.getLogger()
    root.addHandler(h)
    try:
        yield h
    finally:
        root.removeHandler(h)


def malformed_for(method: object) -> list[bytes]:
    """The bodies of MALFORMED that are not a valid request of ``method`` (one may parse as another's)."""
    request_type = getattr(sv, method.input_type.name)  # type: ignore[attr-defined]
    out = []
    for body in MALFORMED:
        try:
            request_type.FromString(body)
        except DecodeError:
            out.append(body)
    return out


def test_malformed_requests_of_every_method(endpoint: tuple[asyncio.AbstractEventLoop, str], records: Records) -> None:
    loop, addr = endpoint
    assert all(len(malformed_for(m)) >= 4 for m in METHODS)

    async def go() -> None:
        async with grpc.aio.insecure_channel(addr) as channel:
            for method in METHODS:
                for _ in range(3):  # again and again: still one log line
                    for body in malformed_for(method):
                        resp = await call_raw(channel, method, body)
                        assert resp.status.code == pb.Code.BAD_REQUEST, (method.name, body, resp)  # type: ignore[attr-defined]
                        message = resp.status.message  # type: ignore[attr-defined]
                        assert len(message) < 100 and "Error" not in message, message

    loop.run_until_complete(asyncio.wait_for(go(), 90))
    assert not [r for r in records.records if r.exc_info], "a traceback was logged"
    lines = [r for r in records.records if r.levelno >= logging.WARNING and r.name.startswith("tidalmq")]
    assert lines and len(lines) <= len(METHODS), f"{len(lines)} log lines for {len(METHODS)} methods"


def test_methods_not_served_answer_not_implemented(endpoint: tuple[asyncio.AbstractEventLoop, str],
                                                   records: Records) -> None:
    loop, addr = endpoint
    served_not = [m for m in METHODS if m.name in NOT_SERVED]
    assert len(served_not) == 4

    async def go() -> None:
        async with grpc.aio.insecure_channel(addr) as channel:
            for method in served_not:
                for _ in range(20):
                    resp = await call_raw(channel, method, b"")  # an empty request is a valid one
                    assert resp.status.code == pb.Code.NOT_IMPLEMENTED, (method.name, resp)  # type: ignore[attr-defined]
                    assert resp.status.message == f"{method.name} is not implemented"  # type: ignore[attr-defined]

    loop.run_until_complete(asyncio.wait_for(go(), 60))
    assert not [r for r in records.records if r.exc_info], "a traceback was logged"
    lines = [r for r in records.records if r.levelno >= logging.WARNING]
    assert len(lines) <= len(served_not), [r.getMessage() for r in lines]
