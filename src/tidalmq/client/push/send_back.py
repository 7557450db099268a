"""Handing a failed message back for a later retry (DefaultMQPushConsumerImpl.sendMessageBack):
CONSUMER_SEND_MSG_BACK to the broker that stored it, or, when the broker refuses or lacks the request,
a re-send to ``%RETRY%<group>`` (``%DLQ%<group>`` past the maximum) by an inner producer."""

from __future__ import annotations

import logging

from tidalmq.client.broker_addr import find_master_addr
from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import Message, MessageExt, MessageQueue
from tidalmq.client.producer import Producer
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.protocol import broker_headers as bh

log = logging.getLogger(__name__)

INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
# Properties of the original that must not travel with the retry copy: a DELAY of its own is set
# below, and transaction / batch bookkeeping belongs to the first send.
_DROPPED_PROPERTIES = (mc.DELAY, mc.TRAN_MSG, mc.PGROUP, mc.MIN_OFFSET, mc.MAX_OFFSET)


def max_reconsume(max_reconsume_times: int, orderly: bool) -> int:
    """getMaxReconsumeTimes: -1 means 16 for concurrent consumers and unlimited for orderly ones."""
    if max_reconsume_times >= 0:
        return max_reconsume_times
    return 0x7FFFFFFF if orderly else 16


def retry_copy(msg: MessageExt, group: str, max_times: int, delay_level: int, max_delay_level: int) -> Message:
    """The message the fallback re-sends: to the retry topic with delay level ``3 + reconsume times``
    (or ``delay_level`` when > 0), to the DLQ past ``max_times`` or when ``delay_level`` < 0; the
    original topic, message id and count travel as RETRY_TOPIC, ORIGIN_MESSAGE_ID, RECONSUME_TIME."""
    times = msg.reconsume_times + 1
    props = {k: val for k, val in msg.properties.items() if k not in _DROPPED_PROPERTIES}
    props.setdefault(mc.ORIGIN_MESSAGE_ID, msg.msg_id)
    props[mc.RETRY_TOPIC] = msg.topic
    props[mc.RECONSUME_TIME] = str(times)
    props[mc.MAX_RECONSUME_TIMES] = str(max_times)
    if times > max_times or delay_level < 0:
        topic = nm.dlq_topic(group)
    else:
        topic = nm.retry_topic(group)
        level = delay_level if delay_level > 0 else 3 + msg.reconsume_times
        props[mc.DELAY] = str(min(level, max_delay_level))
    return Message(topic, msg.body, flag=msg.flag, properties=props)


class SendBack:
    """``stats`` counts ``sent_back`` (the broker took it) and ``sent_back_fallback`` (re-sent by us)."""

    def __init__(self, instance: ClientInstance, group: str, *, max_reconsume_times: int,
                 delay_level_when_next_consume: int, stats: dict[str, int]) -> None:
        self.instance = instance
        self.group = group
        self.max_times = max_reconsume_times
        self.delay_level_when_next_consume = delay_level_when_next_consume
        self.stats = stats
        self._producer: Producer | None = None

    async def send_message_back(self, msg: MessageExt, delay_level: int | None = None) -> bool:
        """False when neither the broker nor the fallback took the message."""
        if delay_level is None:
            delay_level = self.delay_level_when_next_consume
        ext = bh.ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset, group=self.group, delay_level=delay_level, origin_msg_id=msg.msg_id,
            origin_topic=msg.topic, unit_mode=False, max_reconsume_times=self.max_times,
        )
        try:
            addr = await find_master_addr(self.instance, MessageQueue(msg.topic, msg.broker_name, msg.queue_id))
            await self.instance.invoke_ok(addr, RC.CONSUMER_SEND_MSG_BACK, ext, timeout=5.0)
            self.stats["sent_back"] += 1
            return True
        except MQClientError as e:
            if not (isinstance(e, MQBrokerError) and e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
                log.info("CONSUMER_SEND_MSG_BACK of %s failed (%s), re-sending to the retry topic", msg.msg_id, e)
        try:
            producer = await self._inner_producer()
            await producer.send(retry_copy(msg, self.group, self.max_times, delay_level, producer.max_delay_level))
            self.stats["sent_back_fallback"] += 1
            return True
        except MQClientError as e:
            log.warning("re-sending %s to the retry topic failed: %s", msg.msg_id, e)
            return False

    async def _inner_producer(self) -> Producer:
        if self._producer is None:
            p = Producer(INNER_PRODUCER_GROUP, instance=self.instance)
            await p.start()
            self._producer = p
        return self._producer

    async def shutdown(self) -> None:
        if self._producer is not None:
            await self._producer.shutdown()
            self._producer = None
