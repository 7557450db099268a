"""Backpressure of a RemotingServer's connections, in process: a client that does not read its
responses, or keeps too many requests pending, stops being read from until it catches up."""

from __future__ import annotations

import asyncio
import fcntl
import random
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable

import pytest
import uvloop

from tidalmq.remoting.command import RemotingCommand, decode_frame_body, encode_frame
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.transport import Connection, RemotingServer

pytestmark = pytest.mark.timeout(60)

BIG = b"x" * 65536


async def wait_until(pred, timeout: float = 10.0) -> None:
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
        assert "too short" in (got[n].remark or "")
        # each once, in order (one that failed is asked again when its request is dispatched)
        assert [o for o in judged if o % 50] == [o for o in range(1, n + 1) if o % 50]
        writer.close()
        await server.stop()

    asyncio.run(asyncio.wait_for(go(), 40))


class _LaterValidator:
    """A validator that takes some chunks to judge later (as the ACL's signature worker does), answering
    them after a while, the later ones sometimes first; the others it judges at once."""

    def __init__(self, frames_of: dict[int, bytes]) -> None:
        self.frames_of = frames_of
        self.judged: list[int] = []
        self.taken = 0
        self.rng = random.Random(7)
        self.held: list[Callable[[], None]] | None = None  # a list: take every chunk, answer when told

    def __call__(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        self.judged.append(req.opaque)
        return req.make_response(17, "refused") if req.opaque % 7 == 0 else None

    def judge_later(self, conn: Connection, chunk: list[RemotingCommand], frames: memoryview,
                    deliver: Callable[[list[tuple[RemotingCommand, RemotingCommand | None] | None]], None]) -> bool:
        # the chunk's frames, byte for byte as the client wrote them
        assert bytes(frames) == b"".join(self.frames_of[c.opaque] for c in chunk)
        if self.held is None and self.rng.random() < 0.3:
            return False
        self.taken += 1
        verdicts: list[tuple[RemotingCommand, RemotingCommand | None] | None] = [(c, self(conn, c)) for c in chunk]
        if self.held is not None:
            self.held.append(lambda: deliver(verdicts))
            return True
        asyncio.get_running_loop().call_later(self.rng.random() * 0.005, deliver, verdicts)
        return True


def test_chunks_judged_later_are_handled_in_order_across_pauses() -> None:
    """Verdicts that come later (validator.judge_later), in any order: every request is answered by its
    own verdict, in the order sent, reading pausing meanwhile, and a broken frame at the end is answered
    after them all."""
    async def go() -> None:
        cfg = RemotingServerConfig(write_buffer_high_water_mark=256 * 1024, write_buffer_low_water_mark=64 * 1024)
        server, _ = await start(cfg)
        n = 600
        frames = {i + 1: encode_frame(RemotingCommand(code=1, opaque=i + 1, body=b"b" * (i % 300))) for i in range(n)}
        validator = _LaterValidator(frames)
        server.access_validator = validator
        reader, writer = await small_client(server.port)
        writer.write(b"".join(frames.values()) + struct.pack(">I", 2))  # a frame too short to be one: closed after
        got = await read_frames(reader, n + 1)
        assert [c.opaque for c in got[:n]] == list(range(1, n + 1))
        assert [c.code for c in got[:n]] == [17 if (i + 1) % 7 == 0 else 0 for i in range(n)]
        assert "too short" in (got[n].remark or "")
        assert sorted(validator.judged) == list(range(1, n + 1))  # each once
        assert validator.taken >= 3
        writer.close()
        # A client gone while its verdicts are awaited (reading paused meanwhile): they come, the server
        # finds the connection closed and serves on.
        held: list[Callable[[], None]] = []
        validator.held = held
        reader, writer = await small_client(server.port)
        writer.write(b"".join(frames[i] for i in range(1, 400)))
        await wait_until(lambda: len(held) >= 2)
        writer.close()
        while held:
            held.pop(0)()
            await asyncio.sleep(0)
        await wait_until(lambda: not server.connections)
        validator.held = None
        reader, writer = await small_client(server.port)
        writer.write(frames[1])
        assert [c.opaque for c in await read_frames(reader, 1)] == [1]
        writer.close()
        await server.stop()

    asyncio.run(asyncio.wait_for(go(), 40))


def test_a_pipelining_client_is_answered_a_turn_at_a_time() -> None:
    """A client's window of large requests, all waiting in the socket, is handled a share at a time
    (about one read's worth), the answers of each share going out before the next is handled: the client
    can refill its window while the server works. Everything is answered, in order, and reading goes on.
    On uvloop, as the broker runs: it reads a socket again and again while data waits, so without the
    share the whole window was handled before the first answer."""
    async def go() -> None:
        server = RemotingServer("127.0.0.1", 0, config=RemotingServerConfig())
        events: list[str] = []

        def group_commit(conn: Connection, req: RemotingCommand) -> None:  # answered later, as a send is
            events.append("handled")

            def answer() -> None:
                events.append("answered")
                conn.send(req.make_response(0))

            asyncio.get_running_loop().call_soon(answer)

        server.register(3, group_commit)
        await server.start()
        client = socket.create_connection(("127.0.0.1", server.port))
        await wait_until(lambda: len(server.connections) == 1)
        conn = next(iter(server.connections))
        assert conn.transport is not None
        inbound = conn.transport.get_extra_info("socket")
        inbound.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # room for many frames
        if inbound.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < 2 << 20:
            pytest.skip("the kernel caps socket buffers below 1 MB of data (net.core.rmem_max)")
        n, body = 40, b"y" * 100_000
        frames = b"".join(encode_frame(RemotingCommand(code=3, opaque=i + 1, body=body)) for i in range(n))
        sender = threading.Thread(target=client.sendall, args=(frames,), daemon=True)
        sender.start()
        # The server busy meanwhile (its loop held here) until a megabyte waits in its socket.
        deadline = time.monotonic() + 10
        while _queued(inbound.fileno()) < 1_000_000:
            assert time.monotonic() < deadline, "the client's frames did not arrive"
            time.sleep(0.001)
        got = await asyncio.get_running_loop().run_in_executor(None, _read_responses, client, n)
        assert got == list(range(1, n + 1))
        # Requests handled between two answers: one share, 256 KiB (the third 100 KB frame crosses it).
        runs = [len(run) for run in "".join("h" if e == "handled" else " " for e in events).split()]
        assert max(runs) <= 3, runs
        assert not conn.reading_paused
        client.close()
        await server.stop()

    uvloop.run(asyncio.wait_for(go(), 40))


def _queued(fd: int) -> int:
    """Bytes waiting in a socket's receive queue."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _read_responses(sock: socket.socket, n: int) -> list[int]:
    """The opaques of ``n`` responses read from a blocking socket."""
    stream = sock.makefile("rb")
    out = []
    for _ in range(n):
        (length,) = struct.unpack(">I", stream.read(4))
        out.append(decode_frame_body(stream.read(length)).opaque)
    return out
