"""Admin: the operator's requests against a NameServer and its Brokers (used by ``tidalmq admin``):
cluster and routes, topics, subscription groups, consumer offsets, progress and lag, messages by key or id."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tidalmq.acl.signature import RequestSigner, SessionCredentials
from tidalmq.client.codec import decode_messages
from tidalmq.client.message import MessageExt, MessageQueue
from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common import top_addressing as ta
from tidalmq.common.message import encode_properties
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol import namesrv_headers as nh
from tidalmq.remoting.protocol.header import Header
from tidalmq.remoting.protocol.requests import ext_of
from tidalmq.remoting.tls import TlsOption, resolve_client_tls
from tidalmq.remoting.top_addressing import fetch_namesrv_addrs
from tidalmq.remoting.transport import RemotingClient, RemotingError


class AdminError(RemotingError):
    """A request the broker or NameServer refused: RocketMQ's code and remark."""


@dataclass
class QueueStatus:
    """Offsets of one queue: the first message still stored and the offset after the last one."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass
class QueueProgress:
    """A consumer group's position in one queue; ``lag`` is what it has yet to consume."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - max(self.consumer_offset, 0))


@dataclass
class OffsetWrapper:
    """One queue of a ConsumeStats (RocketMQ's OffsetWrapper): ``last_timestamp`` is the store time of
    the last message the group consumed there (0: none)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    pull_offset: int = 0  # how far the group has pulled (RocketMQ 5's pullOffset)

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset

    @property
    def inflight(self) -> int:
        """Pulled, not yet acknowledged (RocketMQ 5's consumerProgress #Inflight)."""
        return self.pull_offset - self.consumer_offset


@dataclass
class ConsumeStats:
    """A group's ConsumeStats over the brokers: its queues and its consume TPS (the minute's gets)."""

    consume_tps: float = 0.0
    queues: list[OffsetWrapper] = field(default_factory=list)

    def total_diff(self) -> int:
        return sum(q.diff for q in self.queues)


def _mq_key(key: str) -> tuple[str, str, int]:
    """A MessageQueue written as a map key by fastjson (its JSON text once read): (topic, broker, queue)."""
    mq = fastjson.loads(key)
    return mq["topic"], mq["brokerName"], int(mq["queueId"])


def _offset(resp: RemotingCommand) -> int:
    return bh.OffsetResponseHeader.parse(resp.ext_fields).offset


def namesrv_from_env(addr: str | None) -> str:
    value = addr or ta.configured_addr() or "127.0.0.1:9876"
    return value


def _signed_attributes(text: str) -> dict[str, str]:
    """RocketMQ's modification text as the signed-key map a group config carries (``+k=v`` → {"+k": "v"},
    ``-k`` → {"-k": ""}); the broker checks it (AttributeParser's rules)."""
    out: dict[str, str] = {}
    for kv in text.split(","):
        key, _, value = kv.partition("=")
        out[key] = value
    return out


class Admin:
    """The operator's client: ``async with Admin("127.0.0.1:9876") as admin: await admin.topic_list()``.
    Errors raise ``AdminError`` with RocketMQ's response code and remark."""

    def __init__(self, namesrv_addr: str | None = None, timeout: float = 5.0,
                 credentials: SessionCredentials | None = None, *, tls: TlsOption = None) -> None:
        # No address given: the address server that rocketmq.namesrv.domain names lists them (asked once)
        self.ws_addr = None if namesrv_addr or ta.configured_addr() else ta.configured_ws_addr()
        self.namesrv_addrs = [] if self.ws_addr else \
            [a.strip() for a in namesrv_from_env(namesrv_addr).split(";") if a.strip()]
        self.timeout = timeout
        self.remoting = RemotingClient(ssl_context=resolve_client_tls(tls))
        # ACL 1.0: an admin account signs every request (docs/acl.md)
        self.signer = RequestSigner(credentials) if credentials is not None else None

    async def close(self) -> None:
        await self.remoting.close()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, addr: str, code: int, ext: Header | None = None, body: bytes | None = None,
                    ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        cmd = RemotingCommand(code=code, ext_fields=ext_of(code, ext), body=body)
        if self.signer is not None:
            self.signer.sign(cmd.ext_fields, body)
        resp = await self.remoting.invoke(addr, cmd, self.timeout)
        if resp.code not in ok:
            raise AdminError(resp.code, resp.remark)
        return resp

    async def _namesrv_list(self) -> list[str]:
        if not self.namesrv_addrs and self.ws_addr is not None:
            try:
                self.namesrv_addrs = await fetch_namesrv_addrs(self.ws_addr, self.timeout)
            except ta.AddressServerError as e:
                raise AdminError(-1, f"no NameServer list: {e}") from None
        return self.namesrv_addrs

    async def _namesrv(self, code: int, ext: Header | None = None,
                       ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        last: Exception | None = None
        for addr in await self._namesrv_list():
            try:
                return await self._call(addr, code, ext, ok=ok)
            except AdminError:
                raise
            except RemotingError as e:  # unreachable: try the next NameServer
                last = e
        raise last or AdminError(-1002, "no name server address")

    async def _send(self, addr: str, group: str, topic: str, props: dict[str, str], body: bytes, *,
                    queue_id: int = 0, queue_nums: int = 4, flag: int = 0) -> RemotingCommand:
        """One SEND_MESSAGE_V2 the operator's tools make themselves (cancel, dead-letter re-send)."""
        ext = bh.SendMessageRequestHeader(
            producer_group=group, topic=topic, default_topic=nm.AUTO_CREATE_TOPIC_KEY_TOPIC,
            default_topic_queue_nums=queue_nums, queue_id=queue_id, born_timestamp=int(time.time() * 1000), flag=flag,
            properties=encode_properties(props))
        return await self._call(addr, RC.SEND_MESSAGE_V2, ext, body=body)

    # cluster and routes -----------------------------------------------------------------------
    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's configuration, RocketMQ's key names (``key=value`` lines)."""
        text = (await self._call(addr, RC.GET_BROKER_CONFIG)).body_bytes().decode("utf-8")
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    async def update_broker_config(self, addr: str, props: dict[str, str]) -> None:
        """UPDATE_BROKER_CONFIG: ``key=value`` lines, as RocketMQ's MQClientAPIImpl.updateBrokerConfig sends
        its Properties; the broker applies live keys only (docs/mqadmin.md)."""
        body = "".join(f"{k}={v}\n" for k, v in props.items()).encode("utf-8")
        await self._call(addr, RC.UPDATE_BROKER_CONFIG, body=body)

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG on every NameServer (as RocketMQ's admin does: each keeps its own table)."""
        for addr in await self._namesrv_list():
            await self._call(addr, RC.PUT_KV_CONFIG, nh.PutKVConfigRequestHeader(namespace=namespace, key=key, value=value))

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG of the first NameServer that answers; None when it has no such key."""
        resp = await self._namesrv(RC.GET_KV_CONFIG, nh.KVConfigRequestHeader(namespace=namespace, key=key),
                                   ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        return nh.GetKVConfigResponseHeader.parse(resp.ext_fields).value if resp.code == ResponseCode.SUCCESS else None

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        for addr in await self._namesrv_list():
            await self._call(addr, RC.DELETE_KV_CONFIG, nh.KVConfigRequestHeader(namespace=namespace, key=key))

    async def cluster_info(self) -> dict:
        return fastjson.loads((await self._namesrv(RC.GET_BROKER_CLUSTER_INFO)).body_bytes())

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of one broker: its runtime table (``diskFull``, ``diskFullReason`` ...)."""
        return fastjson.loads((await self._call(addr, RC.GET_BROKER_RUNTIME_INFO)).body_bytes()).get("table", {})

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
        return fastjson.loads((await self._namesrv(RC.GET_ROUTEINFO_BY_TOPIC, nh.GetRouteInfoRequestHeader(topic=topic))).body_bytes())

    async def topic_list(self) -> list[str]:
        resp = await self._namesrv(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(fastjson.loads(resp.body_bytes()).get("topicList", []))

    # topics -----------------------------------------------------------------------------------
    async def create_topic(self, topic: str, queue_nums: int = 8, *, perm: int = 6, order: bool = False,
                           cluster: str | None = None, attributes: str | Mapping[str, str] | None = None,
                           write_queue_nums: int | None = None, broker_addrs: list[str] | None = None) -> list[str]:
        """Create or update ``topic`` on every master of the cluster. ``attributes``: RocketMQ 5 topic
        attributes, as RocketMQ's modification text (``"+message.type=FIFO,-reserve.time"``) or a mapping to
        add or alter (``{"message.type": "DELAY"}``); the broker refuses illegal ones (AdminError).
        ``queue_nums`` is the read queue count, ``write_queue_nums`` the write one (default the same);
        ``broker_addrs`` names the brokers instead (mqadmin's ``-b``), returned as they are."""
        nm.check_topic(topic)
        masters = ({a: a for a in broker_addrs} if broker_addrs is not None else await self.master_addrs(cluster))
        if not masters:
            raise AdminError(ResponseCode.BROKER_NOT_EXIST, "no broker is registered with the name server")
        ext = bh.CreateTopicRequestHeader(
            topic=topic, default_topic=nm.AUTO_CREATE_TOPIC_KEY_TOPIC, read_queue_nums=queue_nums,
            write_queue_nums=queue_nums if write_queue_nums is None else write_queue_nums, perm=perm, order=order)
        if attributes:
            ext.attributes = (attributes if isinstance(attributes, str)
                              else ",".join(f"+{k}={v}" for k, v in attributes.items()))
        for addr in masters.values():
            await self._call(addr, RC.UPDATE_AND_CREATE_TOPIC, ext)
        return sorted(masters)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        masters = await self.master_addrs(cluster)
        for addr in masters.values():
            await self._call(addr, RC.DELETE_TOPIC_IN_BROKER, bh.TopicRequestHeader(topic=topic),
                             ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        await self._namesrv(RC.DELETE_TOPIC_IN_NAMESRV, nh.DeleteTopicFromNamesrvRequestHeader(topic=topic))

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
                ext = bh.TopicQueueRequestHeader(topic=topic, queue_id=q)
                mn = _offset(await self._call(addr, RC.GET_MIN_OFFSET, ext))
                mx = _offset(await self._call(addr, RC.GET_MAX_OFFSET, ext))
                out.append(QueueStatus(name, q, mn, mx))
        return out

    async def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        topics: list[str]
        if topic:
            topics = [topic]
        else:
            found: set[str] = set()
            for addr in (await self.master_addrs()).values():
                resp = await self._call(addr, RC.QUERY_TOPICS_BY_CONSUMER, bh.QueryTopicsByConsumerRequestHeader(group=group))
                found |= set(fastjson.loads(resp.body_bytes()).get("topicList", []))
            topics = sorted(found)
        out = []
        for t in topics:
            for name, addr, nq in await self._masters_of(t):
                for q in range(nq):
                    mx = _offset(await self._call(addr, RC.GET_MAX_OFFSET, bh.TopicQueueRequestHeader(topic=t, queue_id=q)))
                    resp = await self._call(addr, RC.QUERY_CONSUMER_OFFSET, bh.QueryConsumerOffsetRequestHeader(
                                                consumer_group=group, topic=t, queue_id=q),
                                            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
                    co = _offset(resp) if resp.code == ResponseCode.SUCCESS else -1
                    out.append(QueueProgress(t, name, q, mx, co))
        return out

    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS on every master (RocketMQ's examineConsumeStats): the group's queues with
        their last consumed store time, and its consume TPS summed over the brokers."""
        out = ConsumeStats()
        for addr in (await self.master_addrs()).values():
            ext = bh.GetConsumeStatsRequestHeader(consumer_group=group, topic=topic or None)
            body = fastjson.loads((await self._call(addr, RC.GET_CONSUME_STATS, ext)).body_bytes())
            out.consume_tps += float(body.get("consumeTps") or 0)
            for key, w in (body.get("offsetTable") or {}).items():
                consumed = int(w.get("consumerOffset", 0))
                out.queues.append(OffsetWrapper(*_mq_key(key), int(w.get("brokerOffset", 0)), consumed,
                                                int(w.get("lastTimestamp", 0)), int(w.get("pullOffset", consumed))))
        out.queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
        return out

    async def broker_consume_stats(self, addr: str, order_only: bool = False) -> dict:
        """GET_BROKE_CONSUME_STATS of one broker: ConsumeStatsList (brokerAddr, consumeStatsList, totalDiff)."""
        resp = await self._call(addr, RC.GET_BROKE_CONSUME_STATS, bh.GetConsumeStatsInBrokerHeader(is_order=order_only))
        return fastjson.loads(resp.body_bytes())

    async def broker_stats_data(self, addr: str, stats_name: str, stats_key: str) -> dict:
        """VIEW_BROKER_STATS_DATA: one stats item's minute, hour and day windows (statsMinute, statsHour,
        statsDay: sum, tps, avgpt); AdminError SYSTEM_ERROR when the broker never counted the key."""
        resp = await self._call(addr, RC.VIEW_BROKER_STATS_DATA, bh.ViewBrokerStatsDataRequestHeader(stats_name=stats_name, stats_key=stats_key))
        return fastjson.loads(resp.body_bytes())

    async def topic_stats(self, topic: str) -> list[tuple[QueueStatus, int]]:
        """GET_TOPIC_STATS_INFO on the topic's masters: each queue's offsets and the store time of its last
        message (0: none), sorted."""
        out = []
        for _name, addr, _ in await self._masters_of(topic):
            body = fastjson.loads((await self._call(addr, RC.GET_TOPIC_STATS_INFO, bh.TopicRequestHeader(topic=topic))).body_bytes())
            for key, o in (body.get("offsetTable") or {}).items():
                _, broker, qid = _mq_key(key)
                out.append((QueueStatus(broker, qid, int(o.get("minOffset", 0)), int(o.get("maxOffset", 0))),
                            int(o.get("lastUpdateTimestamp", 0))))
        return sorted(out, key=lambda q: (q[0].broker_name, q[0].queue_id))

    async def consumer_running_info(self, group: str, client_id: str) -> dict:
        """GET_CONSUMER_RUNNING_INFO, asked of the consumer through a master that has it online."""
        last: AdminError | None = None
        for addr in (await self.master_addrs()).values():
            try:
                resp = await self._call(addr, RC.GET_CONSUMER_RUNNING_INFO,
                                        bh.GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=client_id, jstack_enable=False))
                return fastjson.loads(resp.body_bytes())
            except AdminError as e:
                last = e
        raise last or AdminError(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer {client_id} is not online")

    async def total_lag(self, group: str, topic: str | None = None) -> int:
        """What the group has yet to consume, over all queues of its topics."""
        return sum(p.lag for p in await self.consumer_progress(group, topic))

    async def topic_config(self, topic: str) -> dict:
        """The topic's configuration on each master broker (broker name -> TopicConfig JSON)."""
        out = {}
        for name, addr in (await self.master_addrs()).items():
            resp = await self._call(addr, RC.GET_TOPIC_CONFIG, bh.TopicRequestHeader(topic=topic),
                                    ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
            if resp.code == ResponseCode.SUCCESS:
                out[name] = fastjson.loads(resp.body_bytes()).get("topicConfig", {})
        return out

    async def topic_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of a topic, sorted."""
        out = []
        for name, _addr, nq in await self._masters_of(topic):
            out += [MessageQueue(topic, name, q) for q in range(nq)]
        return sorted(out)

    async def _broker_of(self, mq: MessageQueue) -> str:
        for name, addr, _ in await self._masters_of(mq.topic):
            if name == mq.broker_name:
                return addr
        raise AdminError(ResponseCode.BROKER_NOT_EXIST, f"broker {mq.broker_name} does not serve topic {mq.topic}")

    # subscription groups ------------------------------------------------------------------------
    async def create_group(self, group: str, *, retry_max_times: int = 16, retry_queue_nums: int = 1,
                           consume_broadcast_enable: bool = True, consume_enable: bool = True,
                           consume_message_orderly: bool = False, consume_from_min_enable: bool = True,
                           cluster: str | None = None, broker_addrs: list[str] | None = None,
                           attributes: str | Mapping[str, str] | None = None, broker_id: int = 0,
                           which_broker_when_consume_slowly: int = 1, notify_consumer_ids_changed: bool = True,
                           group_retry_policy: Mapping[str, object] | None = None) -> list[str]:
        """Create or update a subscription group on every master broker (or on ``broker_addrs``).
        ``consume_message_orderly``: a FIFO group for the 5.x clients (RocketMQ 5's consumeMessageOrderly).
        ``attributes``: RocketMQ 5 group attributes (``priority.factor``), as RocketMQ's modification text
        (``"+priority.factor=50"``, ``"-priority.factor"``) or a mapping to add or alter; none keeps the
        group's current ones."""
        nm.check_group(group)
        config: dict[str, object] = {
            "groupName": group, "consumeEnable": consume_enable, "consumeFromMinEnable": consume_from_min_enable,
            "consumeBroadcastEnable": consume_broadcast_enable, "retryQueueNums": retry_queue_nums,
            "retryMaxTimes": retry_max_times, "brokerId": broker_id,
            "whichBrokerWhenConsumeSlowly": which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": notify_consumer_ids_changed,
            "consumeMessageOrderly": consume_message_orderly,
        }
        if group_retry_policy is not None:
            config["groupRetryPolicy"] = dict(group_retry_policy)
        if attributes:
            config["attributes"] = (_signed_attributes(attributes) if isinstance(attributes, str)
                                    else {f"+{k}": str(v) for k, v in attributes.items()})
        body = fastjson.dumpb(config)
        masters = ({a: a for a in broker_addrs} if broker_addrs is not None else await self.master_addrs(cluster))
        for addr in masters.values():
            await self._call(addr, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        return sorted(masters)

    async def delete_group(self, group: str, cluster: str | None = None, broker_addrs: list[str] | None = None) -> None:
        addrs = broker_addrs if broker_addrs is not None else list((await self.master_addrs(cluster)).values())
        for addr in addrs:
            await self._call(addr, RC.DELETE_SUBSCRIPTIONGROUP, bh.DeleteSubscriptionGroupRequestHeader(group_name=group),
                             ok=(ResponseCode.SUCCESS, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST))

    async def group_list(self) -> dict[str, dict]:
        """Subscription groups of every master broker (group -> config JSON)."""
        out: dict[str, dict] = {}
        for addr in (await self.master_addrs()).values():
            resp = await self._call(addr, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            out.update(fastjson.loads(resp.body_bytes()).get("subscriptionGroupTable", {}))
        return dict(sorted(out.items()))

    async def producer_connections(self, group: str, topic: str) -> list[dict]:
        """The producers of a group connected to the masters of the topic's route (clientId, clientAddr,
        language, version), as RocketMQ's examineProducerConnectionInfo asks the topic's broker; the broker's
        refusal (SYSTEM_ERROR "the producer group[G] not exist") when none has one."""
        out: list[dict] = []
        refused: AdminError | None = None
        for bd in (await self.route(topic)).get("brokerDatas", []):
            addr = (bd.get("brokerAddrs") or {}).get("0")
            if not addr:
                continue
            try:
                resp = await self._call(addr, RC.GET_PRODUCER_CONNECTION_LIST, bh.GetProducerConnectionListRequestHeader(producer_group=group))
            except AdminError as e:
                refused = e
                continue
            out += fastjson.loads(resp.body_bytes()).get("connectionSet", [])
        if not out and refused is not None:
            raise refused
        return out

    async def clean_expired_consume_queue(self, addr: str) -> None:
        """CLEAN_EXPIRED_CONSUMEQUEUE on one broker."""
        await self._call(addr, RC.CLEAN_EXPIRED_CONSUMEQUEUE)

    async def consumer_connection_info(self, group: str) -> dict:
        """GET_CONSUMER_CONNECTION_LIST over the masters, as one ConsumerConnection: every broker's
        connectionSet, and consumeType / messageModel as the first broker that has the group says; an empty
        dict when no broker has it online."""
        out: dict = {}
        for addr in (await self.master_addrs()).values():
            resp = await self._call(addr, RC.GET_CONSUMER_CONNECTION_LIST, bh.GetConsumerConnectionListRequestHeader(consumer_group=group),
                                    ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
            if resp.code == ResponseCode.SUCCESS:
                body = fastjson.loads(resp.body_bytes())
                conns = out.get("connectionSet", []) + body.get("connectionSet", [])
                out = {**body, **out, "connectionSet": conns}
        return out

    async def consumer_connections(self, group: str) -> list[dict]:
        """The online consumers of a group on each broker (clientId, clientAddr, language, version)."""
        out: list[dict] = []
        for addr in (await self.master_addrs()).values():
            resp = await self._call(addr, RC.GET_CONSUMER_CONNECTION_LIST, bh.GetConsumerConnectionListRequestHeader(consumer_group=group),
                                    ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
            if resp.code == ResponseCode.SUCCESS:
                out += fastjson.loads(resp.body_bytes()).get("connectionSet", [])
        return out

    async def groups_consuming(self, topic: str) -> list[str]:
        """Groups that consume (or have offsets of) a topic (QUERY_TOPIC_CONSUME_BY_WHO)."""
        found: set[str] = set()
        for _, addr, _ in await self._masters_of(topic):
            resp = await self._call(addr, RC.QUERY_TOPIC_CONSUME_BY_WHO, bh.TopicRequestHeader(topic=topic))
            found |= set(fastjson.loads(resp.body_bytes()).get("groupList", []))
        return sorted(found)

    # offsets ------------------------------------------------------------------------------------
    async def query_offset(self, group: str, mq: MessageQueue) -> int:
        """The group's committed offset of one queue (-1 if none)."""
        addr = await self._broker_of(mq)
        resp = await self._call(addr, RC.QUERY_CONSUMER_OFFSET,
                                bh.QueryConsumerOffsetRequestHeader(consumer_group=group, topic=mq.topic,
                                                                    queue_id=mq.queue_id),
                                ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        return _offset(resp) if resp.code == ResponseCode.SUCCESS else -1

    async def update_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """Set the group's committed offset of one queue (consumers that are online may overwrite it)."""
        addr = await self._broker_of(mq)
        await self._call(addr, RC.UPDATE_CONSUMER_OFFSET, bh.UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset))

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        addr = await self._broker_of(mq)
        resp = await self._call(addr, RC.SEARCH_OFFSET_BY_TIMESTAMP,
                                bh.SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms))
        return _offset(resp)

    async def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int,
                                   progress: Callable[[], None] | None = None) -> dict[MessageQueue, int]:
        """Move the group's offsets of every queue of ``topic`` to the first message at or after the time
        (offline reset: stop the group's consumers first, as with RocketMQ's resetOffsetByTime)."""
        out = {}
        for mq in await self.topic_queues(topic):
            off = await self.search_offset(mq, timestamp_ms)
            await self.update_offset(group, mq, off)
            out[mq] = off
            if progress is not None:  # one queue done (mqadmin's terminal counter)
                progress()
        return out

    # messages -----------------------------------------------------------------------------------
    async def query_messages_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                                    end_ms: int | None = None,
                                    progress: Callable[[], None] | None = None) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) contain ``key``, from the brokers' index;
        ``progress`` is called once per broker searched."""
        out: list[MessageExt] = []
        for name, addr, _ in await self._masters_of(topic):
            out += await self._query_index(name, addr, topic, key, max_num, begin_ms, end_ms)
            if progress is not None:
                progress()
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num]

    async def _query_index(self, name: str, addr: str, topic: str, key: str, max_num: int, begin_ms: int = 0,
                           end_ms: int | None = None) -> list[MessageExt]:
        """QUERY_MESSAGE on one broker: the messages stored under ``topic`` whose KEYS or UNIQ_KEY is ``key``."""
        end_ms = int(time.time() * 1000) + 60_000 if end_ms is None else end_ms
        ext = bh.QueryMessageRequestHeader(topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
                                           end_timestamp=end_ms)
        resp = await self._call(addr, RC.QUERY_MESSAGE, ext, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if resp.code != ResponseCode.SUCCESS:
            return []
        return [m for m in decode_messages(resp.body_bytes(), name)
                if m.topic == topic and (key in m.keys or m.properties.get("UNIQ_KEY") == key)]

    async def _queue_messages(self, name: str, addr: str, topic: str, queue_id: int, index: int, count: int,
                              group: str = "") -> tuple[list[MessageExt], int]:
        """Up to ``count`` messages of one queue from ``index`` on (QUERY_CONSUME_QUEUE, then VIEW_MESSAGE_BY_ID
        each): works on queues no subscription may read (the DLQ). Returns them and the index after the last
        entry read (0 entries read: the same index)."""
        resp = await self._call(addr, RC.QUERY_CONSUME_QUEUE, bh.QueryConsumeQueueRequestHeader(
            topic=topic, queue_id=queue_id, index=index, count=count, consumer_group=group or None),
            ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if resp.code != ResponseCode.SUCCESS:
            return [], index  # the broker has no such queue
        data = fastjson.loads(resp.body_bytes())
        rows = data.get("queueData") or []
        out: list[MessageExt] = []
        for row in rows:
            view = await self._call(addr, RC.VIEW_MESSAGE_BY_ID, bh.ViewMessageRequestHeader(offset=int(row["physicOffset"])),
                                    ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
            if view.code == ResponseCode.SUCCESS:  # a file already deleted by retention is skipped
                out.extend(decode_messages(view.body_bytes(), name))
        return out, (max(index, int(data.get("minQueueIndex", 0))) + len(rows) if rows else index)

    async def messages_by_time(self, topic: str, begin_ms: int, end_ms: int, max_num: int = 64) -> list[MessageExt]:
        """Messages of ``topic`` stored between ``begin_ms`` and ``end_ms`` (each queue from the offset
        SEARCH_OFFSET_BY_TIMESTAMP gives for ``begin_ms``), oldest first, at most ``max_num``."""
        out: list[MessageExt] = []
        for name, addr, nq in await self._masters_of(topic):
            for q in range(nq):
                index = await self.search_offset(MessageQueue(topic, name, q), begin_ms)
                taken = 0
                while taken < max_num:  # each queue gives at most max_num: the oldest overall are kept below
                    msgs, nxt = await self._queue_messages(name, addr, topic, q, index, min(32, max_num))
                    if nxt == index:
                        break  # the end of the queue
                    index = nxt
                    inside = [m for m in msgs if begin_ms <= m.store_timestamp <= end_ms]
                    out += inside
                    taken += len(inside)
                    if msgs and msgs[-1].store_timestamp > end_ms:
                        break  # past the end of the range
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num]

    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """A message by id: the broker's offset id (decoded to host, port and CommitLog offset), or the
        client id (UNIQ_KEY) looked up in the index of ``topic``."""
        try:
            host, port, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            host, port, offset = "", 0, 0
        if host and 0 < port < 65536:  # a client id (UNIQ_KEY) has the same length but no port there
            try:
                resp = await self._call(f"{host}:{port}", RC.VIEW_MESSAGE_BY_ID, bh.ViewMessageRequestHeader(offset=offset))
                msgs = decode_messages(resp.body_bytes())
                if msgs and msgs[0].offset_msg_id == msg_id:
                    return msgs[0]
            except RemotingError:
                if not topic:
                    raise
        if topic:
            found = [m for m in await self.query_messages_by_key(topic, msg_id, 32)
                     if m.properties.get("UNIQ_KEY") == msg_id]
            if found:
                return found[0]
        raise AdminError(ResponseCode.QUERY_NOT_FOUND, f"no message with id {msg_id}"
                         + ("" if topic else " (pass topic= to look a client id up in the index)"))

    # scheduled messages -----------------------------------------------------------------------
    async def schedule_stats(self) -> dict[str, dict]:
        """Per master broker: scheduled messages (delay levels + timer) pending per real topic with their
        deliver-time histogram, enqueue/delivery rates and lateness (GET_TIMER_METRICS)."""
        return {name: fastjson.loads((await self._call(addr, RC.GET_TIMER_METRICS)).body_bytes())
                for name, addr in sorted((await self.master_addrs()).items())}

    async def scheduled_messages(self, topic: str, key: str, max_num: int = 32) -> list[MessageExt]:
        """Scheduled messages of ``topic`` whose key or client id (UNIQ_KEY) is ``key``, as parked on the
        brokers: timer messages in rmq_sys_wheel_timer (their due time in TIMER_OUT_MS), delay-level ones in
        SCHEDULE_TOPIC_XXXX (DELAY). A parked copy stays after its delivery or cancel: the copy delivered
        is found in ``topic`` itself (query_messages_by_key)."""
        out: list[MessageExt] = []
        for name, addr in sorted((await self.master_addrs()).items()):
            for parked in (nm.TIMER_TOPIC, nm.SCHEDULE_TOPIC):
                out += [m for m in await self._query_index(name, addr, parked, key, max_num)
                        if m.properties.get("REAL_TOPIC") == topic]
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num]

    async def cancel_scheduled(self, topic: str, uniq_key: str, deliver_ms: int | None = None,
                               group: str = "TOOLS_CANCEL_GROUP") -> str:
        """Cancel a timer message before it is due (RocketMQ 5's TIMER_DEL_UNIQKEY): the broker holding it parks
        a delete marker in its slot. ``deliver_ms`` is optional (the broker looks it up). Returns the broker
        name; AdminError QUERY_NOT_FOUND (22) when no broker has it pending (unknown, delivered, cancelled)."""


        props = {"TIMER_DEL_UNIQKEY": f"{topic}+{uniq_key}", "UNIQ_KEY": os.urandom(16).hex().upper()}
        if deliver_ms is not None:
            props["TIMER_DELIVER_MS"] = str(deliver_ms)
        last: AdminError | None = None
        for name, addr, _ in await self._masters_of(topic):
            try:
                await self._send(addr, group, topic, props, b"cancel")
                return name
            except AdminError as e:
                if e.code != ResponseCode.QUERY_NOT_FOUND:
                    raise
                last = e
        raise last or AdminError(ResponseCode.QUERY_NOT_FOUND, f"topic {topic} has no broker")

    # rewind -------------------------------------------------------------------------------------
    async def rewind(self, group: str, timestamp_ms: int, topic: str | None = None) -> RewindResult:
        """Reset ``group``'s offsets to the first message stored at or after ``timestamp_ms`` (``-1``: the
        latest, ``0``: the earliest) on every master, for one topic or all the group consumes. Live
        consumers are told at once (RESET_CONSUMER_CLIENT_OFFSET) and replay without a restart."""
        result = RewindResult()
        for name, addr in sorted((await self.master_addrs()).items()):
            resp = await self._call(addr, RC.INVOKE_BROKER_TO_RESET_OFFSET, bh.ResetOffsetRequestHeader(
                topic=topic or "", group=group, timestamp=timestamp_ms, is_force=True),
                ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.TOPIC_NOT_EXIST))
            if resp.code != ResponseCode.SUCCESS:
                result.refused[name] = resp.remark or str(resp.code)
                continue
            for e in fastjson.loads(resp.body_bytes()).get("offsetTable") or []:
                result.offsets[MessageQueue(e["topic"], e["brokerName"], int(e["queueId"]))] = int(e["offset"])
            if resp.remark:
                result.notes.append(f"{name}: {resp.remark}")
        if not result.offsets:
            reasons = "; ".join(f"{n}: {r}" for n, r in result.refused.items()) or "no broker answered"
            raise AdminError(ResponseCode.CONSUMER_NOT_ONLINE, f"nothing to rewind for group {group}: {reasons}")
        return result

    async def message_at(self, mq: MessageQueue, offset: int) -> MessageExt | None:
        """The message at a queue offset (mqadmin queryMsgByOffset, printMsg): its ConsumeQueue entry
        (QUERY_CONSUME_QUEUE), then the record (VIEW_MESSAGE_BY_ID); None past the end or removed by retention."""
        addr = await self._broker_of(mq)
        resp = await self._call(addr, RC.QUERY_CONSUME_QUEUE, bh.QueryConsumeQueueRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, index=offset, count=1),
            ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if resp.code != ResponseCode.SUCCESS:  # no such queue
            return None
        rows = fastjson.loads(resp.body_bytes()).get("queueData") or []
        if not rows:
            return None
        view = await self._call(addr, RC.VIEW_MESSAGE_BY_ID, bh.ViewMessageRequestHeader(offset=int(rows[0]["physicOffset"])),
                                ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        msgs = decode_messages(view.body_bytes(), mq.broker_name) if view.code == ResponseCode.SUCCESS else []
        return msgs[0] if msgs else None

    # dead letters -------------------------------------------------------------------------------
    async def dead_letters(self, group: str, max_num: int = 1000) -> list[MessageExt]:
        """The messages in ``%DLQ%<group>`` on every master, oldest first. The dead-letter queue is not
        readable by subscription; this walks it with QUERY_CONSUME_QUEUE and VIEW_MESSAGE_BY_ID."""
        topic = nm.dlq_topic(group)
        out: list[MessageExt] = []
        for name, addr in sorted((await self.master_addrs()).items()):
            index = 0
            while len(out) < max_num:
                msgs, nxt = await self._queue_messages(name, addr, topic, 0, index, 64, group)
                if nxt == index:
                    break  # the end, or this broker has no dead letters for the group
                out += msgs
                index = nxt
        return out[:max_num]

    async def resend_dead_letters(self, group: str, ids: list[str] | None = None,
                                  progress: Callable[[], None] | None = None) -> list[tuple[str, str]]:
        """Send dead letters of ``group`` back to their original topic: the ones whose client id (UNIQ_KEY)
        or offset id is in ``ids``, or all of them when ``ids`` is None. Returns (id, new offset id) pairs.
        An id that is not a dead letter of the group raises AdminError before anything is sent."""


        letters = await self.dead_letters(group)
        by_id: dict[str, MessageExt] = {}
        for m in letters:
            by_id.setdefault(m.properties.get("UNIQ_KEY") or m.offset_msg_id, m)
            by_id.setdefault(m.offset_msg_id, m)
        if ids is None:
            chosen = list({id(m): m for m in letters}.values())
        else:
            missing = [i for i in ids if i not in by_id]
            if missing:
                raise AdminError(ResponseCode.QUERY_NOT_FOUND,
                                 f"not dead letters of group {group}: {', '.join(missing)}; nothing was re-sent")
            chosen = list({id(by_id[i]): by_id[i] for i in ids}.values())
        sent: list[tuple[str, str]] = []
        for m in chosen:
            props = dict(m.properties)
            target = props.get("DLQ_ORIGIN_TOPIC") or props.get("RETRY_TOPIC")
            if not target:
                raise AdminError(ResponseCode.MESSAGE_ILLEGAL, f"dead letter {m.offset_msg_id} has no original topic")
            for key in ("DELAY", "REAL_TOPIC", "REAL_QID", "WAIT", "MAX_OFFSET", "MIN_OFFSET"):
                props.pop(key, None)
            masters = await self._masters_of(target)
            if not masters:
                raise AdminError(ResponseCode.TOPIC_NOT_EXIST, f"original topic {target} has no route")
            _, addr, nq = masters[0]
            resp = await self._send(addr, "TOOLS_DLQ_RESEND", target, props, m.body,  # m.body is inflated
                                    queue_id=m.queue_id % nq, queue_nums=nq, flag=m.flag)
            sent.append((props.get("UNIQ_KEY") or m.offset_msg_id, bh.SendMessageResponseHeader.parse(resp.ext_fields).msg_id))
            if progress is not None:
                progress()
        return sent

    # who consumed a message ---------------------------------------------------------------------
    async def consumed_by(self, msg: MessageExt) -> dict[str, bool]:
        """For each group that consumes the message's topic: has it consumed the message (its committed
        offset on the message's queue is past the message's queue offset)?"""
        out: dict[str, bool] = {}
        for name, addr, _ in await self._masters_of(msg.topic):
            if msg.broker_name and name != msg.broker_name:
                continue
            resp = await self._call(addr, RC.QUERY_TOPIC_CONSUME_BY_WHO, bh.TopicRequestHeader(topic=msg.topic))
            for group in fastjson.loads(resp.body_bytes()).get("groupList") or []:
                r = await self._call(addr, RC.QUERY_CONSUMER_OFFSET, bh.QueryConsumerOffsetRequestHeader(
                    consumer_group=group, topic=msg.topic, queue_id=msg.queue_id),
                    ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
                offset = _offset(r) if r.code == ResponseCode.SUCCESS else -1
                out[group] = offset > msg.queue_offset
        return out


@dataclass
class RewindResult:
    offsets: dict[MessageQueue, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. "starts at its earliest retained message"
    refused: dict[str, str] = field(default_factory=dict)  # broker name -> remark
