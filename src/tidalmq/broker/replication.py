"""BrokerReplication: the broker's place in its group (docs/replication.md).

A master serves its slaves on haListenPort (HAService); a slave streams the master's CommitLog (HAClient)
and copies its metadata (SlaveSynchronize), following the master the NameServer or haMasterAddress names.
In controller mode every replica starts as a slave, and the one etcd names master is switched to its
configured master role at runtime (``stop_slave`` then ``start_master``), or fenced when replaced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tidalmq.broker.config import BrokerConfig
from tidalmq.broker.slave.slave_synchronize import SlaveSynchronize
from tidalmq.ha.client import HAClient
from tidalmq.ha.service import HAService
from tidalmq.remoting.protocol.namesrv_headers import RegisterBrokerResponseHeader
from tidalmq.store.api import MessageStore

log = logging.getLogger(__name__)


class BrokerReplication:
    def __init__(self, config: BrokerConfig, store: MessageStore, sync_flush_timeout_ms: int,
                 slave_sync: SlaveSynchronize | None, master_role: str) -> None:
        """``config.broker_role``: the role the broker takes now (SLAVE for every replica in controller
        mode); ``master_role``: the one it was configured with, taken at a promotion. ``slave_sync``: a
        slave's, else None."""
        self.config = config
        self.store = store
        self.sync_flush_timeout_ms = sync_flush_timeout_ms
        self.master_role = master_role
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync = slave_sync if config.is_slave else None
        if config.is_slave:
            self.ha_client = HAClient(config, store)
        else:
            self.ha_service = HAService(config, store, sync_flush_timeout_ms)
        self._slave_tasks: list[asyncio.Task[Any]] = []

    async def start(self, loop: asyncio.AbstractEventLoop, ephemeral_listen_port: bool) -> None:
        """Once the broker listens: a master's HA port open (its number in haListenPort), a slave's
        streaming and metadata sync running."""
        c = self.config
        if self.ha_service is not None:
            if c.ha_listen_port >= 0:
                await self.ha_service.start(c.ha_listen_port)
            elif ephemeral_listen_port:
                await self.ha_service.start(0)
            else:
                try:
                    await self.ha_service.start(c.listen_port + 1)
                except OSError as e:
                    # Unset haListenPort is only a default: slaves learn the port the NameServer names.
                    log.warning("HA: listenPort+1 (%d) unavailable (%s), taking any free port", c.listen_port + 1, e)
                    await self.ha_service.start(0)
            c.ha_listen_port = self.ha_service.port
        if self.ha_client is not None:
            self.ha_client.update_master_address(c.ha_master_address)
            self._slave_tasks.append(loop.create_task(self.ha_client.run()))
        if self.slave_sync is not None:
            self._slave_tasks.append(loop.create_task(self.slave_sync.run()))

    def on_registered(self, answer: dict[str, str]) -> None:
        """A slave learns its master from the NameServer's answer (haServerAddr, masterAddr), unless
        haMasterAddress names it (RocketMQ's updateMasterHAServerAddrPeriodically)."""
        if self.config.enable_controller_mode:
            return  # the master is the one etcd's record names
        h = RegisterBrokerResponseHeader.parse(answer)
        if self.ha_client is not None and not self.config.ha_master_address:
            self.ha_client.update_master_address(h.ha_server_addr)
        if self.slave_sync is not None:
            self.slave_sync.update_master_addr(h.master_addr)

    # controller mode --------------------------------------------------------------------------
    async def stop_slave(self) -> None:
        """Promotion's first step: the slave side stops following the old master."""
        for t in self._slave_tasks:
            t.cancel()
        await asyncio.gather(*self._slave_tasks, return_exceptions=True)
        self._slave_tasks.clear()
        self.ha_client = None
        self.slave_sync = None

    async def start_master(self) -> None:
        """Promotion's last step, once the store takes puts: the configured master role, brokerId 0, and
        an HAService for the others to follow."""
        c = self.config
        c.broker_role = self.master_role
        c.broker_id = 0
        self.ha_service = HAService(c, self.store, self.sync_flush_timeout_ms)
        await self.ha_service.start(c.listen_port + 1 if c.ha_listen_port < 0 else c.ha_listen_port)

    def fence(self) -> None:
        """Another replica was elected: this one takes no more writes (SLAVE answers)."""
        self.config.broker_role = "SLAVE"
        self.store.is_slave = True

    # ------------------------------------------------------------------------------------------
    async def stop(self) -> None:
        await self.stop_slave()
        if self.ha_service is not None:
            await self.ha_service.stop()

    def runtime_info(self) -> dict[str, str]:
        info: dict[str, str] = {}
        if self.ha_service is not None:
            info.update(self.ha_service.runtime_info())
        if self.ha_client is not None:
            info.update(self.ha_client.runtime_info())
        return info
