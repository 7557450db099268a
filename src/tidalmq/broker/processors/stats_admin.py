"""The operator's statistics requests (RocketMQ's AdminBrokerProcessor): VIEW_BROKER_STATS_DATA (315),
GET_CONSUME_STATS (208), GET_BROKE_CONSUME_STATS (317), GET_TOPIC_STATS_INFO (202), and
GET_CONSUMER_RUNNING_INFO (307) passed on to the consumer that is asked about.

Bodies are RocketMQ's JSON: BrokerStatsData (``statsMinute``/``statsHour``/``statsDay``, each ``sum``,
``tps``, ``avgpt``), ConsumeStats (``consumeTps``, ``offsetTable`` keyed by MessageQueue objects, as
fastjson writes them), ConsumeStatsList (``brokerAddr``, ``consumeStatsList``, ``totalDiff``),
TopicStatsTable (``offsetTable`` of TopicOffset, ``topicPutTps``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tidalmq.broker.stats import StatsSnapshot
from tidalmq.common import fastjson
from tidalmq.common.mqversion import version_desc, version_ordinal
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.transport import Connection, RemotingError, RemotingTimeout

if TYPE_CHECKING:
    from tidalmq.broker.client.consumer_manager import ConsumerManager
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.stats import BrokerStats
    from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.api import MessageStore

CALL_CONSUMER_TIMEOUT_S = 5.0  # RocketMQ's Broker2Client.callClient waits 5 s


def _item(ss: StatsSnapshot) -> dict[str, Any]:
    return {"avgpt": ss.avgpt, "sum": ss.sum, "tps": ss.tps}


class StatsAdminProcessor:
    def __init__(self, *, config: BrokerConfig, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 consumers: ConsumerManager, offsets: ConsumerOffsetManager, store: MessageStore,
                 stats: BrokerStats) -> None:
        self.config, self.topics, self.groups, self.consumers, self.offsets = config, topics, groups, consumers, offsets
        self.store, self.stats = store, stats

    def _mq(self, topic: str, queue_id: int) -> fastjson.RawKey:
        return fastjson.object_key({"brokerName": self.config.broker_name, "queueId": queue_id, "topic": topic})

    def view_broker_stats_data(self, conn: Connection, req: RemotingCommand,
                               h: bh.ViewBrokerStatsDataRequestHeader) -> RemotingCommand:
        name, key = h.stats_name, h.stats_key
        item = self.stats.item(name, key)
        if item is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        body = {"statsDay": _item(item.in_day()), "statsHour": _item(item.in_hour()),
                "statsMinute": _item(item.in_minute())}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(body))

    def _subscribed(self, group: str, topic: str) -> bool:
        """RocketMQ skips a topic the group's online consumers do not subscribe to (none online: kept)."""
        info = self.consumers.groups.get(group)
        return info is None or not info.subscriptions or topic in info.subscriptions

    def _consume_stats(self, group: str, topic: str, queue_nums: int, pull_offset: bool) -> tuple[dict[str, Any], int]:
        """One topic's ConsumeStats for a group, and its total diff."""
        store = self.store
        table: dict[fastjson.RawKey, dict[str, int]] = {}
        diff = 0
        for qid in range(queue_nums):
            broker_offset = max(0, store.get_max_offset_in_queue(topic, qid))
            consumer_offset = max(0, self.offsets.query(group, topic, qid))
            wrapper = {"brokerOffset": broker_offset, "consumerOffset": consumer_offset, "lastTimestamp": 0}
            if pull_offset:
                wrapper["pullOffset"] = consumer_offset
            if consumer_offset - 1 >= 0:
                ts = store.get_message_store_timestamp(topic, qid, consumer_offset - 1)
                if ts > 0:
                    wrapper["lastTimestamp"] = ts
            table[self._mq(topic, qid)] = dict(sorted(wrapper.items()))
            diff += broker_offset - consumer_offset
        return {"consumeTps": self.stats.tps_group_get(group, topic), "offsetTable": table}, diff

    def get_consume_stats(self, conn: Connection, req: RemotingCommand,
                          h: bh.GetConsumeStatsRequestHeader) -> RemotingCommand:
        """GET_CONSUME_STATS: the group's offsets on this broker, per queue of the topic asked (or of every
        topic it has offsets for), with the minute's consume TPS and each queue's last consumed store time."""
        group, topic = h.consumer_group, h.topic
        # the topic asked, else those it has offsets for; with consumers online, only what they subscribe to
        topics = [t for t in ([topic] if topic else sorted(self.offsets.topics_of_group(group)))
                  if self._subscribed(group, t)]
        tps = 0.0
        table: dict[fastjson.RawKey, dict[str, int]] = {}
        for t in topics:
            tc = self.topics.get(t)
            if tc is None:
                continue
            stats, _ = self._consume_stats(group, t, tc.read_queue_nums, pull_offset=True)
            table.update(stats["offsetTable"])
            tps += stats["consumeTps"]
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"consumeTps": tps, "offsetTable": table}))

    def get_broke_consume_stats(self, conn: Connection, req: RemotingCommand,
                                h: bh.GetConsumeStatsInBrokerHeader) -> RemotingCommand:
        """GET_BROKE_CONSUME_STATS: every subscription group's ConsumeStats per topic it has offsets for
        (``isOrder``: order topics only), over the write queues, and the broker's total diff."""
        only_order = h.is_order
        out: list[dict[str, list[dict[str, Any]]]] = []
        total = 0
        for group in list(self.groups.table):
            per_topic = []
            for topic in sorted(self.offsets.topics_of_group(group)):
                tc = self.topics.get(topic)
                if tc is None or (only_order and not tc.order) or not self._subscribed(group, topic):
                    continue
                stats, diff = self._consume_stats(group, topic, tc.write_queue_nums, pull_offset=False)
                per_topic.append(stats)
                total += diff
            out.append({group: per_topic})
        body = {"brokerAddr": self.config.broker_addr, "consumeStatsList": out, "totalDiff": total}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(body))

    def get_topic_stats_info(self, conn: Connection, req: RemotingCommand, h: bh.TopicRequestHeader) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO: each queue's min and max offsets and the store time of its last message."""
        topic = h.topic
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.store
        table = {}
        for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            lo = max(0, store.get_min_offset_in_queue(topic, qid))
            hi = max(0, store.get_max_offset_in_queue(topic, qid))
            last = store.get_message_store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
            table[self._mq(topic, qid)] = {"lastUpdateTimestamp": last, "maxOffset": hi, "minOffset": lo}
        body = {"offsetTable": table, "topicPutTps": self.stats.tps_topic_put(topic)}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(body))

    def get_consumer_running_info(self, conn: Connection, req: RemotingCommand, h: bh.GetConsumerRunningInfoRequestHeader,
                                  ) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        """GET_CONSUMER_RUNNING_INFO: asked of the consumer itself (RocketMQ's callConsumer), its answer
        returned as it is."""
        group, client_id = h.consumer_group, h.client_id
        info = self.consumers.groups.get(group)
        found = [(c, ch) for c, ch in (info.channels.items() if info is not None else ()) if ch.client_id == client_id]
        if not found:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        target, channel = found[0]
        if channel.version < version_ordinal("V3_1_8_SNAPSHOT"):
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{client_id}> Version "
                                     f"<{version_desc(channel.version)}> too low to finish, please upgrade it to V3_1_8_SNAPSHOT")

        async def call() -> RemotingCommand:
            ask = RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields=h.to_ext(),
                                  body=req.body_bytes() or None)
            try:
                answer = await target.invoke(ask, CALL_CONSUMER_TIMEOUT_S)
            except RemotingTimeout as e:
                return req.make_response(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {e}")
            except (RemotingError, OSError) as e:
                return req.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"invoke consumer <{group}> <{client_id}> Exception: {e}")
            return req.make_response(answer.code, answer.remark, body=answer.body_bytes())

        return asyncio.ensure_future(call())
