"""The console's admin client: it sends requests only to its NameServers and to the brokers they list.

Some of what the console is asked for names an address: an offset message id carries the host and port
of the broker that stored it, and a visitor types the id. Followed as given, the console would connect
wherever the id points (a port scanner for anyone who reaches it) and, with ACL on, sign the request with
its admin account for whoever listens there to capture. Every request therefore passes one check here:
its address is a configured NameServer or a broker address of the NameServer's latest cluster info
(GET_BROKER_CLUSTER_INFO, asked again when an address is not in the last answer, since a broker may have
registered since). Nothing is sent, and nothing signed, to any other address (docs/console.md, Security).
"""

from __future__ import annotations

from tidalmq.client.admin import Admin, AdminError
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.header import Header


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
