"""Plain and TLS gRPC on one port (``tls.server.mode=permissive``), as RocketMQ's proxy serves them.

RocketMQ's proxy reads the first bytes of each connection (its ProxyAndTlsProtocolNegotiator) and
either starts TLS or speaks plain HTTP/2. grpcio's server cannot look at a connection before it owns it,
so the endpoint listens on the public port itself: a connection whose first byte opens a TLS record
(0x16, a handshake) is spliced to grpcio's TLS listener, any other to its plain one, both bound to
127.0.0.1 on ports of their own. The bytes pass through unchanged (TLS ends at grpcio, with the
certificate and client-auth settings of ``enforcing``), with the back-pressure of both sides kept.

The gRPC service sees each spliced connection come from 127.0.0.1; ``real_peer`` turns that back into
the client's address (the ACL's white addresses are checked against it), from the local port of the
splice's own connection to grpcio, recorded before the first byte is forwarded.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

TLS_HANDSHAKE = 0x16  # the content type of a TLS record that opens a handshake (a ClientHello)
LOOPBACK = "127.0.0.1"


class PermissiveFront:
    """The public port: each connection spliced to ``plain_port`` or ``tls_port`` on 127.0.0.1."""

    def __init__(self, host: str, port: int, plain_port: int, tls_port: int) -> None:
        self.host = host
        self.port = port
        self.plain_port = plain_port
        self.tls_port = tls_port
        self.spliced = {"plain": 0, "tls": 0}
        # local port of a splice's connection to grpcio -> the client's (host, port)
        self._peers: dict[int, tuple[str, int]] = {}
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Front(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def real_peer(self, peer: str) -> str:
        """grpcio's ``context.peer()`` of a call, with a spliced connection's address replaced by its
        client's (``ipv4:HOST:PORT`` / ``ipv6:[HOST]:PORT``); any other peer unchanged."""
        if not peer.startswith(f"ipv4:{LOOPBACK}:"):
            return peer
        try:
            client = self._peers.get(int(peer.rpartition(":")[2]))
        except ValueError:
            return peer
        if client is None:
            return peer
        host, port = client[0], client[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


class _Splice(asyncio.Protocol):
    """One side of a splice: what it receives goes to ``other``'s transport; when that transport's
    buffer fills, this side stops reading until it drains."""

    transport: asyncio.Transport | None = None
    other: _Splice | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are no subclasses of asyncio.Transport: no isinstance check)
        self.transport = transport  # type: ignore[assignment]

    def pause_writing(self) -> None:  # our transport is full: the other side stops reading
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        other = self.other
        if other is not None and other.transport is not None:
            other.transport.close()


class _Back(_Splice):
    """The splice's connection to grpcio's listener."""

    def __init__(self, front: _Front) -> None:
        self.other = front

    def data_received(self, data: bytes) -> None:
        front = self.other
        if front is not None and front.transport is not None:
            front.transport.write(data)


class _Front(_Splice):
    """A client's connection to the public port."""

    def __init__(self, owner: PermissiveFront) -> None:
        self.owner = owner
        self.early: list[bytes] = []  # what the client sent before the back connection was up
        self.back_port = 0
        self.peer: tuple[str, int] = ("", 0)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if peer else ("", 0)

    def data_received(self, data: bytes) -> None:
        back = self.other
        if back is not None and back.transport is not None:
            back.transport.write(data)
            return
        self.early.append(data)
        if len(self.early) == 1:  # the first bytes: choose the listener, connect to it
            tls = data[0] == TLS_HANDSHAKE
            assert self.transport is not None
            self.transport.pause_reading()  # until the back connection is up
            asyncio.get_running_loop().create_task(self._connect(tls))

    async def _connect(self, tls: bool) -> None:
        owner = self.owner
        port = owner.tls_port if tls else owner.plain_port
        loop = asyncio.get_running_loop()
        try:
            back_transport, back = await loop.create_connection(lambda: _Back(self), LOOPBACK, port)
        except OSError as e:
            log.warning("gRPC permissive port: %s:%d not spliced to %d: %s", *self.peer, port, e)
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is None:  # the client left meanwhile
            back_transport.close()
            return
        self.back_port = back_transport.get_extra_info("sockname")[1]
        owner._peers[self.back_port] = self.peer  # before grpcio can read a byte of it
        owner.spliced["tls" if tls else "plain"] += 1
        self.other = back
        back_transport.write(b"".join(self.early))
        self.early = []
        self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.owner._peers.pop(self.back_port, None)
