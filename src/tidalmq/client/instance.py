"""ClientInstance (RocketMQ's MQClientInstance): the connections, NameServer failover, topic routes,
heartbeats and the requests brokers send to clients, shared by one producer or consumer."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tidalmq.acl.signature import RequestSigner, SessionCredentials
from tidalmq.client import codec
from tidalmq.client.errors import (
    ACCESS_BROKER_TIMEOUT,
    CONNECT_BROKER_EXCEPTION,
    NO_NAME_SERVER_EXCEPTION,
    NOT_FOUND_TOPIC_EXCEPTION,
    MQBrokerError,
    MQClientError,
)
from tidalmq.client.message import MessageQueue
from tidalmq.common import fastjson
from tidalmq.common import top_addressing as ta
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol import namesrv_headers as nh
from tidalmq.remoting.protocol.header import Header, RequestError
from tidalmq.remoting.protocol.requests import ext_of
from tidalmq.remoting.tls import TlsOption, resolve_client_tls
from tidalmq.remoting.top_addressing import fetch_namesrv_addrs
from tidalmq.remoting.transport import (
    Connection,
    RemotingClient,
    RemotingConnectError,
    RemotingError,
    RemotingTimeout,
)

log = logging.getLogger(__name__)

DEFAULT_NAMESRV = "127.0.0.1:9876"
_instance_seq = itertools.count(1)


def resolve_namesrv(addr: str | None) -> list[str]:
    """The NameServer list: the argument, else ``rocketmq.namesrv.addr`` or ``NAMESRV_ADDR`` from the
    environment, else 127.0.0.1:9876; ``;``-separated."""
    value = addr or ta.configured_addr() or DEFAULT_NAMESRV
    addrs = [a.strip() for a in value.split(";") if a.strip()]
    if not addrs:
        raise MQClientError(NO_NAME_SERVER_EXCEPTION, f"no name server address in {value!r}")
    return addrs


def _cancel_requests() -> int:
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def _keep_cancel(before: int) -> None:
    """Raise CancelledError if the current task was cancelled since ``_cancel_requests()`` said ``before``
    and yet the await returned normally. Python 3.11's ``asyncio.wait_for`` (the transport waits for
    responses and connects with it) returns the result instead of raising when the awaited future
    completes in the same loop iteration as the ``cancel()`` (CPython gh-86296): the cancellation is
    lost, and a task stopped by ``shutdown()`` would go on running."""
    if _cancel_requests() > before:
        raise asyncio.CancelledError


class Member(Protocol):
    """A producer or consumer registered with the instance."""

    group: str


class Backoff:
    """Reconnect backoff per address: after a failed connect, wait 0.1 s, 0.2 s ... up to ``cap``. The
    cap is short (0.2 s): a refused connect costs next to nothing, and a broker back from a restart must
    not wait for a client's long backoff to expire before it is used again (RocketMQ's clients have none).
    A connect that fails by timing out (a host gone) waits its timeout first: no storm of attempts."""

    def __init__(self, base: float = 0.1, cap: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        self.base, self.cap, self._clock = base, cap, clock
        self._state: dict[str, tuple[int, float]] = {}

    def wait_left(self, addr: str) -> float:
        st = self._state.get(addr)
        return 0.0 if st is None else max(0.0, st[1] - self._clock())

    def failed(self, addr: str) -> float:
        n = self._state.get(addr, (0, 0.0))[0] + 1
        delay = min(self.cap, self.base * (2 ** (n - 1)))
        self._state[addr] = (n, self._clock() + delay)
        return delay

    def succeeded(self, addr: str) -> None:
        self._state.pop(addr, None)


class ClientInstance:
    """One client's view of the cluster. Created and started by Producer / PushConsumer / PullConsumer."""

    def __init__(self, namesrv_addr: str | None = None, *, instance_name: str | None = None,
                 client_ip: str | None = None, request_timeout: float = 3.0,
                 poll_name_server_interval: float = 30.0, heartbeat_broker_interval: float = 30.0,
                 credentials: SessionCredentials | None = None, tls: TlsOption = None,
                 namesrv_domain: str | None = None, namesrv_domain_subgroup: str | None = None,
                 fetch_namesrv_interval: float = ta.FETCH_INTERVAL_S) -> None:
        # No address given: the address server named by rocketmq.namesrv.domain (argument or environment)
        # lists the NameServers, asked at start and every fetch_namesrv_interval (MQClientInstance's way).
        self.ws_addr = None if namesrv_addr or ta.configured_addr() else \
            ta.configured_ws_addr(namesrv_domain, namesrv_domain_subgroup)
        self.namesrv_addrs = [] if self.ws_addr else resolve_namesrv(namesrv_addr)
        self.fetch_namesrv_interval = fetch_namesrv_interval
        self._ns_index = random.randrange(len(self.namesrv_addrs)) if self.namesrv_addrs else 0
        self.client_ip = client_ip or codec.local_ip()
        name = instance_name or f"{os.getpid()}#{time.monotonic_ns()}#{next(_instance_seq)}"
        self.client_id = codec.make_client_id(self.client_ip, name)
        self.request_timeout = request_timeout
        self.poll_interval = poll_name_server_interval
        self.heartbeat_interval = heartbeat_broker_interval
        # TLS to NameServers and brokers alike (a cluster's ports share one tls.server.mode).
        self.remoting = RemotingClient(self._dispatch, ssl_context=resolve_client_tls(tls))
        # ACL 1.0: every request to a broker or NameServer is signed as AclClientRPCHook signs it.
        self.signer = RequestSigner(credentials) if credentials is not None else None
        self.backoff = Backoff()
        self._background: set[asyncio.Future[Any]] = set()  # tasks started by broker requests
        self.routes: dict[str, codec.TopicRoute] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producers: dict[str, Any] = {}
        self.consumers: dict[str, Any] = {}
        self.request_handlers: dict[int, Callable[[Connection, RemotingCommand], Any]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._route_locks: dict[str, asyncio.Lock] = {}
        self._route_lookups: dict[tuple[str, bool], asyncio.Future[codec.TopicRoute]] = {}
        self.started = False

    # lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        if self.ws_addr is not None:
            try:
                await self.fetch_namesrv_addr()
            except ta.AddressServerError as e:  # RocketMQ's clients start anyway and keep asking
                log.warning("no NameServer list yet: %s", e)
            self._tasks.append(asyncio.create_task(
                self._every(self.fetch_namesrv_interval, self.fetch_namesrv_addr), name="namesrv-addr"))
        self._tasks.append(asyncio.create_task(self._every(self.poll_interval, self.refresh_routes), name="routes"))
        self._tasks.append(asyncio.create_task(self._every(self.heartbeat_interval, self.send_heartbeat),
                                               name="heartbeat"))

    async def shutdown(self) -> None:
        self.started = False  # the periodic tasks end even if their cancellation is lost
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.remoting.close()
        self.started = False

    async def _every(self, interval: float, fn: Callable[[], Awaitable[Any]]) -> None:
        while self.started:
            await asyncio.sleep(interval)
            if not self.started:
                return
            try:
                await fn()
            except Exception:
                log.exception("periodic %s failed", getattr(fn, "__name__", fn))

    # requests ---------------------------------------------------------------------------------
    async def _signed_connection(self, addr: str, cmd: RemotingCommand) -> Connection:
        """The connection to ``addr`` for ``cmd``, which it signs; connection failures (or ``addr`` backing
        off after one) raise ``MQClientError``. A cancellation that arrives with the connection is not lost."""
        left = self.backoff.wait_left(addr)
        if left > 0:
            raise MQClientError(CONNECT_BROKER_EXCEPTION, f"connect to {addr} failed recently; next attempt in {left:.2f}s")
        cancels = _cancel_requests()
        try:
            conn = await self.remoting.connection(addr)
        except RemotingConnectError as e:
            self.backoff.failed(addr)
            raise MQClientError(CONNECT_BROKER_EXCEPTION, e.remark) from None
        _keep_cancel(cancels)
        self.backoff.succeeded(addr)
        self.sign(cmd)
        return conn

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send a request and return the response; connection failures raise ``MQClientError``. A
        cancellation that arrives with the response is not lost (see ``_keep_cancel``)."""
        conn = await self._signed_connection(addr, cmd)
        cancels = _cancel_requests()
        try:
            resp = await conn.invoke(cmd, self.request_timeout if timeout is None else timeout)
        except RemotingTimeout as e:
            raise MQClientError(ACCESS_BROKER_TIMEOUT, e.remark) from None
        except RemotingError as e:
            raise MQClientError(e.code, e.remark) from None
        _keep_cancel(cancels)
        return resp

    def ready_connection(self, addr: str) -> Connection | None:
        """The open connection to ``addr``, if there is one and ``addr`` is not backing off: the hot path
        of async sends goes straight to it (anything else goes through ``invoke``)."""
        if self.backoff.wait_left(addr) > 0:
            return None
        return self.remoting.open_connection(addr)

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        """Add AccessKey and Signature when the client has credentials (re-signing is harmless)."""
        if self.signer is not None:
            self.signer.sign(cmd.ext_fields, cmd.body)
        return cmd

    async def invoke_ok(self, addr: str, code: int, ext: Header | None = None, body: bytes | None = None,
                        timeout: float | None = None, ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        resp = await self.invoke(addr, RemotingCommand(code=code, ext_fields=ext_of(code, ext), body=body), timeout)
        if resp.code not in ok:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return resp

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self._signed_connection(addr, cmd)
        if not conn.invoke_oneway(cmd):
            raise MQClientError(CONNECT_BROKER_EXCEPTION, f"connection to {addr} is closed")

    async def fetch_namesrv_addr(self) -> list[str]:
        """The address server's NameServer list, applied where it changed."""
        assert self.ws_addr is not None
        addrs = await fetch_namesrv_addrs(self.ws_addr)
        if addrs != self.namesrv_addrs:
            log.info("NameServer list from %s: %s (was %s)", self.ws_addr, ";".join(addrs),
                     ";".join(self.namesrv_addrs) or "none")
            self.namesrv_addrs = addrs
            self._ns_index = random.randrange(len(addrs))
        return addrs

    async def invoke_namesrv(self, code: int, ext: Header | None = None,
                             ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Ask the current NameServer; on a connection failure move on to the next one (failover)."""
        last: Exception | None = None
        n = len(self.namesrv_addrs)
        if n == 0:
            raise MQClientError(NO_NAME_SERVER_EXCEPTION, f"no name server address yet from {self.ws_addr}")
        for i in range(n):
            addr = self.namesrv_addrs[(self._ns_index + i) % n]
            try:
                resp = await self.invoke(addr, RemotingCommand(code=code, ext_fields=ext_of(code, ext)))
            except MQClientError as e:
                last = e
                continue
            self._ns_index = (self._ns_index + i) % n
            if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:  # most often a broker's port given
                raise MQBrokerError(resp.code, f"{addr} is not a NameServer: it does not take request {code} "
                                    "(a broker's port? a NameServer listens on 9876 by default)", addr)
            if resp.code not in ok:
                raise MQBrokerError(resp.code, resp.remark, addr)
            return resp
        raise MQClientError(NO_NAME_SERVER_EXCEPTION,
                            f"no name server of {';'.join(self.namesrv_addrs)} is reachable: {last}")

    # routes -----------------------------------------------------------------------------------
    async def fetch_route(self, topic: str) -> codec.TopicRoute | None:
        """The route from the NameServer, or None if the topic does not exist."""
        try:
            resp = await self.invoke_namesrv(RC.GET_ROUTEINFO_BY_TOPIC, nh.GetRouteInfoRequestHeader(topic=topic))
        except MQBrokerError as e:
            if e.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            raise
        return codec.TopicRoute.parse(topic, resp.body_bytes())

    async def update_route(self, topic: str) -> codec.TopicRoute | None:
        lock = self._route_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            route = await self.fetch_route(topic)
            if route is not None:
                self.routes[topic] = route
                for name, addrs in route.broker_addrs.items():
                    self.broker_addrs[name] = dict(addrs)
            return route

    async def route(self, topic: str, *, default_topic: bool = False) -> codec.TopicRoute:
        """The cached route of ``topic``, fetched when missing. With ``default_topic``, a topic the
        NameServer does not know yet is routed like TBW102 so the broker auto-creates it."""
        route = self.routes.get(topic)
        if route is not None:
            return route
        # Concurrent callers share one lookup. A burst of first sends would otherwise ask the NameServer
        # once each, one after the other behind the topic's lock, and the last ones time out before they
        # are sent (issue #19: 256 sends in flight, 3 s send timeouts).
        key = (topic, default_topic)
        lookup = self._route_lookups.get(key)
        if lookup is None:
            lookup = self._route_lookups[key] = asyncio.ensure_future(self._look_up_route(topic, default_topic))
            lookup.add_done_callback(functools.partial(self._route_looked_up, key))
        return await asyncio.shield(lookup)

    def _route_looked_up(self, key: tuple[str, bool], lookup: asyncio.Future[codec.TopicRoute]) -> None:
        self._route_lookups.pop(key, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved: every caller that still waits gets it from the await

    async def _look_up_route(self, topic: str, default_topic: bool) -> codec.TopicRoute:
        route = await self.update_route(topic)
        if route is not None and route.queue_datas:
            return route
        if default_topic:
            default = await self.fetch_route(codec.DEFAULT_TOPIC)
            if default is not None and default.queue_datas:
                for name, addrs in default.broker_addrs.items():
                    self.broker_addrs.setdefault(name, dict(addrs))
                return default.with_topic(topic)
        raise MQClientError(NOT_FOUND_TOPIC_EXCEPTION,
                            f"No route info of this topic: {topic}, see https://rocketmq.apache.org/docs/bestPractice/06FAQ")

    async def refresh_routes(self) -> None:
        topics = set(self.routes)
        for c in self.consumers.values():
            topics |= set(c.topics())
        for p in self.producers.values():
            topics |= set(p.topics())
        for t in topics:
            try:
                await self.update_route(t)
            except MQClientError as e:
                log.warning("route refresh of %s failed: %s", t, e)

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(codec.MASTER_ID)

    def any_broker_addr(self, broker_name: str) -> str | None:
        addrs = self.broker_addrs.get(broker_name) or {}
        return addrs.get(codec.MASTER_ID) or next(iter(addrs.values()), None)

    def all_broker_addrs(self) -> list[str]:
        return sorted({a for addrs in self.broker_addrs.values() for a in addrs.values()})

    # heartbeat --------------------------------------------------------------------------------
    def heartbeat_body(self) -> bytes:
        consumers = [c.consumer_data() for c in self.consumers.values()]
        return codec.heartbeat_body(self.client_id, list(self.producers), consumers)

    async def send_heartbeat(self) -> None:
        """HEART_BEAT to every known broker (consumers register their subscriptions this way)."""
        if not self.producers and not self.consumers:
            return
        body = self.heartbeat_body()
        addrs = self.all_broker_addrs()

        async def one(addr: str) -> None:
            try:
                await self.invoke_ok(addr, RC.HEART_BEAT, body=body)
            except MQClientError as e:
                log.warning("heartbeat to %s failed: %s", addr, e)

        await asyncio.gather(*(one(a) for a in addrs))

    async def unregister(self, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        ext = bh.UnregisterClientRequestHeader(client_id=self.client_id, producer_group=producer_group or None,
                                               consumer_group=consumer_group or None)

        async def one(addr: str) -> None:
            try:
                await self.invoke_ok(addr, RC.UNREGISTER_CLIENT, ext, timeout=3.0)
            except MQClientError as e:
                log.info("unregister from %s failed: %s", addr, e)

        await asyncio.gather(*(one(a) for a in self.all_broker_addrs()))

    async def find_consumer_ids(self, topic: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP from one broker of the topic."""
        route = self.routes.get(topic)
        names = sorted(route.broker_addrs) if route else sorted(self.broker_addrs)
        random.shuffle(names)
        for name in names:
            addr = self.any_broker_addr(name)
            if addr is None:
                continue
            try:
                resp = await self.invoke_ok(addr, RC.GET_CONSUMER_LIST_BY_GROUP, bh.GetConsumerListByGroupRequestHeader(consumer_group=group))
            except MQClientError as e:
                log.info("consumer list of %s from %s failed: %s", group, addr, e)
                continue
            return list(fastjson.loads(resp.body_bytes() or b"{}").get("consumerIdList") or [])
        return []

    # requests from brokers --------------------------------------------------------------------
    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> Any:
        handler = self.request_handlers.get(cmd.code)
        if handler is not None:
            return handler(conn, cmd)
        try:
            return self._broker_request(conn, cmd)
        except RequestError as e:  # a header this client cannot read (declared in remoting/protocol)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(e))

    def _broker_request(self, conn: Connection, cmd: RemotingCommand) -> Any:
        if cmd.code == RC.NOTIFY_CONSUMER_IDS_CHANGED:
            c = self.consumers.get(bh.NotifyConsumerIdsChangedRequestHeader.parse(cmd.ext_fields).consumer_group)
            if c is not None:
                c.rebalance_soon()
            return None
        if cmd.code == RC.RESET_CONSUMER_CLIENT_OFFSET:
            c = self.consumers.get(bh.ResetOffsetRequestHeader.parse(cmd.ext_fields).group)
            reset = getattr(c, "reset_offsets", None)
            if reset is not None:
                table = {}
                for e in fastjson.loads(cmd.body_bytes() or b"{}").get("offsetTable") or []:
                    table[MessageQueue(e["topic"], e["brokerName"], int(e["queueId"]))] = int(e["offset"])
                task = asyncio.ensure_future(reset(table))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return None
        if cmd.code == RC.CHECK_TRANSACTION_STATE:
            # The producer of the message's group answers (several transactional producers may share
            # this client instance); the group travels in the message's PGROUP property.
            group = None
            try:
                msgs = codec.decode_messages(cmd.body_bytes())
                group = msgs[0].properties.get("PGROUP") if msgs else None
            except Exception:
                log.warning("CHECK_TRANSACTION_STATE with an undecodable message body")
            checkers = [p for p in self.producers.values() if getattr(p, "on_check_transaction_state", None)]
            chosen = next((p for p in checkers if getattr(p, "group", None) == group), None)
            if chosen is None and checkers and group is None:
                chosen = checkers[0]
            return chosen.on_check_transaction_state(conn, cmd) if chosen is not None else None
        if cmd.code == RC.GET_CONSUMER_RUNNING_INFO:
            asked = bh.GetConsumerRunningInfoRequestHeader.parse(cmd.ext_fields)
            c = self.consumers.get(asked.consumer_group)
            if c is None:
                return cmd.make_response(ResponseCode.SYSTEM_ERROR, "The Consumer Group not exist in this consumer")
            return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(
                c.running_info(jstack=bool(asked.jstack_enable))))
        return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                 f"request code {cmd.code} not supported by the TidalMQ client")
