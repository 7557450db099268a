"""SlaveSynchronize: the slave copies the master's metadata over remoting (RocketMQ's SlaveSynchronize):
topic configs, consumer offsets, delay-level offsets and subscription groups, with the admin request
codes RocketMQ uses, at start and every SYNC_INTERVAL_S. The master's messageDelayLevel comes with its
delay offsets (TidalMQ's addition to that body) and is adopted live."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidalmq.broker.subscription.subscription_group import SubscriptionGroupConfig
from tidalmq.broker.topic.topic_config import TopicConfig
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingError

if TYPE_CHECKING:
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.out.broker_outer_api import BrokerOuterAPI
    from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.schedule.delay_level import ScheduleMessageService

log = logging.getLogger(__name__)

SYNC_INTERVAL_S = 10.0
REQUEST_TIMEOUT_S = 5.0


class SlaveSynchronize:
    def __init__(self, outer_api: BrokerOuterAPI, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 schedule: ScheduleMessageService, groups: SubscriptionGroupManager,
                 adopt_delay_levels: Callable[[str], object] | None = None) -> None:
        self.outer_api = outer_api
        self.topics = topics
        self.offsets = offsets
        self.schedule = schedule
        self.groups = groups
        self.adopt_delay_levels = adopt_delay_levels  # the master's messageDelayLevel, taken live
        self.master_addr = ""
        self._master_known = asyncio.Event()
        self.rounds = 0  # completed syncAll rounds (runtime info)

    def update_master_addr(self, addr: str) -> None:
        if addr and addr != self.master_addr:
            self.master_addr = addr
            self._master_known.set()

    async def run(self) -> None:
        while True:
            if not self.master_addr:
                self._master_known.clear()
                await self._master_known.wait()
            await self.sync_all()
            await asyncio.sleep(SYNC_INTERVAL_S)

    async def sync_all(self) -> bool:
        """One round; each part is tried even when another fails. True when all succeeded."""
        ok = True
        for part in (self._sync_topic_config, self._sync_consumer_offset, self._sync_delay_offset,
                     self._sync_subscription_group_config):
            try:
                await part()
            except (RemotingError, TimeoutError, ValueError, KeyError, TypeError, OSError) as e:
                log.warning("slave sync from %s: %s failed: %s", self.master_addr, part.__name__, e)
                ok = False
        if ok:
            self.rounds += 1
        return ok

    async def _fetch(self, code: int) -> dict[str, Any]:
        # ACL on the master: these are admin requests, signed with the broker's own account
        resp = await self.outer_api.invoke_as_broker(self.master_addr, RemotingCommand(code=code), REQUEST_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(resp.code, f"request {code} refused: {resp.remark}")
        body = fastjson.loads(resp.body_bytes())
        if not isinstance(body, dict):
            raise ValueError(f"request {code}: body is not an object")
        return body

    async def _sync_topic_config(self) -> None:
        body = await self._fetch(RequestCode.GET_ALL_TOPIC_CONFIG)
        topics = self.topics
        version = body.get("dataVersion") or {}
        mine = topics.data_version
        if int(version.get("counter", -1)) == mine.counter and int(version.get("timestamp", -1)) == mine.timestamp:
            return
        table = {name: TopicConfig.from_json(d) for name, d in (body.get("topicConfigTable") or {}).items()}
        topics.table = table  # one reference swap: readers see the old table or the new one
        mine.counter = int(version.get("counter", 0))
        mine.timestamp = int(version.get("timestamp", 0))
        await asyncio.to_thread(topics.persist)
        log.info("slave sync: %d topic configs from %s", len(table), self.master_addr)

    async def _sync_consumer_offset(self) -> None:
        body = await self._fetch(RequestCode.GET_ALL_CONSUMER_OFFSET)
        offsets = self.offsets
        for key, queues in (body.get("offsetTable") or {}).items():
            for qid, off in queues.items():
                topic, _, group = str(key).rpartition("@")
                offsets.commit(group, topic, int(qid), int(off))
        await asyncio.to_thread(offsets.persist)

    async def _sync_delay_offset(self) -> None:
        body = await self._fetch(RequestCode.GET_ALL_DELAY_OFFSET)
        schedule = self.schedule
        schedule.offsets.update({int(level): int(off) for level, off in (body.get("offsetTable") or {}).items()})
        await asyncio.to_thread(schedule.persist)
        levels = body.get("messageDelayLevel")
        if isinstance(levels, str) and self.adopt_delay_levels is not None:
            self.adopt_delay_levels(levels)

    async def _sync_subscription_group_config(self) -> None:
        body = await self._fetch(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        groups = self.groups
        table = {name: SubscriptionGroupConfig.from_json(d)
                 for name, d in (body.get("subscriptionGroupTable") or {}).items()}
        groups.table = table
        await asyncio.to_thread(groups.persist)
