"""Where a popped message goes when it was not acked in time: the group's pop retry topic
``%RETRY%<group>_<topic>`` (reconsume times + 1, RETRY_TOPIC and 1ST_POP_TIME kept), or ``%DLQ%<group>``
once it was retried the group's retryMaxTimes. Used by the revive service and by orderly pop."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from tidalmq.broker.message import InnerMessage
from tidalmq.broker.pop.revive_log import REVIVE_GROUP
from tidalmq.broker.topic.topic_config import PERM_READ, PERM_WRITE
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common import pop_handle as xi
from tidalmq.common.message import encode_properties
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import RecordError, StoredMessage, decode_record
from tidalmq.store.message_store import GetStatus

if TYPE_CHECKING:
    from tidalmq.broker.pop.service import PopService

FIRST_POP_TIME = "1ST_POP_TIME"  # MessageConst.PROPERTY_FIRST_POP_TIME
DLQ_QUEUE_NUMS = 1
DEFAULT_MAX_TIMES = 16
# Properties of a delivered message that must not act again when it is re-put (a delay level would delay it
# anew). A delivered timer message keeps its deliver time (TIMER_DELIVER_MS ...) and TIMER_OUT_MS, as
# RocketMQ's revive copies them: with TIMER_OUT_MS the timer leaves it alone, and a 5.x client still sees
# the retry's delivery_timestamp.
_DROPPED = (mc.DELAY, mc.TIMER_ENQUEUE_MS, mc.TIMER_DEQUEUE_MS, mc.TIMER_ROLL_TIMES, mc.REAL_TOPIC, mc.REAL_QID,
            mc.WAIT_STORE_MSG_OK)


def look(pop: PopService, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
    """The message at ``offset`` of the queue, None when it is gone (or does not decode)."""
    res = pop.store.get_message(REVIVE_GROUP, topic, queue_id, offset, 1)
    if res.status != GetStatus.FOUND or not res.buffers or res.queue_offsets[0] != offset:
        return None
    try:
        return decode_record(res.buffers[0])
    except RecordError:
        return None


def max_times(pop: PopService, group: str) -> int:
    sg = pop.groups.find(group)
    return sg.retry_max_times if sg is not None else DEFAULT_MAX_TIMES


async def requeue(pop: PopService, group: str, topic_read: str, msg: StoredMessage, pop_time: int, *,
                  attempts: int, dead: bool) -> None:
    """Store ``msg`` (read from ``topic_read``, delivered ``attempts`` times before) into the group's
    pop retry topic, or its DLQ when ``dead``; PopError if the store refuses."""
    origin = xi.normal_topic(topic_read, group)
    props = {k: v for k, v in msg.properties.items() if k not in _DROPPED}
    lite = nm.parse_lite_queue(topic_read)
    if lite is not None and not dead:
        # A lite topic has no retry topic (RocketMQ's LiteUtil): the message is stored again in its
        # parent topic, its __LITE_TOPIC kept, so that it is queued again in the same LMQ, at its end.
        parent, child = lite
        props[mc.LITE_TOPIC] = child
        props.setdefault(FIRST_POP_TIME, str(pop_time))
        props.setdefault(mc.ORIGIN_MESSAGE_ID, props.get(mc.UNIQ_KEY) or msg.msg_id)
        await pop.put_internal(InnerMessage(
            parent, 0, msg.body, msg.flag, encode_properties(props), msg.sysflag, msg.born_timestamp,
            host_bytes(msg.born_host[0]), msg.born_host[1], attempts + 1))
        return
    if lite is not None:
        origin = lite[0]  # dead-lettered under its parent topic
    props.setdefault(mc.RETRY_TOPIC, origin)
    props.setdefault(FIRST_POP_TIME, str(pop_time))
    props.setdefault(mc.ORIGIN_MESSAGE_ID, props.get(mc.UNIQ_KEY) or msg.msg_id)
    if dead:
        topic = nm.dlq_topic(group)
        pop.topics.create_system_like(topic, DLQ_QUEUE_NUMS, PERM_READ | PERM_WRITE)  # readable, as RocketMQ's
        props.setdefault(mc.DLQ_ORIGIN_TOPIC, origin)
        props.setdefault(mc.DLQ_ORIGIN_MESSAGE_ID, props[mc.ORIGIN_MESSAGE_ID])
        queue_id = random.randrange(DLQ_QUEUE_NUMS)
    else:
        topic = xi.pop_retry_topic(origin, group)
        pop.topics.create_system_like(topic, 1, PERM_READ | PERM_WRITE)
        queue_id = 0
    pop.register_soon()
    await pop.put_internal(InnerMessage(
        topic, queue_id, msg.body, msg.flag, encode_properties(props), msg.sysflag, msg.born_timestamp,
        host_bytes(msg.born_host[0]), msg.born_host[1], attempts + 1))
