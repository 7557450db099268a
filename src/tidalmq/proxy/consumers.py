"""The endpoint's pop consumers, one a consumer group, started when the group first receives (RocketMQ's
proxy ConsumerProcessor): receives, acks and invisibility changes of a group go through its consumer."""

from __future__ import annotations

import asyncio

from tidalmq.acl import SessionCredentials
from tidalmq.client.pop_consumer import PopConsumer
from tidalmq.remoting.tls import TlsOption


class PopConsumers:
    def __init__(self, namesrv_addr: str, credentials: SessionCredentials | None, tls: TlsOption) -> None:
        self.namesrv_addr = namesrv_addr
        self.credentials = credentials
        self.tls = tls
        self._consumers: dict[str, PopConsumer] = {}
        self._lock = asyncio.Lock()

    async def of(self, group: str) -> PopConsumer:
        c = self._consumers.get(group)
        if c is None:
            async with self._lock:
                c = self._consumers.get(group)
                if c is None:
                    c = PopConsumer(group, self.namesrv_addr, credentials=self.credentials, tls=self.tls)
                    await c.start()
                    self._consumers[group] = c
        return c

    async def stop(self) -> None:
        for c in self._consumers.values():
            await c.shutdown()
