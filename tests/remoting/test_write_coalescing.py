"""How a connection writes what it is given: requests queued in one loop turn are coalesced into few
writes, but a long burst (a pipelining producer's) starts going out while it is still being queued, so
that the peer works on its first requests meanwhile instead of waiting for the whole burst."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.client.helpers import wait_until
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.timeout(30)


def available(sock: socket.socket) -> int:
    """Bytes that reached ``sock`` so far, without waiting."""
    got = 0
    while True:
        try:
            chunk = sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return got
        if not chunk:
            return got
        got += len(chunk)


def request(i: int) -> RemotingCommand:
    return RemotingCommand(code=10, ext_fields={"n": str(i)}, body=b"x" * 1024)


def test_a_long_burst_goes_out_while_it_is_queued_and_a_short_one_at_the_turns_end() -> None:
    async def scenario() -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        client = RemotingClient()
        try:
            conn = await client.connection(f"127.0.0.1:{listener.getsockname()[1]}")
            peer, _ = listener.accept()
            with peer:
                # a short burst: nothing written until the loop turn ends, then all of it
                for i in range(3):
                    conn.invoke_oneway(request(i))
                assert available(peer) == 0
                short = [0]

                def three_arrived() -> bool:
                    short[0] += available(peer)
                    return short[0] >= 3 * 1024

                await wait_until(three_arrived, 5, "the short burst")
                # a long burst in one turn (no await in between): on the wire before the turn ends (as much
                # as the sockets' buffers take while this peer reads nothing; at least a few writes' worth)
                for i in range(1000):
                    conn.invoke_oneway(request(i))
                sent_during_the_turn = available(peer)
                assert sent_during_the_turn >= 64 * 1024, sent_during_the_turn
        finally:
            await client.close()
            listener.close()

    asyncio.run(scenario())
