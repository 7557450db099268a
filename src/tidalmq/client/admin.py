"""Admin: the operator's requests against a NameServer and its Brokers (used by ``tidalmq admin``):
cluster and routes, topics, subscription groups, consumer offsets, progress and lag, messages by key or id."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from tidalmq.acl.signature import RequestSigner, SessionCredentials
from tidalmq.client import admin_messages as _messages
from tidalmq.client.admin_data import (
    AdminError,
    ConsumeStats,
    OffsetWrapper,
    QueueProgress,
    QueueStatus,
    RewindResult,
    mq_key,
    offset_of,
)
from tidalmq.client.errors import MQBrokerError
from tidalmq.client.message import MessageExt, MessageQueue
from tidalmq.client.reschedule import RescheduleResult, deliver_time
from tidalmq.client.reschedule import reschedule as _reschedule
from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common import top_addressing as ta
from tidalmq.common.message import encode_properties
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
                mn = offset_of(await self._call(addr, RC.GET_MIN_OFFSET, ext))
                mx = offset_of(await self._call(addr, RC.GET_MAX_OFFSET, ext))
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
                    mx = offset_of(await self._call(addr, RC.GET_MAX_OFFSET, bh.TopicQueueRequestHeader(topic=t, queue_id=q)))
                    resp = await self._call(addr, RC.QUERY_CONSUMER_OFFSET, bh.QueryConsumerOffsetRequestHeader(
                                                consumer_group=group, topic=t, queue_id=q),
                                            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
                    co = offset_of(resp) if resp.code == ResponseCode.SUCCESS else -1
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
                out.queues.append(OffsetWrapper(*mq_key(key), int(w.get("brokerOffset", 0)), consumed,
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
                _, broker, qid = mq_key(key)
                out.append((QueueStatus(broker, qid, int(o.get("minOffset", 0)), int(o.get("maxOffset", 0))),
                            int(o.get("lastUpdateTimestamp", 0))))
        return sorted(out, key=lambda q: (q[0].broker_name, q[0].queue_id))

    async def consumer_running_info(self, group: str, client_id: str) -> dict:
        """GET_CONSUMER_RUNNING_INFO, asked of the consumer through a master that has it online."""
        return await self.running_info(group, client_id)

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
        return offset_of(resp) if resp.code == ResponseCode.SUCCESS else -1

    async def update_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """Set the group's committed offset of one queue (consumers that are online may overwrite it)."""
        addr = await self._broker_of(mq)
        await self._call(addr, RC.UPDATE_CONSUMER_OFFSET, bh.UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset))

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        addr = await self._broker_of(mq)
        resp = await self._call(addr, RC.SEARCH_OFFSET_BY_TIMESTAMP,
                                bh.SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms))
        return offset_of(resp)

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


    # message tools (client/admin_messages.py) -------------------------------------------------
    async def query_messages_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                                    end_ms: int | None = None, progress: Callable[[], None] | None = None) -> list[MessageExt]:
        return await _messages.query_messages_by_key(self, topic, key, max_num, begin_ms, end_ms, progress)

    async def messages_by_time(self, topic: str, begin_ms: int, end_ms: int, max_num: int = 64) -> list[MessageExt]:
        return await _messages.messages_by_time(self, topic, begin_ms, end_ms, max_num)

    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        return await _messages.view_message(self, msg_id, topic)

    async def schedule_stats(self) -> dict[str, dict]:
        return await _messages.schedule_stats(self)

    async def scheduled_messages(self, topic: str, key: str, max_num: int = 32) -> list[MessageExt]:
        return await _messages.scheduled_messages(self, topic, key, max_num)

    async def cancel_scheduled(self, topic: str, uniq_key: str, deliver_ms: int | None = None,
                               group: str = "TOOLS_CANCEL_GROUP") -> str:
        return await _messages.cancel_scheduled(self, topic, uniq_key, deliver_ms, group)

    async def reschedule(self, topic: str, msg_id: str | None = None, *, key: str | None = None,
                         deliver_time_ms: int | None = None, delay_ms: int | None = None,
                         group: str = "TOOLS_RESCHEDULE_GROUP") -> RescheduleResult:
        """``Producer.reschedule`` for tools (mqadmin rescheduleMsg); AdminError when refused."""
        async def invoke(addr: str, cmd: RemotingCommand) -> RemotingCommand:
            if self.signer is not None:
                self.signer.sign(cmd.ext_fields, None)
            return await self.remoting.invoke(addr, cmd, self.timeout)

        when = deliver_time(deliver_time_ms, delay_ms)
        masters = [(name, addr) for name, addr, _ in await self._masters_of(topic)]
        try:
            return await _reschedule(invoke, masters, topic, msg_id, key, when, group)
        except MQBrokerError as e:
            raise AdminError(e.code, e.remark) from None

    async def rewind(self, group: str, timestamp_ms: int, topic: str | None = None) -> RewindResult:
        return await _messages.rewind(self, group, timestamp_ms, topic)

    async def message_at(self, mq: MessageQueue, offset: int) -> MessageExt | None:
        return await _messages.message_at(self, mq, offset)

    async def dead_letters(self, group: str, max_num: int = 1000) -> list[MessageExt]:
        return await _messages.dead_letters(self, group, max_num)

    async def resend_dead_letters(self, group: str, ids: list[str] | None = None,
                                  progress: Callable[[], None] | None = None) -> list[tuple[str, str]]:
        return await _messages.resend_dead_letters(self, group, ids, progress)

    async def consumed_by(self, msg: MessageExt) -> dict[str, bool]:
        return await _messages.consumed_by(self, msg)

    # mqadmin's consumerStatus ------------------------------------------------------------------
    async def consumer_connections_on(self, addr: str, group: str) -> list[dict]:
        """The group's online consumers on one broker (mqadmin's ``-b``); AdminError CONSUMER_NOT_ONLINE
        when it has none, as RocketMQ's examineConsumerConnectionInfo."""
        resp = await self._call(addr, RC.GET_CONSUMER_CONNECTION_LIST,
                                bh.GetConsumerConnectionListRequestHeader(consumer_group=group))
        return list(fastjson.loads(resp.body_bytes()).get("connectionSet", []))

    async def running_info(self, group: str, client_id: str, *, jstack: bool = False) -> dict:
        """GET_CONSUMER_RUNNING_INFO with ``jstackEnable`` as asked (the consumer then adds its threads'
        stacks), through each master in turn until one has the consumer online."""
        last: AdminError | None = None
        for addr in (await self.master_addrs()).values():
            try:
                resp = await self._call(addr, RC.GET_CONSUMER_RUNNING_INFO, bh.GetConsumerRunningInfoRequestHeader(
                    consumer_group=group, client_id=client_id, jstack_enable=jstack))
                return fastjson.loads(resp.body_bytes())
            except AdminError as e:
                last = e
        raise last or AdminError(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer {client_id} is not online")
