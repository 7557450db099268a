"""Long polling's bounds (docs/broker.md, "Long polling"): a held pull is answered within
brokerSuspendMaxTimeMillis whatever suspend time it sent, the broker holds at most maxHeldPullRequests
pulls and answers one past that at once, and a client that holds pulls past
serverChannelMaxPendingRequests (reading from it paused) and closes its socket has them dropped
promptly, not when they time out.

One broker and NameServer in this process; the suspend bounds are read per request, so each test sets
its own on the broker's config."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.rawclient import pull_cmd, runtime_info
from tests.client.helpers import create_topic, uniq
from tidalmq.broker.broker_controller import BrokerController
from tidalmq.broker.config import BrokerConfig
from tidalmq.namesrv.server import NameServer
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.transport import RemotingClient
from tidalmq.store.config import MessageStoreConfig

pytestmark = pytest.mark.timeout(90)

PENDING = 64  # serverChannelMaxPendingRequests of this broker: reading from a connection pauses past it


class InProc:
    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.ns = NameServer("127.0.0.1", 0)
        self.run(self.ns.start())
        sc = MessageStoreConfig(store_path_root_dir=str(tmp / "store"), mapped_file_size_commit_log=4 << 20)
        bc = BrokerConfig(broker_name="held-pulls", listen_port=0, namesrv_addr=f"127.0.0.1:{self.ns.port}")
        self.broker = BrokerController(bc, sc, host="127.0.0.1",
                                       remoting_config=RemotingServerConfig(server_channel_max_pending_requests=PENDING))
        self.run(self.broker.start())
        self.addr = f"127.0.0.1:{self.broker.server.port}"
        self.namesrv = f"127.0.0.1:{self.ns.port}"
        self.topic = uniq("Held")
        self.run(create_topic(self.namesrv, self.topic, 1))

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        self.run(self.broker.stop())
        self.run(self.ns.stop())
        self.loop.close()


@pytest.fixture(scope="module")
def inproc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProc]:
    b = InProc(tmp_path_factory.mktemp("held-pulls"))
    yield b
    b.close()


@pytest.fixture
def bounds(inproc: InProc) -> Iterator[BrokerConfig]:
    cfg = inproc.broker.config
    saved = cfg.broker_suspend_max_time_millis, cfg.max_held_pull_requests
    yield cfg
    cfg.broker_suspend_max_time_millis, cfg.max_held_pull_requests = saved


async def held(client: RemotingClient, addr: str) -> int:
    return int((await runtime_info(client, addr))["pullHoldCount"])


async def wait_held(client: RemotingClient, addr: str, n: int, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while (now := await held(client, addr)) != n:
        assert time.monotonic() < deadline, f"{what}: {now} pulls held after {timeout}s, not {n}"
        await asyncio.sleep(0.02)
    return time.monotonic()


def test_suspend_time_bounded_by_broker_suspend_max_time_millis(inproc: InProc, bounds: BrokerConfig) -> None:
    bounds.broker_suspend_max_time_millis = 1000

    async def go() -> float:
        c = RemotingClient()
        try:
            started = time.monotonic()
            resp = await c.invoke(inproc.addr, pull_cmd(inproc.topic, 0, 0, suspend_ms=10**15), 10)
            assert resp.code == ResponseCode.PULL_NOT_FOUND
            return time.monotonic() - started
        finally:
            await c.close()

    took = inproc.run(go())
    assert 0.8 <= took < 5, f"a pull asking to be held 10^15 ms was answered after {took:.2f}s"


def test_held_pulls_capped_per_broker(inproc: InProc, bounds: BrokerConfig) -> None:
    bounds.broker_suspend_max_time_millis = 60_000
    bounds.max_held_pull_requests = 5

    async def go() -> None:
        c, observer = RemotingClient(), RemotingClient()
        try:
            conn = await c.connection(inproc.addr)
            futures = [conn.request(pull_cmd(inproc.topic, 0, 0, suspend_ms=60_000)) for _ in range(5)]
            await wait_held(observer, inproc.addr, 5, 10, "the first five pulls were not held")
            started = time.monotonic()
            extra = await c.invoke(inproc.addr, pull_cmd(inproc.topic, 0, 0, suspend_ms=60_000), 10)
            assert time.monotonic() - started < 2
            assert extra.code == ResponseCode.PULL_NOT_FOUND
            assert "maxHeldPullRequests" in (extra.remark or "")
            assert extra.ext_fields["nextBeginOffset"] == "0"
            assert await held(observer, inproc.addr) == 5  # the five are still held: the cap answered it
            assert not any(f.done() for f in futures)
        finally:
            await c.close()
            await asyncio.gather(*futures, return_exceptions=True)
            await observer.close()
        await wait_held(observer, inproc.addr, 0, 10, "held pulls outlived their connection")

    inproc.run(go())


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_closed_peer_noticed_while_reading_is_paused(inproc: InProc, bounds: BrokerConfig, how: str) -> None:
    """More pulls than serverChannelMaxPendingRequests: the broker holds PENDING of them and stops reading
    the rest. The client goes away; the broker must notice although it reads nothing from that socket."""
    bounds.broker_suspend_max_time_millis = 600_000

    async def go() -> None:
        attacker, observer = RemotingClient(), RemotingClient()
        try:
            conns_before = len(inproc.broker.server.connections)
            conn = await attacker.connection(inproc.addr)
            pulls = [conn.request(pull_cmd(inproc.topic, 0, 0, suspend_ms=600_000)) for _ in range(PENDING + 200)]
            await wait_held(observer, inproc.addr, PENDING, 20, "the pulls were never held")
            paused = [c for c in inproc.broker.server.connections if c.reading_paused]
            assert len(paused) == 1, "reading from the client did not pause"
            if how == "rst":
                sock = conn.transport.get_extra_info("socket") if conn.transport else None
                assert sock is not None
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await attacker.close()
            closed_at = time.monotonic()
            await asyncio.gather(*pulls, return_exceptions=True)  # failed by the close, on the client's side
            gone_at = await wait_held(observer, inproc.addr, 0, 10, "held pulls outlived their connection")
            assert gone_at - closed_at < 5
            deadline = time.monotonic() + 5
            while len(inproc.broker.server.connections) > conns_before + 1:  # + the observer's
                assert time.monotonic() < deadline, "the closed connection was kept"
                await asyncio.sleep(0.02)
        finally:
            await attacker.close()
            await observer.close()

    inproc.run(go())
