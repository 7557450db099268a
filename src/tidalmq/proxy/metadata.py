"""What the endpoint reads of topics and groups from the brokers, cached (RocketMQ's proxy
ClusterMetadataService): a topic's message.type, whether a group is a FIFO one."""

from __future__ import annotations

import logging
import time
from typing import Any

from tidalmq.client.instance import ClientInstance
from tidalmq.common import fastjson
from tidalmq.common.attribute.topic_message_type import TopicMessageType, topic_message_type
from tidalmq.remoting.codes import RequestCode
from tidalmq.remoting.protocol.broker_headers import TopicRequestHeader

log = logging.getLogger(__name__)

# How long a group's FIFO flag (consumeMessageOrderly) is trusted before it is read from a broker again.
GROUP_CONFIG_TTL_S = 30.0
# How long a topic's message.type is trusted (RocketMQ proxy's topicConfigCacheRefreshSeconds).
TOPIC_CONFIG_TTL_S = 20.0
TOPIC_TYPES_MAX = 4096  # topics whose message.type the endpoint remembers (cleared when full)


class ProxyMetadata:
    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance
        self._fifo_groups: dict[str, tuple[bool, float]] = {}  # group -> (consumeMessageOrderly, read at)
        self._topic_types: dict[str, tuple[TopicMessageType, float]] = {}  # topic -> (message.type, read at)

    async def topic_type(self, topic: str, queue_datas: list[dict[str, Any]]) -> TopicMessageType:
        """The topic's message.type, as RocketMQ's proxy reads it (GET_TOPIC_CONFIG from one broker of
        the route; cached TOPIC_CONFIG_TTL_S). UNSPECIFIED when no broker answers with the topic's config
        (RocketMQ's answer too; not cached)."""
        cached = self.cached_topic_type(topic)
        if cached is not None:
            return cached
        instance = self.instance
        for qd in queue_datas:
            addr = instance.master_addr(qd["brokerName"])
            if addr is None:
                continue
            try:
                resp = await instance.invoke_ok(addr, RequestCode.GET_TOPIC_CONFIG, TopicRequestHeader(topic=topic))
                config = fastjson.loads(resp.body_bytes()).get("topicConfig") or {}
            except Exception as e:
                log.warning("the config of topic %s could not be read from %s: %s", topic, qd["brokerName"], e)
                continue
            kind = topic_message_type(config.get("attributes"))
            if len(self._topic_types) >= TOPIC_TYPES_MAX:  # a client naming ever new topics gains nothing
                self._topic_types.clear()
            self._topic_types[topic] = (kind, time.monotonic())
            return kind
        return TopicMessageType.UNSPECIFIED

    def cached_topic_type(self, topic: str) -> TopicMessageType | None:
        cached = self._topic_types.get(topic)
        return cached[0] if cached is not None and time.monotonic() - cached[1] < TOPIC_CONFIG_TTL_S else None

    async def routed_topic_type(self, topic: str) -> TopicMessageType | None:
        """The topic's message.type read through its route; None when the NameServer routes no queue."""
        kind = self.cached_topic_type(topic)
        if kind is not None:
            return kind
        route = await self.instance.update_route(topic)
        if route is None or not route.queue_datas:
            return None
        return await self.topic_type(topic, route.queue_datas)

    async def is_lite_topic(self, topic: str) -> bool:
        """Whether ``topic``'s ``message.type`` is LITE (unknown or unreadable: False)."""
        kind = self.cached_topic_type(topic)
        if kind is None:
            route = await self.instance.update_route(topic)
            kind = await self.topic_type(topic, route.queue_datas if route is not None else [])
        return kind == TopicMessageType.LITE

    async def is_fifo(self, group: str) -> bool:
        """Whether ``group`` is a FIFO group (its consumeMessageOrderly, as RocketMQ's proxy reads it from
        the group's config on the brokers; cached GROUP_CONFIG_TTL_S). A group no broker knows is not."""
        cached = self._fifo_groups.get(group)
        now = time.monotonic()
        if cached is not None and now - cached[1] < GROUP_CONFIG_TTL_S:
            return cached[0]
        instance = self.instance
        fifo = False
        for name in list(instance.broker_addrs):
            addr = instance.master_addr(name)
            if addr is None:
                continue
            try:
                resp = await instance.invoke_ok(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                table = fastjson.loads(resp.body_bytes()).get("subscriptionGroupTable") or {}
            except Exception as e:
                log.warning("the subscription groups of %s could not be read: %s", name, e)
                continue
            if bool((table.get(group) or {}).get("consumeMessageOrderly", False)):
                fifo = True
                break
        self._fifo_groups[group] = (fifo, now)
        return fifo
