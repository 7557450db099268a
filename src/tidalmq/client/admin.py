"""Admin: the operator's requests against a NameServer and its Brokers (used by ``tidalmq admin``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient, RemotingError


class AdminError(RemotingError):
    """A request the broker or NameServer refused: RocketMQ's code and remark."""


@dataclass
class QueueStatus:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - max(self.consumer_offset, 0))


def namesrv_from_env(addr: str | None) -> str:
    value = addr or os.environ.get("NAMESRV_ADDR") or "127.0.0.1:9876"
    return value


class Admin:
    def __init__(self, namesrv_addr: str | None = None, timeout: float = 5.0) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv_from_env(namesrv_addr).split(";") if a.strip()]
        self.timeout = timeout
        self.remoting = RemotingClient()

    async def close(self) -> None:
        await self.remoting.close()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
                    ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        resp = await self.remoting.invoke(addr, RemotingCommand(code=code, ext_fields=ext or {}, body=body), self.timeout)
        if resp.code not in ok:
            raise AdminError(resp.code, resp.remark)
        return resp

    async def _namesrv(self, code: int, ext: dict[str, str] | None = None,
                       ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self._call(addr, code, ext, ok=ok)
            except AdminError:
                raise
            except RemotingError as e:  # unreachable: try the next NameServer
                last = e
        raise last or AdminError(-1002, "no name server address")

    # cluster and routes -----------------------------------------------------------------------
    async def cluster_info(self) -> dict:
        return fastjson.loads((await self._namesrv(RC.GET_BROKER_CLUSTER_INFO)).body_bytes())

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        info = await self.cluster_info()
        names = set()
        for c, ns in info.get("clusterAddrTable", {}).items():
            if cluster is None or c == cluster:
                names |= set(ns)
        out = {}
        for name, bd in info.get("brokerAddrTable", {}).items():
            addr = (bd.get("brokerAddrs") or {}).get("0")
            if name in names and addr:
                out[name] = addr
        return out

    async def route(self, topic: str) -> dict:
        return fastjson.loads((await self._namesrv(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).body_bytes())

    async def topic_list(self) -> list[str]:
        resp = await self._namesrv(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(fastjson.loads(resp.body_bytes()).get("topicList", []))

    # topics -----------------------------------------------------------------------------------
    async def create_topic(self, topic: str, queue_nums: int = 8, *, perm: int = 6, order: bool = False,
                           cluster: str | None = None) -> list[str]:
        nm.check_topic(topic)
        masters = await self.master_addrs(cluster)
        if not masters:
            raise AdminError(ResponseCode.BROKER_NOT_EXIST, "no broker is registered with the name server")
        ext = {
            "topic": topic,
            "defaultTopic": nm.AUTO_CREATE_TOPIC_KEY_TOPIC,
            "readQueueNums": str(queue_nums),
            "writeQueueNums": str(queue_nums),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "true" if order else "false",
        }
        for addr in masters.values():
            await self._call(addr, RC.UPDATE_AND_CREATE_TOPIC, ext)
        return sorted(masters)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        masters = await self.master_addrs(cluster)
        for addr in masters.values():
            await self._call(addr, RC.DELETE_TOPIC_IN_BROKER, {"topic": topic},
                             ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        await self._namesrv(RC.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})

    async def _masters_of(self, topic: str) -> list[tuple[str, str, int]]:
        route = await self.route(topic)
        addrs = {bd["brokerName"]: (bd.get("brokerAddrs") or {}).get("0") for bd in route.get("brokerDatas", [])}
        out = []
        for qd in route.get("queueDatas", []):
            addr = addrs.get(qd["brokerName"])
            if addr:
                out.append((qd["brokerName"], addr, int(qd["readQueueNums"])))
        return out

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        out = []
        for name, addr, nq in await self._masters_of(topic):
            for q in range(nq):
                ext = {"topic": topic, "queueId": str(q)}
                mn = int((await self._call(addr, RC.GET_MIN_OFFSET, ext)).ext_fields["offset"])
                mx = int((await self._call(addr, RC.GET_MAX_OFFSET, ext)).ext_fields["offset"])
                out.append(QueueStatus(name, q, mn, mx))
        return out

    async def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        topics: list[str]
        if topic:
            topics = [topic]
        else:
            found: set[str] = set()
            for addr in (await self.master_addrs()).values():
                resp = await self._call(addr, RC.QUERY_TOPICS_BY_CONSUMER, {"group": group})
                found |= set(fastjson.loads(resp.body_bytes()).get("topicList", []))
            topics = sorted(found)
        out = []
        for t in topics:
            for name, addr, nq in await self._masters_of(t):
                for q in range(nq):
                    ext = {"topic": t, "queueId": str(q)}
                    mx = int((await self._call(addr, RC.GET_MAX_OFFSET, ext)).ext_fields["offset"])
                    resp = await self._call(addr, RC.QUERY_CONSUMER_OFFSET, {**ext, "consumerGroup": group},
                                            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
                    co = int(resp.ext_fields.get("offset", "-1")) if resp.code == ResponseCode.SUCCESS else -1
                    out.append(QueueProgress(t, name, q, mx, co))
        return out
