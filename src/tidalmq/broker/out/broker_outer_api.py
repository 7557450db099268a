"""BrokerOuterAPI: the broker's requests to the NameServers (REGISTER_BROKER, UNREGISTER_BROKER) and to its
master (a slave's metadata sync), and the registration schedule (RocketMQ's BrokerOuterAPI with the
registerBrokerAll and fetchNameServerAddr schedules of its BrokerController)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tidalmq.acl import RequestSigner, SessionCredentials
from tidalmq.broker.config import BrokerConfig
from tidalmq.broker.out import namesrv_lookup
from tidalmq.broker.topic.topic_config import PERM_RW, TopicConfigManager
from tidalmq.common import fastjson
from tidalmq.common.record import body_crc
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.namesrv_headers import RegisterBrokerRequestHeader
from tidalmq.remoting.tls import TlsConfig, client_context_from
from tidalmq.remoting.transport import RemotingClient, RemotingError

log = logging.getLogger(__name__)


class BrokerOuterAPI:
    def __init__(self, config: BrokerConfig, topics: TopicConfigManager, tls: TlsConfig,
                 on_registered: Callable[[dict[str, str]], None]) -> None:
        """``on_registered``: called with each NameServer's answer to REGISTER_BROKER (a slave learns its
        master's addresses from it)."""
        self.config = config
        self.topics = topics
        self._on_registered = on_registered
        # The broker's own outgoing connections speak TLS when tls.enable is set.
        self.client = RemotingClient(ssl_context=client_context_from(tls))
        # Signs what the broker sends as itself (registrations; a slave's sync requests) where ACL is on.
        self.signer: RequestSigner | None = None
        if config.access_key and config.secret_key:
            self.signer = RequestSigner(SessionCredentials(config.access_key, config.secret_key))
        self._register_event: asyncio.Event | None = None
        # Waiting for a registration that begins after they came (registered()): resolved when it ends
        self._register_waiters: list[asyncio.Future[None]] = []

    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.config.namesrv_addr.split(";") if a.strip()]

    async def start(self, loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
        """The NameServer list fetched once where an address server names it; the tasks that keep
        registering (and fetching the list), for the caller to cancel at shutdown."""
        self._register_event = asyncio.Event()
        tasks = []
        lookup_url = namesrv_lookup.address_server_url(self.config)
        if lookup_url is not None:
            await namesrv_lookup.fetch_once(self.config, lookup_url, self.register_soon)
            tasks.append(loop.create_task(namesrv_lookup.fetch_loop(
                self.config, lookup_url, self.register_soon, self.config.fetch_namesrv_addr_interval / 1000.0)))
        tasks.append(loop.create_task(self.run()))
        return tasks

    def register_soon(self) -> None:
        if self._register_event is not None:
            self._register_event.set()

    async def registered(self) -> None:
        """Register soon, and wait until a registration with every NameServer that began after this call has
        ended, however it ended (a NameServer down is logged; the periodic registration tries again).
        RocketMQ answers UPDATE_AND_CREATE_TOPIC once it registered the topic: a client that creates a topic
        and sends to it at once finds its route, not the default topic's. At once when nothing registers."""
        if self._register_event is None or not self.namesrv_addrs():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._register_waiters.append(waiter)
        self._register_event.set()
        await waiter

    async def run(self) -> None:
        """Registers every registerNameServerPeriod, and at once when asked (register_soon)."""
        assert self._register_event is not None
        period = self.config.register_name_server_period / 1000.0
        try:
            while True:
                # Those who asked before this registration's request is built: it carries what they changed.
                waiters, self._register_waiters = self._register_waiters, []
                try:
                    await self.register_all()
                finally:
                    _release(waiters)
                try:  # not wait_for: on 3.11 it drops a cancel that meets register_soon() (CPython gh-86296),
                    # and shutdown would then wait on this loop for ever
                    async with asyncio.timeout(period):
                        await self._register_event.wait()
                except TimeoutError:
                    pass
                self._register_event.clear()
        finally:  # cancelled at shutdown: nobody waits for a registration that will not come
            _release(self._register_waiters)
            self._register_waiters = []

    def _register_request(self, code: int) -> RemotingCommand:
        c = self.config
        wrapper = self.topics.wrapper()
        if c.broker_permission & PERM_RW != PERM_RW:
            # A broker that may not be written (or read) says so in its routes, as RocketMQ's registerBrokerAll
            # does: every topic's perm masked with brokerPermission, so producers (or consumers) go elsewhere.
            wrapper["topicConfigTable"] = {n: {**tc, "perm": tc["perm"] & c.broker_permission}
                                           for n, tc in wrapper["topicConfigTable"].items()}
        body = fastjson.dumpb({"topicConfigSerializeWrapper": wrapper, "filterServerList": []})
        ext = RegisterBrokerRequestHeader(
            broker_name=c.broker_name, broker_addr=c.broker_addr, cluster_name=c.broker_cluster_name,
            ha_server_addr=c.ha_server_addr, broker_id=c.broker_id, compressed=False, body_crc32=body_crc(body),
            heartbeat_timeout_millis=c.broker_not_active_timeout_millis,
        ).to_ext()
        cmd = RemotingCommand(code=code, ext_fields=ext, body=body if code == RC.REGISTER_BROKER else None)
        if self.signer is not None:
            self.signer.sign(cmd.ext_fields, cmd.body)
        return cmd

    async def register_all(self) -> None:
        for addr in self.namesrv_addrs():
            try:
                resp = await self.client.invoke(addr, self._register_request(RC.REGISTER_BROKER),
                                                self.config.register_broker_timeout_mills / 1000.0)
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("register to %s refused: [%s] %s", addr, resp.code, resp.remark)
                else:
                    self._on_registered(resp.ext_fields)
            except RemotingError as e:
                log.warning("register to name server %s failed: %s", addr, e)

    async def unregister_all(self) -> None:
        for addr in self.namesrv_addrs():
            try:
                await self.client.invoke(addr, self._register_request(RC.UNREGISTER_BROKER), 3.0)
            except RemotingError as e:
                log.warning("unregister from %s failed: %s", addr, e)

    async def invoke_as_broker(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """A request the broker sends as itself (a slave's admin requests to its master), signed where
        the broker has an account."""
        if self.signer is not None:
            self.signer.sign(cmd.ext_fields, cmd.body)
        return await self.client.invoke(addr, cmd, timeout_s)

    async def close(self) -> None:
        await self.client.close()


def _release(waiters: list[asyncio.Future[None]]) -> None:
    for w in waiters:
        if not w.done():
            w.set_result(None)
