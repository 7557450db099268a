"""asyncio transport for remoting commands, used by servers and clients alike.

A ``Connection`` is an ``asyncio.Protocol``: it decodes frames as they arrive, hands requests
to a dispatcher, matches responses to pending requests by opaque, and can itself send requests
to the peer (the broker's NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE ...).

A dispatcher returns the response directly when it has it (the common, cheap path), an
awaitable when it has to wait (group commit, long polling), or ``None`` for no response.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from tidalmq.common.log_limit import LogLimiter, short_error
from tidalmq.remoting import connection_limits
from tidalmq.remoting.backpressure import NEW_TURN, PAUSE, RESUME, STOP, ReadBackpressure
from tidalmq.remoting.codes import ResponseCode, code_name
from tidalmq.remoting.command import (
    DEFAULT_MAX_FRAME,
    FLAG_ONEWAY,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    encode_frame_parts,
)
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.connection_limits import ConnectionLimits
from tidalmq.remoting.handshake import HandshakeAcceptor
from tidalmq.remoting.response_table import ResponseTable
from tidalmq.remoting.rpc_stats import RpcLatencyStats
from tidalmq.remoting.tls import TLS_HANDSHAKE_FIRST_BYTE
from tidalmq.remoting.verdicts import Validator, VerdictsAhead

log = logging.getLogger(__name__)

Reply = RemotingCommand | Awaitable[RemotingCommand | None] | None
Dispatcher = Callable[["Connection", RemotingCommand], Reply]

_opaques = itertools.count(1)
# A processor's failure, which a client can provoke at will: its traceback at most once a request code an
# interval, the others at DEBUG.
_failures = LogLimiter(log)


def _processor_failed(cmd: RemotingCommand, exc: BaseException) -> None:
    ok, held = _failures.allow(cmd.code)
    if ok:
        more = f" ({held} more like it not logged)" if held else ""
        log.error("processor for %s failed%s", code_name(cmd.code), more, exc_info=exc)
    else:
        log.debug("processor for %s failed: %s", code_name(cmd.code), short_error(exc))


_FLUSH_EVERY = 64  # responses queued in one read before they are written out
# Frame parts queued by send() in one loop turn before they are written out at once: a pipelining
# producer's burst written only at the turn's end left each side idle while the other worked.
_FLUSH_PARTS = 192


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
                 on_close: Callable[[Connection], None] | None = None, server: RemotingServer | None = None) -> None:
        self._dispatcher = dispatcher
        # The server this connection was accepted by: its limits apply (idle and frame timeouts, the
        # buffer budget, backpressure). A client's own connections have none.
        self._server = server
        self.last_active = time.monotonic()
        # When the read that brought the request being dispatched arrived (monotonic). Frames left in the
        # decoder while reading is paused keep their read's time, so a processor can tell how long a
        # request waited inside the server (BrokerFastFailure's "period in queue").
        self.received_at = 0.0
        self.frame_started = 0.0  # when the unfinished frame in the decoder began; 0.0: none
        self._counted = 0  # this connection's share of the server's buffered bytes
        self._bp = ReadBackpressure()  # when a server's connection reads (remoting/backpressure.py)
        self._got_data = False
        self._decoder = FrameDecoder(max_frame)
        self._responses = ResponseTable(
            lambda timeout: RemotingTimeout(f"wait response on {self.addr} timeout {int(timeout * 1000)}ms"))
        self._pending = self._responses.pending
        self._on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.remote: tuple[str, int] = ("", 0)
        self.closed: asyncio.Future[None] | None = None
        # opaque -> (request code, start) of requests answered later, while rpc latency is recorded
        self._rpc_started: dict[int, tuple[int, float]] = {}
        self.attributes: dict[str, Any] = {}  # per-connection state kept by processors (client id ...)
        self._inflight: set[asyncio.Future[Any]] = set()
        # Frames written in one loop turn go out in one writelines call, or one per _FLUSH_PARTS parts
        self._out: list[bytes | memoryview] = []
        self._flush_scheduled = False
        # Requests judged by the server's access validator ahead (remoting/verdicts.py), and the verdict
        # on the request being dispatched (the server's _dispatch takes it instead of asking again).
        self._verdicts = VerdictsAhead(self, self._decoder, self._bp, self._verdicts_came)
        self._ahead = self._verdicts.ahead
        self.verdict: tuple[RemotingCommand, RemotingCommand | None] | None = None

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not a subclass of asyncio.Transport, so no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote = (peer[0], peer[1])
        self.closed = asyncio.get_running_loop().create_future()
        srv = self._server
        if srv is not None:
            if not srv.admit(self.socket_fd(), self.remote, len(srv.connections)):
                self._on_close = None  # never served: the close listeners have nothing to forget
                self.transport.abort()
                return
            cfg = srv.config
            self.transport.set_write_buffer_limits(cfg.write_buffer_high_water_mark, cfg.write_buffer_low_water_mark)
            srv.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = self.received_at = time.monotonic()
        self._decoder.feed(data)
        self._process(data)

    def _process(self, data: bytes = b"") -> None:
        """Decode and handle what is buffered; on a server, stop early once reading is paused (the
        rest stays in the decoder until reading resumes), so one read's worth of requests cannot
        queue more than a few responses past the high-water mark."""
        decoded = False
        srv = self._server
        commands = self._decoder.commands()
        if srv is not None and srv.access_validator is not None:
            commands = self._verdicts.judged(commands, srv.access_validator)
        bp = self._bp
        try:
            for cmd in commands:
                decoded = True
                if cmd.is_response:
                    self._responses.answered(cmd)
                else:
                    size = len(cmd.body) if cmd.body is not None else 0
                    self._handle_request(cmd)
                    if srv is not None:
                        if len(self._out) >= _FLUSH_EVERY:  # writing now lets the transport say it is full
                            self._flush_out()
                        step = bp.handled(size)
                        if step & NEW_TURN:
                            # The turn ends after what its first request scheduled (a send's group commit)
                            asyncio.get_running_loop().call_soon(self._end_turn)
                        if step & STOP:
                            break
        except FrameError as e:
            remark = str(e)
            if not self._got_data and data[:1] == bytes((TLS_HANDSHAKE_FIRST_BYTE,)):
                remark = "a TLS handshake, and this port does not speak TLS (tls.server.mode=disabled)"
            log.warning("closing %s:%s: %s", *self.remote, remark)
            self._reply_error_and_close(remark)
        finally:
            commands.close()
            self._decoder.drop_consumed()  # the decoded frames' bytes (judge_later has copied what it keeps)
        self._got_data = True
        if srv is not None:
            self._account_buffered(time.monotonic(), decoded)
            if bp.turn_full or bp.awaited:
                self._update_reading()

    def _end_turn(self) -> None:
        """A new turn: the answers of the last one out, then the requests it left (if its share was
        used up), reading again once those fit in a turn."""
        if not self._bp.turn_ended() or self.transport is None:
            return
        if self._out:
            self._flush_out()
        if self._bp.may_handle and (self._decoder.buffered >= 4 or self._ahead):
            self._process()
        if not self._bp.turn_full:
            self._update_reading()

    def _verdicts_came(self) -> None:
        if self.transport is not None:
            self._update_reading()
            self._resume_buffered()

    def _resume_buffered(self) -> None:
        if self.transport is not None and not self._bp.reading_paused and (self._decoder.buffered >= 4 or self._ahead):
            self._process()

    def _account_buffered(self, now: float, decoded: bool) -> None:
        """Keep the server's count of buffered bytes of unfinished frames, and when this one began."""
        srv = self._server
        assert srv is not None
        buffered = self._decoder.buffered if self.transport is not None else 0
        delta = buffered - self._counted
        if delta:
            srv.buffered_bytes += delta
            self._counted = buffered
        if not buffered:
            self.frame_started = 0.0
        elif decoded or not self.frame_started:
            self.frame_started = now
        if delta > 0 and srv.buffered_bytes > srv.config.server_max_buffered_bytes:
            log.warning("closing %s:%s: unfinished frames of all connections exceed serverMaxBufferedBytes %d",
                        *self.remote, srv.config.server_max_buffered_bytes)
            self._reply_error_and_close("the server's buffer for unfinished frames is full")

    def check_timeouts(self, now: float, cfg: RemotingServerConfig) -> None:
        """Close the connection when idle too long, or when its unfinished frame is overdue (called by
        the server's sweep)."""
        if self.transport is None or self.transport.is_closing():
            return
        idle = cfg.server_channel_max_idle_time_seconds
        frame = cfg.server_frame_timeout_seconds
        if idle > 0 and now - self.last_active > idle:
            log.info("closing %s:%s: idle for more than %ss (serverChannelMaxIdleTimeSeconds)", *self.remote, idle)
            self.transport.close()
        elif frame > 0 and self.frame_started and not self._bp.reading_paused and now - self.frame_started > frame:
            log.warning("closing %s:%s: a frame unfinished after %ss (serverFrameTimeoutSeconds)", *self.remote, frame)
            self._reply_error_and_close(f"frame not completed within {frame}s")

    # backpressure: stop reading from a peer that does not read its responses or has too much pending
    def pause_writing(self) -> None:
        self._bp.write_paused()
        self._update_reading()

    def resume_writing(self) -> None:
        self._bp.write_resumed()
        self._update_reading()

    def _update_reading(self) -> None:
        """Carry out what the back-pressure state decides about reading."""
        t = self.transport
        if t is None or t.is_closing() or self._server is None:
            return
        decision = self._bp.decide(len(self._ahead))
        if decision is PAUSE:
            t.pause_reading()
        elif decision is RESUME:
            t.resume_reading()
            # Requests left in the decoder when reading paused are not waiting for more bytes.
            asyncio.get_running_loop().call_soon(self._resume_buffered)

    @property
    def reading_paused(self) -> bool:
        return self._bp.reading_paused

    def socket_fd(self) -> int:
        """The descriptor of the connection's socket; -1 when closed or unknown."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        try:
            return int(sock.fileno()) if sock is not None else -1
        except (OSError, ValueError):
            return -1

    def connection_lost(self, exc: Exception | None) -> None:
        self._responses.fail_all(lambda: RemotingConnectError(f"connection to {self.addr} closed"))
        for fut in list(self._inflight):
            fut.cancel()
        self._inflight.clear()
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)
        self.transport = None
        if self._server is not None:
            self._account_buffered(time.monotonic(), False)
        if self._on_close is not None:
            self._on_close(self)

    # requests from the peer --------------------------------------------------------------------
    def _handle_request(self, cmd: RemotingCommand) -> None:
        if self._dispatcher is None:
            return
        srv = self._server
        stats = srv.rpc_stats if srv is not None else None
        t0 = self.received_at  # when the frame was read: the latency a client sees, and no clock read here
        try:
            reply = self._dispatcher(self, cmd)
        except Exception as e:  # a processor bug must not take the connection down for others
            _processor_failed(cmd, e)
            reply = cmd.make_response(ResponseCode.SYSTEM_ERROR, short_error(e))
        if reply is None:
            if stats is not None and not cmd.is_oneway:
                # answered later through send() (a send's group commit, a held pull): timed there
                self._rpc_started[cmd.opaque] = (cmd.code, t0)
            return
        if isinstance(reply, RemotingCommand):
            if not cmd.is_oneway:
                self.send(reply)
            if stats is not None:
                stats.record(cmd.code, reply.code, (time.monotonic() - t0) * 1000.0)
            return
        fut = asyncio.ensure_future(reply)
        self._inflight.add(fut)
        fut.add_done_callback(functools.partial(self._deferred_done, cmd, t0))
        if srv is not None and self._bp.deferred(len(self._inflight), srv.config.server_channel_max_pending_requests):
            self._update_reading()

    def _deferred_done(self, cmd: RemotingCommand, t0: float, fut: asyncio.Future[RemotingCommand | None]) -> None:
        self._inflight.discard(fut)
        srv = self._server
        if srv is not None and self._bp.deferred_done(len(self._inflight), srv.config.server_channel_max_pending_requests):
            self._update_reading()
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            _processor_failed(cmd, exc)
            reply: RemotingCommand | None = cmd.make_response(ResponseCode.SYSTEM_ERROR, short_error(exc))
        else:
            reply = fut.result()
        if reply is not None and not cmd.is_oneway:
            self.send(reply)
        stats = self._server.rpc_stats if self._server is not None else None
        if stats is not None and reply is not None:
            stats.record(cmd.code, reply.code, (time.monotonic() - t0) * 1000.0)

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
        if self._rpc_started and cmd.is_response:
            started = self._rpc_started.pop(cmd.opaque, None)
            stats = self._server.rpc_stats if self._server is not None else None
            if started is not None and stats is not None:
                stats.record(started[0], cmd.code, (time.monotonic() - started[1]) * 1000.0)
        if len(self._out) >= _FLUSH_PARTS:
            self._flush_out()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_out)
        return True

    def _flush_out(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        t = self.transport
        if out and t is not None and not t.is_closing():
            t.writelines(out)
            self.last_active = time.monotonic()

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response."""
        if not cmd.opaque:
            cmd.opaque = next_opaque()
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        try:  # the pending entry goes in every case, even if the command cannot be encoded
            if not self.send(cmd):
                raise RemotingConnectError(f"connection to {self.addr} is closed")
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise RemotingTimeout(f"wait response on {self.addr} timeout {int(timeout * 1000)}ms") from None
        finally:
            self._pending.pop(cmd.opaque, None)

    def request(self, cmd: RemotingCommand, timeout: float | None = None) -> asyncio.Future[RemotingCommand]:
        """Send a request and return the future of its response: no Task and no coroutine per request,
        for callers that pipeline many (async sends). Without ``timeout`` the caller bounds the wait;
        with it the future fails with ``RemotingTimeout`` after ``timeout`` seconds. A lost connection
        fails it with ``RemotingConnectError`` (``connection_lost``)."""
        opaque = cmd.opaque
        if not opaque:
            opaque = cmd.opaque = next_opaque()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = fut
        if not self.send(cmd):
            del self._pending[opaque]
            fut.set_exception(RemotingConnectError(f"connection to {self.addr} is closed"))
        elif timeout is not None:
            self._responses.expire(loop, opaque, timeout, fut)
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
    """Listens on host:port and dispatches requests by code.

    With an SSLContext, ``tls_mode`` says what a connection may speak: ``enforcing`` TLS only,
    ``permissive`` TLS or plain, told apart by the first byte (remoting/handshake.py)."""

    def __init__(self, host: str, port: int, *, max_frame: int = DEFAULT_MAX_FRAME,
                 config: RemotingServerConfig | None = None, ssl_context: ssl.SSLContext | None = None,
                 tls_mode: str = "disabled") -> None:
        self.host = host
        self.port = port
        self._processors: dict[int, Dispatcher] = {}
        self._default: Dispatcher | None = None
        self._server: asyncio.AbstractServer | None = None
        self._max_frame = max_frame
        self.config = config or RemotingServerConfig()
        self._ssl = ssl_context if tls_mode != "disabled" else None
        self.tls_mode = tls_mode if self._ssl is not None else "disabled"
        self.connections: set[Connection] = set()
        self.close_listeners: list[Callable[[Connection], None]] = []
        # Asked before any processor (ACL, docs/acl.md): None lets the request through, a response refuses it.
        self.access_validator: Validator | None = None
        self.buffered_bytes = 0  # of unfinished frames, over all connections
        self.rpc_stats: RpcLatencyStats | None = None  # set when an exporter wants rocketmq_rpc_latency
        self._listener: socket.socket | None = None
        self.acceptor: HandshakeAcceptor | None = None  # with TLS: who tells plain from TLS
        self._tasks: set[asyncio.Task[None]] = set()
        self.limits = ConnectionLimits.of(self.config)
        self.log_limit = LogLimiter(log)
        self.refused_connections = 0

    def admit(self, fd: int, peer: tuple[str, int], others: int) -> bool:
        """Whether a connection just accepted, on descriptor ``fd``, may stay (self.limits), ``others``
        being open already; a refusal is counted and logged, one line every 10 s at most whatever the flood."""
        why = self.limits.refusal(others, fd)
        if why is None:
            return True
        self.refused_connections += 1
        self.log_limit.warning("refused", "port %s: refusing connections (%s), one from %s:%s",
                                self.port, why, peer[0], peer[1])
        return False

    def register(self, code: int, processor: Dispatcher) -> None:
        self._processors[int(code)] = processor

    def register_default(self, processor: Dispatcher) -> None:
        self._default = processor

    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> Reply:
        if self.access_validator is not None:
            verdict = conn.verdict  # judged ahead (remoting/verdicts.py), or not
            refused = verdict[1] if verdict is not None and verdict[0] is cmd else self.access_validator(conn, cmd)
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

    def make_connection(self) -> Connection:
        # The connection joins self.connections in connection_made: a TLS handshake may fail before.
        return Connection(self._dispatch, max_frame=self._max_frame, on_close=self._closed, server=self)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._ssl is None:
            self._server = await loop.create_server(self.make_connection, self.host, self.port, reuse_address=True)
            sock = self._server.sockets[0]
        else:
            # the first byte tells plain from TLS (remoting/handshake.py)
            sock = socket.create_server((self.host, self.port), backlog=1024)
            sock.setblocking(False)
            self._listener = sock
            self.acceptor = HandshakeAcceptor(self, self._ssl, self._spawn)
            self._spawn(self.acceptor.accept_loop(sock))
        self.port = sock.getsockname()[1]
        self._spawn(connection_limits.sweep(self))

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for c in list(self.connections):
            c.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class RemotingClient:
    """Connections by address, opened on demand; serves requests the servers send back."""

    def __init__(self, dispatcher: Dispatcher | None = None, *, connect_timeout: float = 3.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._dispatcher = dispatcher
        self.ssl_context = ssl_context  # TLS for every connection when set
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
                    loop.create_connection(lambda: Connection(self._dispatcher), host.strip("[]"), int(port),
                                           ssl=self.ssl_context),
                    self._connect_timeout,
                )
            except (OSError, TimeoutError) as e:  # ssl.SSLError is an OSError
                raise RemotingConnectError(f"connect to {addr} failed: {e}") from None
            self._conns[addr] = proto
            return proto

    def open_connection(self, addr: str) -> Connection | None:
        """The connection to ``addr`` when it is open now (no await: the hot path of async sends)."""
        conn = self._conns.get(addr)
        return conn if conn is not None and conn.is_open else None

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
