"""Client-facing requests besides send and pull: heartbeat, membership, offsets (ClientManageProcessor,
ConsumerManageProcessor, QueryMessageProcessor and the offset queries of AdminBrokerProcessor)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tidalmq.broker.client.consumer_manager import ClientChannelInfo, SubscriptionData
from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol.header import NoHeader
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    from tidalmq.broker.client.consumer_manager import ConsumerManager
    from tidalmq.broker.client.rebalance_lock import RebalanceLockManager
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.processors.collaborators import Filters, Registration
    from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.api import MessageStore


def _offset(offset: int) -> dict[str, str]:
    return bh.OffsetResponseHeader(offset=offset).to_ext()


class ClientProcessor:
    def __init__(self, *, config: BrokerConfig, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 consumers: ConsumerManager, producers: dict[str, dict[Connection, ClientChannelInfo]],
                 locks: RebalanceLockManager, offsets: ConsumerOffsetManager, store: MessageStore,
                 filters: Filters, registration: Registration) -> None:
        self.config, self.topics, self.groups, self.consumers, self.producers = config, topics, groups, consumers, producers
        self.locks, self.offsets, self.store, self.filters, self.registration = locks, offsets, store, filters, registration

    # membership -------------------------------------------------------------------------------
    def heartbeat(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        try:
            data = fastjson.loads(req.body_bytes() or b"{}")
        except ValueError as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"heartbeat body is not JSON: {e}")
        client_id = data.get("clientID", "")
        conn.attributes["client_id"] = client_id
        for consumer in data.get("consumerDataSet") or []:
            group = consumer.get("groupName")
            if not group:
                continue
            sg = self.groups.find(group)
            if sg is not None and sg.retry_queue_nums > 0 and self.topics.get(nm.retry_topic(group)) is None:
                self.topics.create_system_like(nm.retry_topic(group), sg.retry_queue_nums, 6)
                self.registration.register_soon()
            self.consumers.register(group, client_id, conn, req.language, req.version, consumer)
        for producer in data.get("producerDataSet") or []:
            group = producer.get("groupName")
            if group:
                self.producers.setdefault(group, {})[conn] = ClientChannelInfo(
                    client_id, req.language, req.version, int(time.time() * 1000), conn)
        return req.make_response(ResponseCode.SUCCESS)

    def check_client_config(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (ClientManageProcessor.checkClientConfig): a consumer starting with a
        SQL92 subscription asks whether this broker can serve it; the remark of a refusal says where
        the expression is wrong and why."""
        try:
            data = fastjson.loads(req.body_bytes() or b"{}")
        except ValueError as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"check client body is not JSON: {e}")
        sd = data.get("subscriptionData") if isinstance(data, dict) else None
        if isinstance(sd, dict):
            expression_type = sd.get("expressionType") or "TAG"
            if expression_type != "TAG":
                sub = SubscriptionData(str(sd.get("topic") or ""), str(sd.get("subString") or ""),
                                       sub_version=int(sd.get("subVersion") or 0), expression_type=expression_type)
                refused = self.filters.check_expression(sub)
                if refused is not None:
                    code = (ResponseCode.SYSTEM_ERROR if not self.config.enable_property_filter
                            else ResponseCode.SUBSCRIPTION_PARSE_FAILED)
                    return req.make_response(code, refused)
        return req.make_response(ResponseCode.SUCCESS)

    def unregister_client(self, conn: Connection, req: RemotingCommand,
                          h: bh.UnregisterClientRequestHeader) -> RemotingCommand:
        if h.consumer_group:
            self.locks.unlock_client(h.consumer_group, h.client_id)
            self.consumers.unregister(h.consumer_group, conn)
        if h.producer_group:
            self.producers.get(h.producer_group, {}).pop(conn, None)
        return req.make_response(ResponseCode.SUCCESS)

    def consumer_list(self, conn: Connection, req: RemotingCommand,
                      h: bh.GetConsumerListByGroupRequestHeader) -> RemotingCommand:
        group = h.consumer_group
        info = self.consumers.groups.get(group)
        if info is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"consumerIdList": info.client_ids()}))

    # consumer offsets -------------------------------------------------------------------------
    def query_consumer_offset(self, conn: Connection, req: RemotingCommand,
                              h: bh.QueryConsumerOffsetRequestHeader) -> RemotingCommand:
        qid, group, topic = h.queue_id, h.consumer_group, h.topic
        offset = self.offsets.query(group, topic, qid)
        if offset >= 0:
            return req.make_response(ResponseCode.SUCCESS, None, _offset(offset))
        # A group that never committed starts at 0 while the queue still holds its first message
        # (RocketMQ's rule, so a new group sees a young topic from the beginning).
        if self.store.get_min_offset_in_queue(topic, qid) <= 0:
            return req.make_response(ResponseCode.SUCCESS, None, _offset(0))
        return req.make_response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_consumer_offset(self, conn: Connection, req: RemotingCommand,
                               h: bh.UpdateConsumerOffsetRequestHeader) -> RemotingCommand:
        qid, offset, topic = h.queue_id, h.commit_offset, h.topic
        tc = self.topics.get(topic)
        if tc is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if qid < 0 or qid >= tc.read_queue_nums:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"queueId[{qid}] is illegal for topic {topic}")
        self.offsets.commit(h.consumer_group, topic, qid, offset)
        return req.make_response(ResponseCode.SUCCESS)

    # queue offsets ----------------------------------------------------------------------------
    def get_max_offset(self, conn: Connection, req: RemotingCommand, h: bh.TopicQueueRequestHeader) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, None,
                                 _offset(self.store.get_max_offset_in_queue(h.topic, h.queue_id)))

    def get_min_offset(self, conn: Connection, req: RemotingCommand, h: bh.TopicQueueRequestHeader) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, None,
                                 _offset(self.store.get_min_offset_in_queue(h.topic, h.queue_id)))

    def search_offset(self, conn: Connection, req: RemotingCommand, h: bh.SearchOffsetRequestHeader) -> RemotingCommand:
        off = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return req.make_response(ResponseCode.SUCCESS, None, _offset(off))

    def earliest_msg_storetime(self, conn: Connection, req: RemotingCommand,
                               h: bh.TopicQueueRequestHeader) -> RemotingCommand:
        ts = self.store.get_earliest_message_time(h.topic, h.queue_id)
        return req.make_response(ResponseCode.SUCCESS, None, bh.GetEarliestMsgStoretimeResponseHeader(timestamp=ts).to_ext())

    # messages ---------------------------------------------------------------------------------
    def view_message_by_id(self, conn: Connection, req: RemotingCommand,
                           h: bh.ViewMessageRequestHeader) -> RemotingCommand:
        offset = h.offset
        if offset is None:
            try:
                offset = decode_offset_msg_id(h.msg_id or "")[2]
            except ValueError as e:
                return req.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        raw = self.store.select_one_message_by_offset(offset)
        if raw is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return req.make_response(ResponseCode.SUCCESS, None, body=bytes(raw))

    def query_message(self, conn: Connection, req: RemotingCommand, h: bh.QueryMessageRequestHeader) -> RemotingCommand:
        end = h.end_timestamp
        found = self.store.query_message(h.topic, h.key, h.max_num, h.begin_timestamp, end)
        ext = bh.QueryMessageResponseHeader(index_last_update_timestamp=end,
                                            index_last_update_phyoffset=self.store.max_phy_offset).to_ext()
        if not found:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext)
        return req.make_response(ResponseCode.SUCCESS, None, ext, list(found))  # mapped-file slices, no copy
