"""A remoting port with TLS (tls.server.mode enforcing or permissive): sockets are accepted here rather
than by asyncio's create_server so that their first byte can be looked at (MSG_PEEK) before the
transport, plain or TLS, is built on them (RocketMQ's NettyRemotingServer HandshakeHandler). Enforcing
closes a plain connection; permissive serves both on one port."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tidalmq.remoting.tls import TLS_HANDSHAKE_FIRST_BYTE

if TYPE_CHECKING:
    from tidalmq.remoting.transport import RemotingServer

log = logging.getLogger(__name__)
TLS_HANDSHAKE_TIMEOUT_S = 30.0


async def peek_first_byte(sock: socket.socket, wait: float | None) -> bytes:
    """The socket's first byte, left unread; b"" when the peer closes or nothing comes within ``wait``."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        try:
            b = sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError:
            b = b""
        loop.remove_reader(sock.fileno())
        if not first.done():
            first.set_result(b)

    loop.add_reader(sock.fileno(), readable)
    try:
        return await asyncio.wait_for(first, wait)
    except (TimeoutError, asyncio.CancelledError):
        loop.remove_reader(sock.fileno())
        return b""


class HandshakeAcceptor:
    def __init__(self, server: RemotingServer, ssl_context: ssl.SSLContext,
                 spawn: Callable[[Awaitable[None]], None]) -> None:
        self.server = server
        self.ssl_context = ssl_context
        self.spawn = spawn
        self.sniffing = 0  # accepted sockets whose first byte is awaited: not connections yet

    async def accept_loop(self, listener: socket.socket) -> None:
        srv = self.server
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as e:  # out of file descriptors, say: keep serving who is connected
                log.warning("accept on %s:%s failed: %s", srv.host, srv.port, e)
                await asyncio.sleep(0.5)
                continue
            if not srv.admit(sock.fileno(), peer, len(srv.connections) + self.sniffing):
                sock.close()
                continue
            self.spawn(self._sniff(sock))

    async def _sniff(self, sock: socket.socket) -> None:
        """Wait for the first byte without taking it, then hand the socket to a plain or TLS transport."""
        srv = self.server
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = sock.getpeername()
        self.sniffing += 1
        try:
            head = await peek_first_byte(sock, srv.config.server_channel_max_idle_time_seconds or None)
        finally:
            self.sniffing -= 1
        if not head:
            sock.close()
            return
        is_tls = head[0] == TLS_HANDSHAKE_FIRST_BYTE
        if not is_tls and srv.tls_mode == "enforcing":
            log.warning("closing %s:%s: a plain connection, and tls.server.mode is enforcing", peer[0], peer[1])
            sock.close()
            return
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                srv.make_connection, sock, ssl=self.ssl_context if is_tls else None,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if is_tls else None)
        except (OSError, ssl.SSLError, TimeoutError) as e:
            log.warning("closing %s:%s: TLS handshake failed: %s", peer[0], peer[1], e)
            sock.close()
