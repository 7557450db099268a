"""``Connection.request``'s timeouts, served by one sweep timer per connection: an unanswered request
fails with RemotingTimeout at its own deadline (a short one after a long one included), an answered
one never does, and the connection forgets both."""

from __future__ import annotations

import asyncio

import pytest

from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import (
    Connection,
    RemotingClient,
    RemotingConnectError,
    RemotingServer,
    RemotingTimeout,
)

pytestmark = pytest.mark.timeout(60)

ECHO, HOLD = 1, 2


async def serve() -> tuple[RemotingServer, list[asyncio.Future[RemotingCommand]]]:
    held: list[asyncio.Future[RemotingCommand]] = []
    server = RemotingServer("127.0.0.1", 0)

    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(0)

    def hold(conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        held.append(fut)  # never answered
        return fut

    server.register(ECHO, echo)
    server.register(HOLD, hold)
    await server.start()
    return server, held


def test_each_unanswered_request_times_out_at_its_own_deadline() -> None:
    async def main() -> None:
        server, _held = await serve()
        client = RemotingClient()
        try:
            conn = await client.connection(f"127.0.0.1:{server.port}")
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            long = conn.request(RemotingCommand(code=HOLD), 1.5)
            short = conn.request(RemotingCommand(code=HOLD), 0.2)  # queued later, due sooner
            answered = [conn.request(RemotingCommand(code=ECHO), 0.3) for _ in range(100)]
            with pytest.raises(RemotingTimeout, match="timeout 200ms"):
                await asyncio.wait_for(short, 5)
            short_at = loop.time() - t0
            assert not long.done()
            assert all(r.code == 0 for r in await asyncio.gather(*answered))
            with pytest.raises(RemotingTimeout, match="timeout 1500ms"):
                await asyncio.wait_for(long, 5)
            long_at = loop.time() - t0
            assert 0.2 <= short_at < 1.0 and 1.5 <= long_at < 3.0
            # answered past their deadline of 0.3 s: no late failure, and nothing left pending
            assert all(f.exception() is None for f in answered)
            assert conn._pending == {}  # noqa: SLF001
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_pipelined_requests_answered_then_one_unanswered() -> None:
    """Many answered requests (more than the heap keeps before compacting) leave a later one's timeout intact."""
    async def main() -> None:
        server, _held = await serve()
        client = RemotingClient()
        try:
            conn = await client.connection(f"127.0.0.1:{server.port}")
            for _ in range(5):
                batch = [conn.request(RemotingCommand(code=ECHO), 10.0) for _ in range(1000)]
                await asyncio.wait_for(asyncio.gather(*batch), 10)
            # 5,000 deadlines of 10 s were queued; answered ones are dropped as the heap grows
            assert len(conn._responses._deadlines) < 5000  # noqa: SLF001
            lost = conn.request(RemotingCommand(code=HOLD), 0.1)
            with pytest.raises(RemotingTimeout):
                await asyncio.wait_for(lost, 5)
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_a_closed_connection_fails_its_requests_and_stops_the_sweep() -> None:
    async def main() -> None:
        server, _held = await serve()
        client = RemotingClient()
        try:
            conn = await client.connection(f"127.0.0.1:{server.port}")
            fut = conn.request(RemotingCommand(code=HOLD), 30.0)
            conn.close()
            with pytest.raises(RemotingConnectError):
                await asyncio.wait_for(fut, 5)
            assert conn._responses._sweep is None and conn._responses._deadlines == []  # noqa: SLF001
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())
