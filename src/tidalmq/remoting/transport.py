"""asyncio transport for remoting commands, used by servers and clients alike.

A ``Connection`` is an ``asyncio.Protocol``: it decodes frames as they arrive, hands requests
to a dispatcher, matches responses to pending requests by opaque, and can itself send requests
to the peer (the broker's NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE ...).

A dispatcher returns the response directly when it has it (the common, cheap path), an
awaitable when it has to wait (group commit, long polling), or ``None`` for no response.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tidalmq.remoting.codes import ResponseCode, code_name
from tidalmq.remoting.command import (
    DEFAULT_MAX_FRAME,
    FLAG_ONEWAY,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    encode_frame_parts,
)

log = logging.getLogger(__name__)

Reply = RemotingCommand | Awaitable[RemotingCommand | None] | None
Dispatcher = Callable[["Connection", RemotingCommand], Reply]

_opaques = itertools.count(1)


def next_opaque() -> int:
    return next(_opaques) & 0x7FFFFFFF


class RemotingError(Exception):
    """A request that failed: carries RocketMQ's response code and remark."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"[{code}] {remark or ''}")
        self.code = code
        self.remark = remark


class RemotingTimeout(RemotingError):
    def __init__(self, what: str) -> None:
        super().__init__(-1006, what)


class RemotingConnectError(RemotingError):
    def __init__(self, what: str) -> None:
        super().__init__(-1002, what)


