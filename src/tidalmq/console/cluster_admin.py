"""The console's admin client: it sends requests only to its NameServers and to the brokers they list.

Some of what the console is asked for names an address: an offset message id carries the host and port
of the broker that stored it, and a visitor types the id. Followed as given, the console would connect
wherever the id points (a port scanner for anyone who reaches it) and, with ACL on, sign the request with
its admin account for whoever listens there to capture. Every request therefore passes one check here:
its address is a configured NameServer or a broker address of the NameServer's latest cluster info
(GET_BROKER_CLUSTER_INFO, asked again when an address is not in the last answer, since a broker may have
registered since). Nothing is sent, and nothing signed, to any other address (docs/console.md, Security).

Given no NameServer address but an address server (``rocketmq.namesrv.domain``), the console asks it for
the list, and again every ``fetch_interval`` seconds (RocketMQ's two minutes), so that it follows a moved
NameServer cluster without a restart, as RocketMQ's clients do; an address server that does not answer
leaves the last list in use.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tidalmq.client.admin import Admin, AdminError
from tidalmq.common import top_addressing as ta
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.header import Header
from tidalmq.remoting.top_addressing import fetch_namesrv_addrs

log = logging.getLogger(__name__)


class UnlistedAddress(AdminError):
    """An address the cluster does not list: the console sends it no request."""

    def __init__(self, addr: str) -> None:
        super().__init__(ResponseCode.NO_PERMISSION,
                         f"{addr} is not a broker the NameServer lists: the console sends no request there")
        self.addr = addr


def broker_addrs(cluster_info: dict) -> set[str]:
    """Every broker address (masters and slaves) of a GET_BROKER_CLUSTER_INFO answer."""
    out: set[str] = set()
    for data in (cluster_info.get("brokerAddrTable") or {}).values():
        out.update(str(a) for a in ((data or {}).get("brokerAddrs") or {}).values() if a)
    return out


class ClusterAdmin(Admin):
    """``Admin`` whose requests go only to its NameServers and the brokers they list."""

    _listed: frozenset[str] = frozenset()

    def __init__(self, namesrv_addr: str | None = None, *, namesrv_domain: str | None = None,
                 namesrv_domain_subgroup: str | None = None, fetch_interval: float = ta.FETCH_INTERVAL_S,
                 **kwargs: Any) -> None:
        super().__init__(namesrv_addr or None, **kwargs)
        if not namesrv_addr and namesrv_domain:  # named outright: wins over the environment's NAMESRV_ADDR
            self.ws_addr, self.namesrv_addrs = ta.configured_ws_addr(namesrv_domain, namesrv_domain_subgroup), []
        self.fetch_interval = fetch_interval
        self._fetched_at: float | None = None

    async def _namesrv_list(self) -> list[str]:
        now = time.monotonic()
        if self.ws_addr is None or (self._fetched_at is not None and now - self._fetched_at < self.fetch_interval):
            return await super()._namesrv_list()
        self._fetched_at = now
        try:
            addrs = await fetch_namesrv_addrs(self.ws_addr, self.timeout)
        except ta.AddressServerError as e:
            if not self.namesrv_addrs:
                raise AdminError(-1, f"no NameServer list: {e}") from None
            log.warning("address server %s: %s; the NameServer list stays %s", self.ws_addr, e,
                        ";".join(self.namesrv_addrs))
            return self.namesrv_addrs
        if addrs != self.namesrv_addrs:
            log.info("NameServer list from %s: %s (was %s)", self.ws_addr, ";".join(addrs),
                     ";".join(self.namesrv_addrs) or "none")
            self.namesrv_addrs = addrs
        return addrs

    async def cluster_info(self) -> dict:
        info = await super().cluster_info()
        # replaced, not added to: a broker that left the cluster is no longer a place to send to
        self._listed = frozenset(broker_addrs(info))
        return info

    async def _call(self, addr: str, code: int, ext: Header | None = None, body: bytes | None = None,
                    ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        if addr not in self.namesrv_addrs and addr not in self._listed:
            await self.cluster_info()  # a NameServer request: allowed above, so no recursion
            if addr not in self._listed:
                raise UnlistedAddress(addr)
        return await super()._call(addr, code, ext, body, ok)
