"""CONSUMER_SEND_MSG_BACK (retry with backoff, then the dead-letter queue) and the orderly
consumption locks LOCK_BATCH_MQ / UNLOCK_BATCH_MQ."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from tidalmq.broker.message import InnerMessage
from tidalmq.broker.topic.topic_config import PERM_READ, PERM_WRITE
from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.message import encode_properties
from tidalmq.common.msgid import host_bytes
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import ConsumerSendMsgBackRequestHeader
from tidalmq.remoting.protocol.header import NoHeader
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    import asyncio

    from tidalmq.broker.client.rebalance_lock import RebalanceLockManager
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.processors.collaborators import InternalSender, Registration
    from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.api import MessageStore

DLQ_NUMS_PER_GROUP = 1


class ConsumerManageProcessor:
    def __init__(self, *, config: BrokerConfig, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 locks: RebalanceLockManager, store: MessageStore, registration: Registration,
                 sender: InternalSender) -> None:
        self.config, self.topics, self.groups, self.locks, self.store = config, topics, groups, locks, store
        self.registration, self.sender = registration, sender

    def send_msg_back(self, conn: Connection, req: RemotingCommand,
                      h: ConsumerSendMsgBackRequestHeader) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        group, offset, delay_level, header_max = h.group, h.offset, h.delay_level, h.max_reconsume_times
        sg = self.groups.find(group)
        if sg is None:
            return req.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        if not (self.config.broker_permission & PERM_WRITE):
            return req.make_response(ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_ip1}] sending message is forbidden")
        if sg.retry_queue_nums <= 0:
            return req.make_response(ResponseCode.SUCCESS)  # the group asked for no retries
        msg = self.store.look_message_by_offset(offset)
        if msg is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        props = dict(msg.properties)
        props.setdefault(mc.RETRY_TOPIC, msg.topic)
        props[mc.WAIT_STORE_MSG_OK] = "false"
        # The client's maxReconsumeTimes wins over the group's retryMaxTimes (clients send theirs).
        max_times = header_max if header_max is not None and header_max >= 0 else sg.retry_max_times
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic = nm.dlq_topic(group)
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            # Readable and writable, as RocketMQ creates it: an operator's consumer subscribes to a group's
            # %DLQ% topic to inspect or re-drive what it holds.
            self.topics.create_system_like(topic, DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE)
            props.pop(mc.DELAY, None)
            props.setdefault(mc.DLQ_ORIGIN_TOPIC, props[mc.RETRY_TOPIC])
            props.setdefault(mc.DLQ_ORIGIN_MESSAGE_ID, props.get(mc.UNIQ_KEY) or msg.msg_id)
        else:
            topic = nm.retry_topic(group)
            queue_id = random.randrange(sg.retry_queue_nums)
            self.topics.create_system_like(topic, sg.retry_queue_nums, PERM_READ | PERM_WRITE)
            props[mc.DELAY] = str(delay_level if delay_level > 0 else 3 + msg.reconsume_times)
        props.setdefault(mc.ORIGIN_MESSAGE_ID, props.get(mc.UNIQ_KEY) or msg.msg_id)
        self.registration.register_soon()
        inner = InnerMessage(topic, queue_id, msg.body, msg.flag, encode_properties(props), msg.sysflag,
                             msg.born_timestamp, host_bytes(msg.born_host[0]), msg.born_host[1],
                             msg.reconsume_times + 1)
        return self.sender.store_internal(req, inner)

    # orderly consumption locks ----------------------------------------------------------------
    @staticmethod
    def _mq_set(body: object) -> list[tuple[str, str, int]]:
        if not isinstance(body, dict):  # found by fuzzing: a body of "null" or "[]"
            raise TypeError("the body is not a JSON object")
        for key in ("consumerGroup", "clientId"):
            if not isinstance(body.get(key, ""), str):
                raise TypeError(f"{key} is not a string")
        return [(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])) for mq in body.get("mqSet") or []]

    def lock_batch(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        try:
            body = fastjson.loads(req.body_bytes())
            mqs = self._mq_set(body)
        except (ValueError, KeyError, TypeError) as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"illegal lock request body: {e}")
        held = self.locks.try_lock_batch(body.get("consumerGroup", ""), mqs, body.get("clientId", ""))
        out = {"lockOKMQSet": [{"topic": t, "brokerName": n, "queueId": q} for t, n, q in held]}
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(out))

    def unlock_batch(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        try:
            body = fastjson.loads(req.body_bytes())
            mqs = self._mq_set(body)
        except (ValueError, KeyError, TypeError) as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"illegal unlock request body: {e}")
        self.locks.unlock_batch(body.get("consumerGroup", ""), mqs, body.get("clientId", ""))
        return req.make_response(ResponseCode.SUCCESS)