class Connection(asyncio.Protocol):
    def __init__(self, dispatcher: Dispatcher | None, *, max_frame: int = DEFAULT_MAX_FRAME,
                 on_close: Callable[[Connection], None] | None = None) -> None:
        self._dispatcher = dispatcher
        self._decoder = FrameDecoder(max_frame)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.remote: tuple[str, int] = ("", 0)
        self.closed: asyncio.Future[None] | None = None
        self.attributes: dict[str, Any] = {}  # per-connection state kept by processors (client id ...)
        self._inflight: set[asyncio.Future[Any]] = set()
        # Frames written in one loop turn go out in one writelines call (fewer syscalls).
        self._out: list[bytes | memoryview] = []
        self._flush_scheduled = False

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not a subclass of asyncio.Transport, so no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote = (peer[0], peer[1])
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        try:
            for cmd in self._decoder.commands():
                if cmd.is_response:
                    fut = self._pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                else:
                    self._handle_request(cmd)
        except FrameError as e:
            log.warning("closing %s:%s: %s", *self.remote, e)
            self._reply_error_and_close(str(e))

    def connection_lost(self, exc: Exception | None) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RemotingConnectError(f"connection to {self.addr} closed"))
        self._pending.clear()
        for fut in list(self._inflight):
            fut.cancel()
        self._inflight.clear()
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)
        self.transport = None
        if self._on_close is not None:
            self._on_close(self)

    # requests from the peer --------------------------------------------------------------------
    def _handle_request(self, cmd: RemotingCommand) -> None:
        if self._dispatcher is None:
            return
        try:
            reply = self._dispatcher(self, cmd)
        except Exception as e:  # a processor bug must not take the connection down for others
            log.exception("processor for %s failed", code_name(cmd.code))
            reply = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if reply is None:
            return
        if isinstance(reply, RemotingCommand):
            if not cmd.is_oneway:
                self.send(reply)
            return
        fut = asyncio.ensure_future(reply)
        self._inflight.add(fut)
        fut.add_done_callback(lambda f, c=cmd: self._deferred_done(c, f))

    def _deferred_done(self, cmd: RemotingCommand, fut: asyncio.Future[RemotingCommand | None]) -> None:
        self._inflight.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("processor for %s failed", code_name(cmd.code), exc_info=exc)
            reply: RemotingCommand | None = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        else:
            reply = fut.result()
        if reply is not None and not cmd.is_oneway:
            self.send(reply)

    def _reply_error_and_close(self, remark: str) -> None:
        if self.transport is None:
            return
        err = RemotingCommand(code=ResponseCode.SYSTEM_ERROR, flag=1, remark=remark)
        self._flush_out()
        self.transport.writelines(encode_frame_parts(err))
        self.transport.close()

    # sending ----------------------------------------------------------------------------------
    @property
    def addr(self) -> str:
        return f"{self.remote[0]}:{self.remote[1]}"

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, cmd: RemotingCommand) -> bool:
        t = self.transport
        if t is None or t.is_closing():
            return False
        self._out.extend(encode_frame_parts(cmd))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_out)
        return True

    def _flush_out(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        t = self.transport
        if out and t is not None and not t.is_closing():
            t.writelines(out)

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response."""
        if not cmd.opaque:
            cmd.opaque = next_opaque()
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        if not self.send(cmd):
            self._pending.pop(cmd.opaque, None)
            raise RemotingConnectError(f"connection to {self.addr} is closed")
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise RemotingTimeout(f"wait response on {self.addr} timeout {int(timeout * 1000)}ms") from None
        finally:
            self._pending.pop(cmd.opaque, None)

    def request(self, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        """Send a request and return the future of its response, with no timeout of its own: for
        callers that pipeline many requests and bound the wait of the whole lot themselves."""
        if not cmd.opaque:
            cmd.opaque = next_opaque()
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        if not self.send(cmd):
            del self._pending[cmd.opaque]
            fut.set_exception(RemotingConnectError(f"connection to {self.addr} is closed"))
        return fut

    def invoke_oneway(self, cmd: RemotingCommand) -> bool:
        if not cmd.opaque:
            cmd.opaque = next_opaque()
        cmd.flag |= FLAG_ONEWAY
        return self.send(cmd)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class RemotingServer:
    """Listens on host:port and dispatches requests by code."""

    def __init__(self, host: str, port: int, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.host = host
        self.port = port
        self._processors: dict[int, Dispatcher] = {}
        self._default: Dispatcher | None = None
        self._server: asyncio.AbstractServer | None = None
        self._max_frame = max_frame
        self.connections: set[Connection] = set()
        self.close_listeners: list[Callable[[Connection], None]] = []
        # Asked before any processor (ACL, docs/acl.md): None lets the request through, a response refuses it.
        self.access_validator: Callable[[Connection, RemotingCommand], RemotingCommand | None] | None = None

    def register(self, code: int, processor: Dispatcher) -> None:
        self._processors[int(code)] = processor

    def register_default(self, processor: Dispatcher) -> None:
        self._default = processor

    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> Reply:
        if self.access_validator is not None:
            refused = self.access_validator(conn, cmd)
            if refused is not None:
                return refused
        proc = self._processors.get(cmd.code, self._default)
        if proc is None:
            return cmd.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        return proc(conn, cmd)

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for fn in self.close_listeners:
            try:
                fn(conn)
            except Exception:
                log.exception("close listener failed")

    def _make_connection(self) -> Connection:
        conn = Connection(self._dispatch, max_frame=self._max_frame, on_close=self._closed)
        self.connections.add(conn)
        return conn

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._make_connection, self.host, self.port, reuse_address=True)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in list(self.connections):
                c.close()
            await self._server.wait_closed()
            self._server = None


class RemotingClient:
    """Connections by address, opened on demand; serves requests the servers send back."""

    def __init__(self, dispatcher: Dispatcher | None = None, *, connect_timeout: float = 3.0) -> None:
        self._dispatcher = dispatcher
        self._conns: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._connect_timeout = connect_timeout

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and conn.is_open:
                return conn
            host, _, port = addr.rpartition(":")
            loop = asyncio.get_running_loop()
            try:
                _, proto = await asyncio.wait_for(
                    loop.create_connection(lambda: Connection(self._dispatcher), host.strip("[]"), int(port)),
                    self._connect_timeout,
                )
            except (OSError, TimeoutError) as e:
                raise RemotingConnectError(f"connect to {addr} failed: {e}") from None
            self._conns[addr] = proto
            return proto

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(addr)
        return await conn.invoke(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        conn.invoke_oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        for c in conns:
            if c.closed is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(c.closed), 1.0)
                except TimeoutError:
                    pass
