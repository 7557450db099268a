"""PULL_MESSAGE (PullMessageProcessor) with long polling."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tidalmq.broker.client.consumer_manager import SubscriptionData
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import PullMessageRequestHeader, PullMessageResponseHeader
from tidalmq.remoting.transport import Connection
from tidalmq.store.message_store import GetStatus

if TYPE_CHECKING:
    from tidalmq.broker.client.consumer_manager import ConsumerManager
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.longpolling.pull_request_hold import PullRequestHoldService
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.processors.collaborators import Filters
    from tidalmq.broker.stats import BrokerStats
    from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.api import MessageStore

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x1 << 1
FLAG_SUBSCRIPTION = 0x1 << 2
FLAG_CLASS_FILTER = 0x1 << 3


class PullMessageProcessor:
    def __init__(self, *, config: BrokerConfig, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 consumers: ConsumerManager, offsets: ConsumerOffsetManager, store: MessageStore,
                 pull_hold: PullRequestHoldService, stats: BrokerStats, filters: Filters) -> None:
        self.config, self.topics, self.groups, self.consumers, self.offsets = config, topics, groups, consumers, offsets
        self.store, self.pull_hold, self.stats, self.filters = store, pull_hold, stats, filters

    def process(self, conn: Connection, req: RemotingCommand,
                h: PullMessageRequestHeader) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        return self._pull(conn, req, h, allow_suspend=True)

    def _pull(self, conn: Connection, req: RemotingCommand, h: PullMessageRequestHeader,
              allow_suspend: bool) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        group, topic, queue_id, offset = h.consumer_group, h.topic, h.queue_id, h.queue_offset
        max_nums, sysflag, commit_offset = h.max_msg_nums or 32, h.sys_flag, h.commit_offset
        suspend_ms, sub_version, max_bytes = h.suspend_timeout_millis, h.sub_version, h.max_msg_bytes
        if not (self.config.broker_permission & 0x4):
            return req.make_response(ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_ip1}] pulling message is forbidden")
        sg = self.groups.find(group)
        if sg is None:
            return req.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                     f"subscription group [{group}] does not exist")
        if not sg.consume_enable:
            return req.make_response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tc.readable:
            return req.make_response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return req.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{conn.addr}]",
            )
        flagged = bool(sysflag & FLAG_SUBSCRIPTION)
        sub: SubscriptionData | None
        if flagged:
            sub = SubscriptionData.build(topic, h.subscription, sub_version, h.expression_type or "TAG")
        else:
            sub = self.consumers.find_subscription(group, topic)
            if sub is None:
                return req.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                         f"the consumer's subscription not exist, group: {group} topic: {topic}")
        if sub.expression_type != "TAG":  # SQL92 (docs/filtering.md)
            if not self.config.enable_property_filter:
                return req.make_response(
                    ResponseCode.SYSTEM_ERROR,
                    f"The broker does not support consumer to filter message by {sub.expression_type}")
            checked = self.filters.check_expression(sub)
            if checked is not None:
                # The subscription came with the pull: it does not parse. From the heartbeat: the broker
                # has no usable filter data for it (RocketMQ's ConsumerFilterManager would hold none).
                code = ResponseCode.SUBSCRIPTION_PARSE_FAILED if flagged else ResponseCode.FILTER_DATA_NOT_EXIST
                return req.make_response(code, checked)
            if not flagged and sub.sub_version < sub_version:
                return req.make_response(ResponseCode.FILTER_DATA_NOT_LATEST,
                                         "the consumer's consumer filter data not latest")
        has_suspend = bool(sysflag & FLAG_SUSPEND)

        def attempt(suspend_ok: bool) -> RemotingCommand | None:
            return self._read(req, group, topic, queue_id, offset, max_nums, max_bytes, sub, suspend_ok)

        resp = attempt(allow_suspend and has_suspend)
        if sysflag & FLAG_COMMIT_OFFSET and self.config.broker_id == 0 and commit_offset >= 0:
            self.offsets.commit(group, topic, queue_id, commit_offset)
        if resp is not None:
            return resp
        # Nothing to read: hold the request (long polling) until a message arrives or time runs out,
        # for no longer than brokerSuspendMaxTimeMillis whatever the client asked, and only while the
        # broker holds fewer than maxHeldPullRequests: past it the pull is answered now, as unsuspended.
        cfg = self.config
        if self.pull_hold.held >= cfg.max_held_pull_requests:
            resp = attempt(False)
            if resp is not None and resp.code == ResponseCode.PULL_NOT_FOUND:
                resp.remark = f"{resp.remark}: {cfg.max_held_pull_requests} pulls held (maxHeldPullRequests), not held"
            return resp if resp is not None else req.make_response(ResponseCode.PULL_NOT_FOUND, "not held")
        if cfg.long_polling_enable:
            timeout_ms = max(0, min(suspend_ms, cfg.broker_suspend_max_time_millis))
        else:
            timeout_ms = cfg.short_polling_time_mills
        return self.pull_hold.hold(topic, queue_id, offset, timeout_ms / 1000.0, attempt)

    def _suggest_which_broker_id(self, group: str, pulling_far_behind: bool) -> int:
        """RocketMQ's rule: with slaveReadEnable, a pull reading far behind the CommitLog's end (past
        accessMessageInMemoryMaxRatio of memory) is sent to the group's whichBrokerWhenConsumeSlowly
        (1, the slave), any other to the group's brokerId; without it, always to the master."""
        if not self.config.slave_read_enable:
            return 0
        sg = self.groups.table.get(group)
        if sg is None:
            return 1 if pulling_far_behind else 0
        return sg.which_broker_when_consume_slowly if pulling_far_behind else sg.broker_id

    def _read(self, req: RemotingCommand, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
              max_bytes: int, sub: SubscriptionData, suspend_ok: bool) -> RemotingCommand | None:
        flt = self.filters.message_filter(sub)
        kwargs = {}
        if max_bytes > 0:
            kwargs["max_total_bytes"] = max_bytes
        res = self.store.get_message(group, topic, queue_id, offset, max_nums, tag_codes=sub.tag_codes(), filter=flt, **kwargs)
        st = res.status
        ext = PullMessageResponseHeader(
            suggest_which_broker_id=self._suggest_which_broker_id(group, res.suggest_pulling_from_slave),
            next_begin_offset=res.next_begin_offset, min_offset=res.min_offset, max_offset=res.max_offset,
        ).to_ext()
        if st == GetStatus.FOUND:
            self.stats.on_get(group, topic, res.message_count, res.buffer_total_size)
            return req.make_response(ResponseCode.SUCCESS, "FOUND", ext, list(res.buffers))
        if st in (GetStatus.MESSAGE_WAS_REMOVING, GetStatus.NO_MATCHED_MESSAGE):
            return req.make_response(ResponseCode.PULL_RETRY_IMMEDIATELY, st.name, ext)
        if st in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            if offset != 0:
                return req.make_response(ResponseCode.PULL_OFFSET_MOVED, st.name, ext)
            code = ResponseCode.PULL_NOT_FOUND
        elif st in (GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_ONE):
            code = ResponseCode.PULL_NOT_FOUND
        elif st in (GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_TOO_SMALL):
            return req.make_response(ResponseCode.PULL_OFFSET_MOVED, st.name, ext)
        else:
            return req.make_response(ResponseCode.SYSTEM_ERROR, st.name, ext)
        if suspend_ok:
            return None
        return req.make_response(code, st.name, ext)
