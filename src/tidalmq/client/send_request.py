"""A send as it goes on the wire and comes back (MQClientAPIImpl.sendMessage / processSendResponse): the
message prepared for the wire, its SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request from the declared header,
and the broker's answer as a ``SendResult``; which answers a send is tried again after, and when."""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import Sequence
from typing import Any

from tidalmq.client import codec
from tidalmq.client.errors import MQBrokerError
from tidalmq.client.message import MessageQueue, SendResult, SendStatus, now_ms
from tidalmq.common import message as mc
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand, SerializeType
from tidalmq.remoting.protocol import broker_headers as bh

# Broker answers after which a sync send tries another broker (DefaultMQProducer.retryResponseCodes).
RETRY_RESPONSE_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION, 205, 206,  # NO_BUYER_ID, NOT_IN_CURRENT_UNIT
})
# SYSTEM_BUSY means the broker's flow control refused the send without storing it. RocketMQ 5's clients
# back off and retry such an answer (TOO_MANY_REQUESTS, exponential backoff); this client does so within
# the send timeout, then raises the broker's code and remark.
BUSY_BACKOFF_FIRST_S = 0.02
BUSY_BACKOFF_MAX_S = 1.0


def busy_backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...) of a send answered SYSTEM_BUSY: doubling from
    BUSY_BACKOFF_FIRST_S up to BUSY_BACKOFF_MAX_S, half of it random so that the clients a broker shed
    together do not all come back together."""
    step = min(BUSY_BACKOFF_MAX_S, BUSY_BACKOFF_FIRST_S * 2 ** (attempt - 1))
    return step / 2 + random.uniform(0, step / 2)


def idempotent_queue(queues: Sequence[MessageQueue], uniq: str) -> MessageQueue:
    """The queue an idempotent send goes to, from its (first) UNIQ_KEY: a resend of the same message, from
    this process or another after a crash, reaches the broker whose window holds the original."""
    return queues[zlib.crc32(uniq.split(",", 1)[0].encode()) % len(queues)]


def idempotent_backoff(attempt: int) -> float:
    """Seconds before retry ``attempt`` of an idempotent send on its queue: 0.1 s doubling to 2 s, long
    enough together to ride out a broker restart within a send timeout of some seconds."""
    return min(2.0, 0.1 * 2 ** (attempt - 1))


STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
TIMER_PROPERTIES = (mc.TIMER_DELIVER_MS, mc.TIMER_DELAY_MS, mc.TIMER_DELAY_SEC)


class PreparedSend:
    """A message ready for the wire: final properties string, body, sysflag."""

    __slots__ = ("topic", "body", "flag", "sysflag", "properties", "uniq", "batch", "deliver_ms", "reconsume_times",
                 "max_reconsume_times")

    def __init__(self, topic: str, body: bytes, flag: int, sysflag: int, properties: str, uniq: str, batch: bool,
                 deliver_ms: int | None) -> None:
        self.topic, self.body, self.flag, self.sysflag = topic, body, flag, sysflag
        self.properties, self.uniq, self.batch, self.deliver_ms = properties, uniq, batch, deliver_ms
        self.reconsume_times = 0
        self.max_reconsume_times: int | None = None


def send_request(p: PreparedSend, mq: MessageQueue, *, group: str, default_topic_queue_nums: int,
                 templates: codec.SendHeaderTemplates | None) -> RemotingCommand:
    """The request of ``p`` to ``mq``: its header pre-encoded from ``templates``, or as a dict where the
    request is signed afterwards (a signature covers every field: ``templates`` None)."""
    code = RC.SEND_BATCH_MESSAGE if p.batch else RC.SEND_MESSAGE_V2
    args: dict[str, Any] = dict(group=group, topic=p.topic, queue_id=mq.queue_id, sysflag=p.sysflag,
                                born_timestamp=now_ms(), flag=p.flag, properties=p.properties,
                                reconsume_times=p.reconsume_times, max_reconsume_times=p.max_reconsume_times,
                                batch=p.batch, broker_name=mq.broker_name,
                                default_topic_queue_nums=default_topic_queue_nums)
    if templates is not None:
        return RemotingCommand(code=code, body=p.body, serialize_type=SerializeType.ROCKETMQ,
                               ext_encoded=templates.encode(**args))
    return RemotingCommand(code=code, ext_fields=codec.send_header_v2(**args), body=p.body,
                           serialize_type=SerializeType.ROCKETMQ)


def send_result(p: PreparedSend, mq: MessageQueue, addr: str, resp: RemotingCommand) -> SendResult:
    """The broker's answer to a send as a ``SendResult``; an error code raises ``MQBrokerError``."""
    status = STATUS.get(resp.code)
    if status is None:
        raise MQBrokerError(resp.code, resp.remark, addr)
    h = bh.SendMessageResponseHeader.parse(resp.ext_fields)
    qid = mq.queue_id if h.queue_id is None else h.queue_id
    queue = mq if qid == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, qid)
    offset = -1 if h.queue_offset is None else h.queue_offset
    return SendResult(status, p.uniq, h.msg_id, queue, offset, h.transaction_id, h.msg_region or "DefaultRegion",
                      p.deliver_ms, h.recall_handle)




def deliver_ms(props: dict[str, str]) -> int | None:
    try:
        if mc.TIMER_DELIVER_MS in props:
            return int(props[mc.TIMER_DELIVER_MS])
        if mc.TIMER_DELAY_MS in props:
            return now_ms() + int(props[mc.TIMER_DELAY_MS])
        if mc.TIMER_DELAY_SEC in props:
            return now_ms() + int(props[mc.TIMER_DELAY_SEC]) * 1000
    except ValueError:
        return None
    return None


class FirstAttempt:
    """The first try of an async send made by ``Producer._send_async_first``, and how it failed."""

    __slots__ = ("p", "mq", "addr", "timeout", "begin", "error")

    def __init__(self, p: PreparedSend, mq: MessageQueue, addr: str, timeout: float) -> None:
        self.p, self.mq, self.addr, self.timeout = p, mq, addr, timeout
        self.begin = time.monotonic()
        self.error: BaseException | None = None

    @property
    def broker_name(self) -> str:
        return self.mq.broker_name


def chain_future(out: asyncio.Future[Any], done: asyncio.Future[Any]) -> None:
    """Copy the outcome of ``done`` into ``out`` (unless ``out`` was cancelled meanwhile)."""
    if out.done():
        return
    if done.cancelled():
        out.cancel()
    elif done.exception() is not None:
        out.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        out.set_result(done.result())
