"""Backpressure of a RemotingServer's connections, in process: a client that does not read its
responses, or keeps too many requests pending, stops being read from until it catches up."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from tidalmq.remoting.command import RemotingCommand, decode_frame_body, encode_frame
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.transport import Connection, RemotingServer

pytestmark = pytest.mark.timeout(60)

BIG = b"x" * 65536


async def wait_until(pred, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def read_frames(reader: asyncio.StreamReader, n: int) -> list[RemotingCommand]:
    out = []
    for _ in range(n):
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        out.append(decode_frame_body(await reader.readexactly(length)))
    return out


async def start(cfg: RemotingServerConfig) -> tuple[RemotingServer, list[asyncio.Future[RemotingCommand]]]:
    held: list[asyncio.Future[RemotingCommand]] = []
    server = RemotingServer("127.0.0.1", 0, config=cfg)

    def big(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.make_response(0, body=BIG)

    def later(conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: None)
        held.append(fut)
        fut.opaque = req.opaque  # type: ignore[attr-defined]
        return fut

    server.register(1, big)
    server.register(2, later)
    await server.start()
    return server, held


async def small_client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little for us
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=1 << 20)


def test_reading_stops_while_the_client_does_not_read() -> None:
    async def go() -> None:
        cfg = RemotingServerConfig(write_buffer_high_water_mark=256 * 1024, write_buffer_low_water_mark=64 * 1024)
        server, _ = await start(cfg)
        reader, writer = await small_client(server.port)
        n = 300  # 300 x 64 KiB of responses: far more than the socket buffers hold
        writer.write(b"".join(encode_frame(RemotingCommand(code=1, opaque=i + 1)) for i in range(n)))
        await wait_until(lambda: any(c.reading_paused for c in server.connections))
        conn = next(iter(server.connections))
        assert conn.transport is not None
        queued = conn.transport.get_write_buffer_size()
        # Bounded by the high-water mark plus what one read's worth of requests produces, not by n.
        assert queued < n * len(BIG) / 2, queued
        got = await read_frames(reader, n)  # catching up: every request is answered, in order
        assert [c.opaque for c in got] == list(range(1, n + 1))
        assert not conn.reading_paused
        writer.close()
        await server.stop()

    asyncio.run(asyncio.wait_for(go(), 40))


def test_reading_stops_at_the_pending_request_limit() -> None:
    async def go() -> None:
        server, held = await start(RemotingServerConfig(server_channel_max_pending_requests=8))
        reader, writer = await small_client(server.port)
        writer.write(b"".join(encode_frame(RemotingCommand(code=2, opaque=i + 1)) for i in range(8)))
        await wait_until(lambda: len(held) == 8 and any(c.reading_paused for c in server.connections))
        writer.write(encode_frame(RemotingCommand(code=2, opaque=9)))  # not read while 8 are pending
        await asyncio.sleep(0)
        conn = next(iter(server.connections))
        for fut in held[:4]:  # half of them answered: reading starts again
            fut.set_result(RemotingCommand(code=0, flag=1, opaque=fut.opaque))  # type: ignore[attr-defined]
        await wait_until(lambda: len(held) == 9)
        assert not conn.reading_paused
        assert sorted(c.opaque for c in await read_frames(reader, 4)) == [1, 2, 3, 4]
        writer.close()
        await server.stop()

    asyncio.run(asyncio.wait_for(go(), 40))


def test_access_validator_judges_each_request_once_in_order_across_pauses() -> None:
    """The server judges requests a chunk ahead of handling them; paused reading, a refused request in
    the middle and a broken frame at the end change nothing of what the client sees."""
    async def go() -> None:
        cfg = RemotingServerConfig(write_buffer_high_water_mark=256 * 1024, write_buffer_low_water_mark=64 * 1024)
        server, _ = await start(cfg)
        judged: list[int] = []

        def validator(conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
            judged.append(req.opaque)
            if req.opaque % 50 == 0:
                raise RuntimeError("a validator bug")  # answered SYSTEM_ERROR, as any failing processor
            return req.make_response(17, "refused") if req.opaque % 7 == 0 else None

        server.access_validator = validator
        reader, writer = await small_client(server.port)
        n = 300  # 64 KiB a response: reading pauses many times
        writer.write(b"".join(encode_frame(RemotingCommand(code=1, opaque=i + 1)) for i in range(n))
                     + struct.pack(">I", 2))  # a frame too short to be one: the connection closes after
        await wait_until(lambda: any(c.reading_paused for c in server.connections))
        got = await read_frames(reader, n + 1)
        assert [c.opaque for c in got[:n]] == list(range(1, n + 1))
        assert [c.code for c in got[:n]] == [1 if (i + 1) % 50 == 0 else 17 if (i + 1) % 7 == 0 else 0
                                             for i in range(n)]
        assert got[n].remark is not None and "too short" in got[n].remark
        # each once, in order (one that failed is asked again when its request is dispatched)
        assert [o for o in judged if o % 50] == [o for o in range(1, n + 1) if o % 50]
        writer.close()
        await server.stop()

    asyncio.run(asyncio.wait_for(go(), 40))
