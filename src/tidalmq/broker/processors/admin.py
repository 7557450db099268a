"""Operator requests (AdminBrokerProcessor): topics, groups, runtime info, connections."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from tidalmq.broker.live_config import FRAME_HEADROOM, apply_live, checked_update, persist
from tidalmq.broker.schedule.delay_table import KEY as DELAY_LEVEL_KEY
from tidalmq.broker.subscription.subscription_group import SubscriptionGroupConfig
from tidalmq.broker.topic.topic_config import TopicConfig
from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.attribute.topic_message_type import (
    GROUP_ATTRIBUTES,
    MESSAGE_TYPE,
    TopicAttributeError,
    TopicMessageType,
    alter_attributes,
    parse_modification,
)
from tidalmq.common.config import ConfigError, parse_properties, to_properties
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand, language_name
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol.header import NoHeader
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tidalmq.broker.client.consumer_manager import ClientChannelInfo, ConsumerManager
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.processors.collaborators import LiveSettings, Registration
    from tidalmq.broker.schedule.delay_table import DelayLevelTable
    from tidalmq.broker.stats import BrokerStats
    from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.schedule.delay_level import ScheduleMessageService
    from tidalmq.store.api import MessageStore


class AdminProcessor:
    def __init__(self, *, settings: LiveSettings, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 consumers: ConsumerManager, producers: dict[str, dict[Connection, ClientChannelInfo]],
                 offsets: ConsumerOffsetManager, store: MessageStore, stats: BrokerStats,
                 schedule: ScheduleMessageService, registration: Registration,
                 timer_view: Callable[[], Awaitable[object] | None], delay_levels: DelayLevelTable) -> None:
        self.settings, self.config, self.store_config = settings, settings.config, settings.store_config
        self.topics, self.groups, self.consumers, self.producers = topics, groups, consumers, producers
        self.offsets, self.store, self.stats, self.schedule = offsets, store, stats, schedule
        self.registration, self.timer_view, self.delay_levels = registration, timer_view, delay_levels

    def update_and_create_topic(self, conn: Connection, req: RemotingCommand,
                                h: bh.CreateTopicRequestHeader) -> RemotingCommand | Awaitable[RemotingCommand]:
        topic = h.topic
        try:
            nm.check_topic(topic)
        except nm.NameError_ as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        if nm.is_system_topic(topic) and topic != nm.AUTO_CREATE_TOPIC_KEY_TOPIC:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        r, w, perm, sys_flag = h.read_queue_nums, h.write_queue_nums, h.perm, h.topic_sys_flag
        if r <= 0 or w <= 0 or r > 1024 or w > 1024:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"queue numbers must be within 1..1024, got read {r} write {w}")
        current = self.topics.get(topic)
        try:
            modification = parse_modification(h.attributes)
            # RocketMQ refuses MIXED before anything else, as it is asked (only "+message.type=MIXED").
            if modification.get("+" + MESSAGE_TYPE) == TopicMessageType.MIXED and not self.config.enable_mixed_message_type:
                return req.make_response(ResponseCode.INVALID_PARAMETER, "MIXED message type is not supported.")
            attributes = alter_attributes(current is None, current.attributes if current else {}, modification)
        except TopicAttributeError as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        tc = TopicConfig(topic, r, w, perm, h.topic_filter_type, sys_flag, h.order, attributes)
        self.topics.update(tc)
        return self._answer_registered(req)

    async def _answer_registered(self, req: RemotingCommand) -> RemotingCommand:
        """SUCCESS once the NameServers were told (BrokerController.registered), as RocketMQ answers."""
        await self.registration.registered()
        return req.make_response(ResponseCode.SUCCESS)

    def delete_topic(self, conn: Connection, req: RemotingCommand, h: bh.TopicRequestHeader) -> RemotingCommand:
        topic = h.topic
        if nm.is_system_topic(topic):
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is a system topic and cannot be deleted.")
        if not self.topics.delete(topic):
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        self.offsets.remove_topic(topic)
        self.stats.on_topic_deleted(topic)
        self.store.delete_topics({topic})
        self.registration.register_soon()
        return req.make_response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(self.topics.wrapper()))

    def get_topic_config(self, conn: Connection, req: RemotingCommand, h: bh.TopicRequestHeader) -> RemotingCommand:
        topic = h.topic
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"topicConfig": tc.to_json()}))

    def update_subscription_group(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        try:
            cfg = SubscriptionGroupConfig.from_json(fastjson.loads(req.body_bytes()))
            nm.check_group(cfg.group_name)
        except (ValueError, KeyError) as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"illegal subscription group: {e}")
        # The request's attributes are a modification (+key=value, -key) of the group's current ones, as
        # SubscriptionGroupManager.updateSubscriptionGroupConfig applies them; none keeps the current ones.
        current = self.groups.table.get(cfg.group_name)
        try:
            cfg.attributes = alter_attributes(current is None, current.attributes if current else {},
                                              cfg.attributes, GROUP_ATTRIBUTES)
        except TopicAttributeError as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        self.groups.update(cfg)
        return req.make_response(ResponseCode.SUCCESS)

    def get_all_subscription_groups(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        table = {n: c.to_json() for n, c in self.groups.table.items()}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"subscriptionGroupTable": table}))

    def delete_subscription_group(self, conn: Connection, req: RemotingCommand,
                                  h: bh.DeleteSubscriptionGroupRequestHeader) -> RemotingCommand:
        group = h.group_name
        if not self.groups.delete(group):
            return req.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
        self.stats.on_group_deleted(group)
        return req.make_response(ResponseCode.SUCCESS)

    def get_runtime_info(self, conn: Connection, req: RemotingCommand,
                         _: NoHeader) -> RemotingCommand | asyncio.Task[RemotingCommand]:
        def build() -> RemotingCommand:
            return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"table": self.settings.runtime_info()}))

        refresh = self.timer_view()
        if refresh is None:
            return build()

        async def fresh(refresh: Awaitable[object]) -> RemotingCommand:
            await refresh  # the schedule process's figures as of this request, not one push ago
            return build()

        return asyncio.ensure_future(fresh(refresh))

    def get_broker_config(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        props = {**to_properties(self.store_config), **to_properties(self.config)}
        text = "\n".join(f"{k}={v}" for k, v in sorted(props.items()))
        return req.make_response(ResponseCode.SUCCESS, body=text.encode("utf-8"))

    def update_broker_config(self, conn: Connection, req: RemotingCommand,
                             _: NoHeader) -> RemotingCommand | Awaitable[RemotingCommand]:
        """UPDATE_BROKER_CONFIG: body ``key=value`` lines (java.util.Properties, as RocketMQ's tools send);
        live keys only, all or none applied, then persisted to the config file (broker/live_config.py)."""
        try:
            props = parse_properties(req.body_bytes().decode("utf-8"))
            new_bc, new_sc = checked_update(self.config, self.store_config, props, self.settings.max_frame - FRAME_HEADROOM)
        except (ConfigError, UnicodeDecodeError) as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        levels = props.get(DELAY_LEVEL_KEY)
        if levels is not None:
            remark = self.delay_levels.refusal(new_sc.message_delay_level)
            if remark is not None:
                return req.make_response(ResponseCode.SYSTEM_ERROR, remark)
        apply_live(self.config, self.store_config, new_bc, new_sc, list(props))
        if levels is not None:
            self.delay_levels.apply(new_sc.message_delay_level)
        if self.settings.config_file is not None:
            try:
                persist(self.settings.config_file, props)
            except OSError as e:  # applied, but the operator must know it will not survive a restart
                return req.make_response(ResponseCode.SYSTEM_ERROR, f"applied but not persisted to {self.settings.config_file}: {e}")
        if "brokerPermission" in props:  # the NameServer's routes carry it: answered once they do, as RocketMQ
            return self._answer_registered(req)
        return req.make_response(ResponseCode.SUCCESS)

    def get_producer_connection_list(self, conn: Connection, req: RemotingCommand,
                                     h: bh.GetProducerConnectionListRequestHeader) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: the group's producers connected now (ProducerConnection)."""
        group = h.producer_group
        members = {c: ch for c, ch in self.producers.get(group, {}).items() if c.is_open}
        if not members:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [
            {"clientId": ch.client_id, "clientAddr": c.addr, "language": language_name(ch.language), "version": ch.version}
            for c, ch in members.items()
        ]}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(body))

    def clean_expired_consume_queue(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        """CLEAN_EXPIRED_CONSUMEQUEUE: the store drops the queues of topics this broker no longer has and the
        queue files wholly below the CommitLog's min offset. System, retry and dead-letter topics count as
        live: the broker creates them on demand, so their absence from the table proves nothing."""
        live = {t for t in self.store.topics_and_queues()
                if self.topics.get(t) is not None or nm.is_system_topic(t)
                or t.startswith((nm.RETRY_GROUP_TOPIC_PREFIX, nm.DLQ_GROUP_TOPIC_PREFIX))}
        self.store.clean_expired_consumer_queue(live)
        return req.make_response(ResponseCode.SUCCESS)

    def get_consumer_connection_list(self, conn: Connection, req: RemotingCommand,
                                     h: bh.GetConsumerConnectionListRequestHeader) -> RemotingCommand:
        group = h.consumer_group
        info = self.consumers.groups.get(group)
        if info is None:
            return req.make_response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [
                {"clientId": ch.client_id, "clientAddr": c.addr, "language": language_name(ch.language), "version": ch.version}
                for c, ch in info.channels.items()
            ],
            "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "consumeFromWhere": info.consume_from_where,
        }
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(body))

    def query_topic_consume_by_who(self, conn: Connection, req: RemotingCommand,
                                   h: bh.TopicRequestHeader) -> RemotingCommand:
        topic = h.topic
        groups = set(self.consumers.groups_subscribing(topic)) | self.offsets.groups_of_topic(topic)
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"groupList": sorted(groups)}))

    def query_topics_by_consumer(self, conn: Connection, req: RemotingCommand,
                                 h: bh.QueryTopicsByConsumerRequestHeader) -> RemotingCommand:
        group = h.group
        topics = set(self.offsets.topics_of_group(group))
        info = self.consumers.groups.get(group)
        if info is not None:
            topics |= set(info.subscriptions)
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"topicList": sorted(topics)}))

    def query_consume_queue(self, conn: Connection, req: RemotingCommand,
                            h: bh.QueryConsumeQueueRequestHeader) -> RemotingCommand:
        """Raw ConsumeQueue entries of a queue (QUERY_CONSUME_QUEUE): what the operator's tools use to
        walk a queue that is not readable by subscription, such as a dead-letter queue."""
        topic, qid, index, count = h.topic, h.queue_id, h.index, min(h.count, 1024)
        store = self.store
        if not store.has_queue(topic, qid):
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"{topic}, {qid} cq not found")
        rng = store.queue_range(topic, qid)
        rows = [{"physicOffset": p, "physicSize": s, "tagsCode": t}
                for p, s, t in store.read_queue(topic, qid, index, count).rows()]
        body = {"queueData": rows, "minQueueIndex": rng.min_offset, "maxQueueIndex": rng.max_offset}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(body))

    def get_all_consumer_offset(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        """ConsumerOffsetSerializeWrapper: what a slave's SlaveSynchronize copies."""
        table = {key: dict(queues) for key, queues in list(self.offsets.table.items())}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"offsetTable": table}))

    def get_all_delay_offset(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        offsets = dict(sorted(self.schedule.offsets.items()))
        # The table beside the offsets: a slave's metadata sync takes it (RocketMQ's body has the offsets only).
        body = {"offsetTable": offsets, DELAY_LEVEL_KEY: self.delay_levels.text}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(body))

    def trigger_delete_files(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        n = self.store.clean_expired_now(force=True)
        return req.make_response(ResponseCode.SUCCESS, f"deleted {n} files")
