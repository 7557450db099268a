"""A flood of idle connections under a low descriptor limit (docs/security.md, "Connections and
descriptors"): a standalone started with RLIMIT_NOFILE=256 closes the connections past its cap at once,
keeps serving a client connected before the flood, and its persistence (topics.json, the graceful
stop) does not fail for lack of descriptors. Without the cap the flood took the last descriptors and
the topic's file could not be written.

First, on the same standalone (uvloop, RocketMQ's default serverChannelMaxPendingRequests of 4,096): a
client that holds 5,000 long-poll pulls and closes its socket has them dropped in seconds."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import sys
import time
from pathlib import Path

import pytest

from tests.broker.rawclient import pull_cmd, runtime_info
from tests.client.helpers import uniq
from tests.support import ModuleTmp, Standalone
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand, decode_frame_body, encode_frame
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.transport import RemotingClient, RemotingServer

pytestmark = pytest.mark.timeout(120)

NOFILE = 256
FLOOD = 400  # more sockets than the broker has descriptors
# Sets the descriptor limit, then becomes the standalone (argv[2:]).
_WRAP = ("import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
         "os.execv(sys.argv[2], sys.argv[2:])")


class LowFdStandalone(Standalone):
    def command(self) -> list[str]:
        return [sys.executable, "-c", _WRAP, str(NOFILE), *super().command()]


@pytest.fixture(scope="module")
def low_fd(module_tmp: ModuleTmp):
    s = LowFdStandalone(module_tmp("low-fd") / "data", {"mappedFileSizeCommitLog": str(4 << 20), "maxMessageSize": str(1 << 20)})
    with s:
        yield s


def call(sock: socket.socket, cmd: RemotingCommand) -> RemotingCommand:
    sock.sendall(encode_frame(cmd))
    head = recv_exactly(sock, 4)
    (n,) = struct.unpack(">I", head)
    return decode_frame_body(recv_exactly(sock, n))


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the server closed the connection"
        out += chunk
    return out


def closed_by_server(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def create_topic_cmd(topic: str) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})


def test_held_pulls_past_the_pending_limit_dropped_when_the_client_closes(low_fd: Standalone) -> None:
    topic = uniq("HeldPast")

    async def go() -> None:
        attacker, observer = RemotingClient(), RemotingClient()
        try:
            created = await observer.invoke(low_fd.broker_addr, create_topic_cmd(topic), 10)
            assert created.code == ResponseCode.SUCCESS
            conn = await attacker.connection(low_fd.broker_addr)
            pulls = [conn.request(pull_cmd(topic, 0, 0, group="HeldPastCG", suspend_ms=25_000)) for _ in range(5000)]

            async def held() -> int:
                return int((await runtime_info(observer, low_fd.broker_addr))["pullHoldCount"])

            deadline = time.monotonic() + 20
            while await held() < 4096:  # reading paused at serverChannelMaxPendingRequests
                assert time.monotonic() < deadline, "the pulls were never held"
                await asyncio.sleep(0.05)
            await attacker.close()
            await asyncio.gather(*pulls, return_exceptions=True)
            deadline = time.monotonic() + 8  # well before their 25 s suspend time
            while await held() != 0:
                assert time.monotonic() < deadline, "held pulls outlived their connection"
                await asyncio.sleep(0.05)
        finally:
            await attacker.close()
            await observer.close()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_connection_flood_under_a_low_descriptor_limit(low_fd: Standalone) -> None:
    assert low_fd.proc is not None
    limits = Path(f"/proc/{low_fd.proc.pid}/limits").read_text()
    assert any(line.startswith("Max open files") and f" {NOFILE} " in line for line in limits.splitlines())
    existing = socket.create_connection(("127.0.0.1", low_fd.broker_port), timeout=10)
    flood: list[socket.socket] = []
    try:
        assert call(existing, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO)).code == ResponseCode.SUCCESS
        for _ in range(FLOOD):
            flood.append(socket.create_connection(("127.0.0.1", low_fd.broker_port), timeout=10))
        closed = [s for s in flood if closed_by_server(s, 0.05)]
        # those past the cap closed at once; the rest (idle, within serverChannelMaxIdleTimeSeconds) kept
        assert closed, "no connection of the flood was refused"
        assert len(closed) < FLOOD
        kept = [s for s in flood if s not in closed]
        assert not any(closed_by_server(s, 0.01) for s in kept[:20])

        # the client connected before the flood is served, and the broker can still write its files
        topic = uniq("AfterFlood")
        assert call(existing, create_topic_cmd(topic)).code == ResponseCode.SUCCESS
        topics = json.loads((low_fd.data_dir / "store" / "config" / "topics.json").read_text())
        assert topic in topics["topicConfigTable"]
        info = call(existing, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO))
        assert info.code == ResponseCode.SUCCESS
        assert int(json.loads(info.body_bytes())["table"]["connectionCount"]) <= NOFILE

        log = low_fd.log_tail(2000)
        assert "refusing connections" in log
        assert log.count("refusing connections") <= 3, "one line per 10 s, not one per refused connection"
        assert "Too many open files" not in log
        assert low_fd.stop() == 0  # graceful, with the flood still connected: its files flushed and closed
    finally:
        existing.close()
        for s in flood:
            s.close()
    assert "Too many open files" not in low_fd.log_tail(2000)


def sniffing(server: RemotingServer) -> int:
    """Sockets accepted whose first byte the server awaits (a TLS mode), not connections yet."""
    return server.acceptor.sniffing if server.acceptor is not None else 0


@pytest.mark.parametrize("mode", ["disabled", "permissive"])
def test_server_max_connections_refuses_past_the_cap(mode: str, request: pytest.FixtureRequest) -> None:
    """serverMaxConnections=3 on a server in this process: of five sockets the last two are closed at once,
    plain (closed in connection_made) and in a TLS mode (closed by the accept loop, before the first byte)."""
    context = None
    if mode != "disabled":
        certs = request.getfixturevalue("certs")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certs.server_cert, certs.server_key)

    async def go() -> None:
        server = RemotingServer("127.0.0.1", 0, config=RemotingServerConfig(server_max_connections=3),
                                ssl_context=context, tls_mode=mode)
        await server.start()
        loop = asyncio.get_running_loop()
        socks = []
        try:
            for _ in range(5):
                s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
                socks.append(s)
                deadline = time.monotonic() + 5  # one at a time, so that the first three are the ones served
                while len(server.connections) + sniffing(server) + server.refused_connections < len(socks):
                    assert time.monotonic() < deadline, "the server never took the connection"
                    await asyncio.sleep(0.01)
            closed = [await loop.run_in_executor(None, closed_by_server, s, 0.5) for s in socks]
            assert closed == [False, False, False, True, True]
            assert server.refused_connections == 2
        finally:
            for s in socks:
                s.close()
            await server.stop()

    asyncio.run(asyncio.wait_for(go(), 30))
