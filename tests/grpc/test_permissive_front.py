"""The permissive gRPC port's splice (proxy/permissive.py) without grpcio: the first byte picks the
listener, bytes pass unchanged both ways (32 MiB echoed through it too), the service learns
each spliced connection's real client, and a closed side closes the other."""

from __future__ import annotations

import asyncio
import os

import pytest

from tidalmq.proxy.permissive import PermissiveFront

pytestmark = pytest.mark.timeout(60)


class Backend:
    """A listener standing in for one of grpcio's: echoes what it receives, prefixed with its name
    on the first chunk, and records the peer port of each connection it accepts."""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.peer_ports: list[int] = []
        self.port = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peer_ports.append(writer.get_extra_info("peername")[1])
        writer.write(self.name)
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        writer.close()


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def _scenario() -> None:
    plain, tls = Backend(b"plain:"), Backend(b"tls:")
    await plain.start()
    await tls.start()
    front = PermissiveFront("127.0.0.1", 0, plain.port, tls.port)
    await front.start()
    try:
        for first, backend in ((b"\x16\x03\x01hello", tls), (b"PRI * HTTP/2.0\r\n", plain)):
            reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
            writer.write(first)
            expected = backend.name + first
            assert await asyncio.wait_for(reader.readexactly(len(expected)), 10) == expected
            # the service's peer of this connection is the client, not the splice
            client_port = writer.get_extra_info("sockname")[1]
            spliced = f"ipv4:127.0.0.1:{backend.peer_ports[-1]}"
            assert spliced != f"ipv4:127.0.0.1:{client_port}"
            assert front.real_peer(spliced) == f"ipv4:127.0.0.1:{client_port}"
            assert front.real_peer("ipv4:10.0.0.9:5000") == "ipv4:10.0.0.9:5000"  # not spliced: unchanged
            if backend is plain:
                # 32 MiB through both directions while the client reads slowly: nothing lost, in order
                blob = os.urandom(32 << 20)

                sender = asyncio.create_task(_send(writer, blob))
                got = bytearray()
                while len(got) < len(blob):
                    got += await asyncio.wait_for(reader.read(1 << 20), 10)
                    await asyncio.sleep(0)
                await sender
                assert bytes(got) == blob
            writer.close()
            await writer.wait_closed()
        assert front.spliced == {"plain": 1, "tls": 1}
        # the client gone, the splice forgets it
        deadline = asyncio.get_running_loop().time() + 10
        while front._peers:
            assert asyncio.get_running_loop().time() < deadline, front._peers
            await asyncio.sleep(0.01)
        # a listener that refuses: the client's connection is closed, not left hanging
        await front.stop()
        front = PermissiveFront("127.0.0.1", 0, plain.port, 1)  # port 1: nothing listens
        await front.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(b"\x16\x03\x01")
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        await front.stop()
        for b in (plain, tls):
            assert b.server is not None
            b.server.close()


def test_the_splice_routes_by_first_byte_keeps_bytes_and_knows_the_client() -> None:
    asyncio.run(_scenario())
