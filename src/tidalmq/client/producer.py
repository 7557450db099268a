"""Producer and TransactionProducer (DefaultMQProducer, TransactionMQProducer), asyncio-native."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client import codec
from tidalmq.client import validators as v
from tidalmq.client.errors import (
    ACCESS_BROKER_TIMEOUT,
    CONNECT_BROKER_EXCEPTION,
    IllegalStateError,
    MQBrokerError,
    MQClientError,
    SendTimeoutError,
    ValidationError,
)
from tidalmq.client.instance import ClientInstance
from tidalmq.client.lifecycle import ClientLifecycle
from tidalmq.client.message import (
    Message,
    MessageExt,
    MessageQueue,
    SendResult,
    SendStatus,
    TransactionSendResult,
    TransactionState,
    now_ms,
)
from tidalmq.client.selector import FaultStrategy, MessageQueueSelector, RoundRobin, select_by_hash
from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.msgid import UniqIdGenerator, decode_offset_msg_id, host_bytes
from tidalmq.common.recall_handle import RecallHandleError, decode_recall_handle
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand, SerializeType
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol.header import RequestError
from tidalmq.remoting.tls import TlsOption
from tidalmq.remoting.transport import Connection, RemotingError, RemotingTimeout

log = logging.getLogger(__name__)

SendCallback = Callable[[SendResult | None, BaseException | None], Any]
"""``callback(result, error)``: exactly one of them is None; may be a coroutine function."""

# Broker answers after which a sync send tries another broker (DefaultMQProducer.retryResponseCodes).
RETRY_RESPONSE_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION, 205, 206,  # NO_BUYER_ID, NOT_IN_CURRENT_UNIT
})
_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_TIMER_PROPS = (mc.TIMER_DELIVER_MS, mc.TIMER_DELAY_MS, mc.TIMER_DELAY_SEC)
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


_MODE_SYNC, _MODE_ASYNC, _MODE_ONEWAY = 0, 1, 2


class _Prepared:
    """A message ready for the wire: final properties string, body, sysflag."""

    __slots__ = ("topic", "body", "flag", "sysflag", "properties", "uniq", "batch", "deliver_ms", "reconsume_times",
                 "max_reconsume_times")

    def __init__(self, topic: str, body: bytes, flag: int, sysflag: int, properties: str, uniq: str, batch: bool,
                 deliver_ms: int | None) -> None:
        self.topic, self.body, self.flag, self.sysflag = topic, body, flag, sysflag
        self.properties, self.uniq, self.batch, self.deliver_ms = properties, uniq, batch, deliver_ms
        self.reconsume_times = 0
        self.max_reconsume_times: int | None = None


class Producer(ClientLifecycle):
    """Sends messages. Use as ``async with Producer("group") as p: await p.send(Message(...))``.

    Options follow DefaultMQProducer: ``send_timeout`` (s, retries included), ``retry_times_when_send_failed``
    (sync sends try another broker), ``retry_times_when_send_async_failed``, ``compress_msg_body_over_howmuch``
    (bytes; zlib level ``compress_level``), ``max_message_size``, ``send_latency_fault_enable`` (avoid brokers
    that were slow or failed), ``default_topic_queue_nums`` (queues of an auto-created topic).

    ``idempotent``: a send that failed or timed out is retried on the same queue (after a backoff), never
    on another broker, with the same ``UNIQ_KEY``: a broker with ``duplicationEnable`` stores it once and
    answers a retry of a stored message with the original's result (docs/spark.md, "Exactly-once
    writes"). A message that already carries a ``UNIQ_KEY`` keeps it, so a caller can key its messages
    itself and resend them safely after a crash.
    """

    KIND = "producer"

    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv_addr: str | None = None, *,
                 send_timeout: float = 3.0, retry_times_when_send_failed: int = 2,
                 retry_times_when_send_async_failed: int = 2, compress_msg_body_over_howmuch: int = 4096,
                 compress_level: int = codec.COMPRESS_LEVEL, max_message_size: int = v.DEFAULT_MAX_MESSAGE_SIZE,
                 send_latency_fault_enable: bool = True, default_topic_queue_nums: int = codec.DEFAULT_TOPIC_QUEUE_NUMS,
                 max_delay_level: int = v.DEFAULT_MAX_DELAY_LEVEL, timer_max_delay_sec: int = v.DEFAULT_TIMER_MAX_DELAY_SEC,
                 instance_name: str | None = None, client_ip: str | None = None,
                 credentials: SessionCredentials | None = None,
                 instance: ClientInstance | None = None, tls: TlsOption = None, idempotent: bool = False) -> None:
        v.check_group(group)
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.compress_over = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.max_delay_level = max_delay_level
        self.timer_max_delay_sec = timer_max_delay_sec
        self.idempotent = idempotent
        self.fault = FaultStrategy(send_latency_fault_enable)
        self._instance = instance or ClientInstance(namesrv_addr, instance_name=instance_name, client_ip=client_ip,
                                                    credentials=credentials, tls=tls)
        self._own_instance = instance is None
        self._ids = UniqIdGenerator(host_bytes(self._instance.client_ip))
        self._rr: dict[str, RoundRobin] = {}
        self._publish: dict[str, tuple[codec.TopicRoute, list[MessageQueue]]] = {}
        self._state = "created"
        self._pending: set[asyncio.Future[Any]] = set()
        self._headers = codec.SendHeaderTemplates()

    # lifecycle --------------------------------------------------------------------------------
    @property
    def instance(self) -> ClientInstance:
        return self._instance

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    async def start(self) -> None:
        """Register with the client instance and start its route refresh and heartbeats."""
        if not self._may_start():
            return
        if self.group in self._instance.producers:
            raise IllegalStateError(f"the producer group {self.group} is already started in client {self.client_id}")
        self._instance.producers[self.group] = self
        await self._instance.start()
        self._state = "running"

    async def shutdown(self) -> None:
        """Wait for async sends in flight, unregister from the brokers, close the connections."""
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "stopping"
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=self.send_timeout)
        self._instance.producers.pop(self.group, None)
        await self._instance.unregister(producer_group=self.group)
        if self._own_instance:
            await self._instance.shutdown()
        self._state = "shutdown"

    def topics(self) -> list[str]:
        return list(self._publish)

    # routing ----------------------------------------------------------------------------------
    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a message to ``topic`` may go to (the default topic's when it does not exist yet)."""
        self._check_running()
        v.check_topic(topic)
        return list((await self._queues(topic))[1])

    async def _queues(self, topic: str) -> tuple[codec.TopicRoute, list[MessageQueue]]:
        inst = self._instance
        current = inst.routes.get(topic)
        cached = self._publish.get(topic)
        if cached is not None and (cached[0] is current or current is None):
            return cached
        if current is not None and current.queue_datas:
            route = current
        else:
            route = await self._route_through_blip(topic) if self.idempotent else \
                await inst.route(topic, default_topic=True)
        queues = route.publish_queues()
        if topic not in inst.routes:  # routed like the default topic: the broker creates it on the first send
            queues = [q for q in queues if q.queue_id < self.default_topic_queue_nums]
        if not queues:
            raise MQClientError(17, f"No writable queue of topic {topic} on any broker with a master")
        self._publish[topic] = (route, queues)
        return route, queues

    async def _route_through_blip(self, topic: str) -> codec.TopicRoute:
        """An idempotent producer rides out a NameServer that does not answer, until the send timeout."""
        began = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._instance.route(topic, default_topic=True)
            except MQClientError as e:
                pause = idempotent_backoff(attempt)
                if isinstance(e, MQBrokerError) or time.monotonic() - began + pause >= self.send_timeout:
                    raise
            await asyncio.sleep(pause)

    def _broker_addr(self, route: codec.TopicRoute, mq: MessageQueue) -> str:
        addr = route.master_addr(mq.broker_name) or self._instance.master_addr(mq.broker_name)
        if addr is None:
            raise MQClientError(10003, f"The broker[{mq.broker_name}] not exist")
        return addr

    # preparation ------------------------------------------------------------------------------
    def _prepare(self, msg: Message) -> _Prepared:
        v.check_message(msg, self.max_message_size)
        v.check_delay(msg, self.max_delay_level, self.timer_max_delay_sec)
        props = msg.properties
        uniq = props.get(mc.UNIQ_KEY)
        if not uniq:
            uniq = self._ids.next_id()
            props[mc.UNIQ_KEY] = uniq
        body, compressed = codec.compress_body(msg.body, self.compress_over, self.compress_level)
        sysflag = sf.COMPRESSED_FLAG if compressed else 0
        if props.get(mc.TRAN_MSG) == "true":
            sysflag |= sf.TRANSACTION_PREPARED_TYPE
        deliver_ms = _deliver_ms(props)
        p = _Prepared(msg.topic, body, msg.flag, sysflag, mc.encode_properties(props), uniq, False, deliver_ms)
        if msg.topic.startswith("%RETRY%"):
            p.reconsume_times = int(props.get(mc.RECONSUME_TIME, "0") or 0)
            mrt = props.get(mc.MAX_RECONSUME_TIMES)
            p.max_reconsume_times = int(mrt) if mrt else None
        return p

    def _prepare_batch(self, msgs: Sequence[Message]) -> _Prepared:
        v.check_batch(msgs, self.max_message_size, self.timer_max_delay_sec)
        uniqs = [m.properties.get(mc.UNIQ_KEY) or "" for m in msgs]
        missing = [i for i, u in enumerate(uniqs) if not u]
        for i, u in zip(missing, self._ids.next_ids(len(missing)), strict=True):
            uniqs[i] = msgs[i].properties[mc.UNIQ_KEY] = u
        body = codec.encode_batch(msgs)
        if len(body) > self.max_message_size:
            raise ValidationError(f"the batch body size {len(body)} is over max value, MAX: {self.max_message_size}")
        wait = msgs[0].properties.get(mc.WAIT_STORE_MSG_OK, "true")
        props = mc.encode_properties({mc.WAIT_STORE_MSG_OK: wait})
        return _Prepared(msgs[0].topic, body, 0, 0, props, ",".join(uniqs), True, None)

    def _request(self, p: _Prepared, mq: MessageQueue) -> RemotingCommand:
        code = RC.SEND_BATCH_MESSAGE if p.batch else RC.SEND_MESSAGE_V2
        args: dict[str, Any] = dict(group=self.group, topic=p.topic, queue_id=mq.queue_id, sysflag=p.sysflag, born_timestamp=now_ms(),
                    flag=p.flag, properties=p.properties, reconsume_times=p.reconsume_times,
                    max_reconsume_times=p.max_reconsume_times, batch=p.batch, broker_name=mq.broker_name,
                    default_topic_queue_nums=self.default_topic_queue_nums)
        if self._instance.signer is None:  # a signature covers every field: signed requests keep the dict
            return RemotingCommand(code=code, body=p.body, serialize_type=SerializeType.ROCKETMQ,
                                   ext_encoded=self._headers.encode(**args))
        return RemotingCommand(code=code, ext_fields=codec.send_header_v2(**args), body=p.body,
                               serialize_type=SerializeType.ROCKETMQ)

    # the send loop ----------------------------------------------------------------------------
    async def _send_once(self, p: _Prepared, route: codec.TopicRoute, mq: MessageQueue, timeout: float) -> SendResult:
        addr = self._broker_addr(route, mq)
        return await self._send_until_not_busy(p, mq, addr, time.monotonic() + timeout)

    async def _send_until_not_busy(self, p: _Prepared, mq: MessageQueue, addr: str, deadline: float,
                                   busy: RemotingCommand | None = None) -> SendResult:
        """Send to ``addr`` until it answers something other than SYSTEM_BUSY, backing off between
        tries (``busy_backoff``), until ``deadline``; then the last busy answer is the error. ``busy``:
        a busy answer already received (the async hot path's first attempt)."""
        attempt = 0
        while True:
            if busy is not None:
                attempt += 1
                pause = busy_backoff(attempt)
                timeout = deadline - time.monotonic() - pause
                if timeout <= 0:
                    resp = busy
                    break
                await asyncio.sleep(pause)
            else:
                timeout = deadline - time.monotonic()
            try:
                resp = await self._instance.invoke(addr, self._request(p, mq), timeout)
            except MQClientError:
                if busy is None:
                    raise
                resp = busy  # the time left after a busy answer ran out: that answer is the error
                break
            if resp.code != ResponseCode.SYSTEM_BUSY:
                break
            busy = resp
        return _send_result(p, mq, addr, resp)

    async def _send_default(self, p: _Prepared, mode: int, timeout: float | None, *,
                            first: _FirstAttempt | None = None) -> SendResult | None:
        """Send with retries on other brokers. ``first``: the attempt ``_send_async_first`` made and
        lost (it counts as one of the tries and its broker is avoided next)."""
        timeout = self.send_timeout if timeout is None else timeout
        begin = time.monotonic() if first is None else first.begin
        route, queues = await self._queues(p.topic)
        rr = self._rr.get(p.topic)
        if rr is None:
            rr = self._rr[p.topic] = RoundRobin()
        times = 1
        if mode == _MODE_SYNC:
            times += max(0, self.retry_times_when_send_failed)
        elif mode == _MODE_ASYNC:
            times += max(0, self.retry_times_when_send_async_failed)
        last_broker: str | None = None
        last_error: BaseException | None = None
        if first is not None:
            times -= 1
            last_broker, last_error = first.broker_name, first.error
        if self.idempotent:  # retried on its queue until the send timeout (Kafka: retries within delivery.timeout.ms)
            times = max(times, 1 << 20)
        tries = 0
        mq: MessageQueue | None = first.mq if first is not None else None
        if self.idempotent and mq is None:
            mq = idempotent_queue(queues, p.uniq)
        for attempt in range(1, times + 1):
            if self.idempotent and mq is not None:
                if attempt > 1 or first is not None:
                    await asyncio.sleep(min(idempotent_backoff(attempt),
                                            max(0.0, timeout - (time.monotonic() - begin))))
            else:
                mq = self.fault.select(queues, rr, last_broker)
            last_broker = mq.broker_name
            left = timeout - (time.monotonic() - begin)
            if left <= 0:
                break
            tries += 1
            t0 = time.monotonic()
            try:
                if mode == _MODE_ONEWAY:
                    addr = self._broker_addr(route, mq)
                    await self._instance.invoke_oneway(addr, self._request(p, mq))
                    return None
                result = await self._send_once(p, route, mq, left)
            except MQBrokerError as e:
                self.fault.update(mq.broker_name, int((time.monotonic() - t0) * 1000), True)
                last_error = e
                if e.code in RETRY_RESPONSE_CODES:
                    continue
                raise
            except MQClientError as e:  # connection refused, broken or timed out: try another broker
                self.fault.update(mq.broker_name, int((time.monotonic() - t0) * 1000), True)
                last_error = e
                if mode == _MODE_ONEWAY:
                    raise
                continue
            self.fault.update(mq.broker_name, int((time.monotonic() - t0) * 1000), False)
            return result
        elapsed = int((time.monotonic() - begin) * 1000)
        if last_error is not None and elapsed < timeout * 1000:
            if isinstance(last_error, MQClientError) and not isinstance(last_error, MQBrokerError):
                raise MQClientError(last_error.code, f"Send [{tries}] times, still failed, cost [{elapsed}]ms, "
                                    f"Topic: {p.topic}: {last_error.remark}") from last_error
            raise last_error
        raise SendTimeoutError(f"sendDefaultImpl call timeout: {elapsed} ms (send_timeout {int(timeout * 1000)} ms), "
                               f"topic {p.topic}, last error: {last_error}")

    async def _send_to(self, p: _Prepared, mq: MessageQueue, timeout: float | None, oneway: bool = False) -> SendResult | None:
        route, _ = await self._queues(p.topic)
        if oneway:
            await self._instance.invoke_oneway(self._broker_addr(route, mq), self._request(p, mq))
            return None
        t0 = time.monotonic()
        timeout = self.send_timeout if timeout is None else timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                res = await self._send_once(p, route, mq, timeout - (time.monotonic() - t0))
                break
            except MQClientError as e:
                self.fault.update(mq.broker_name, int((time.monotonic() - t0) * 1000), True)
                pause = idempotent_backoff(attempt)
                # idempotent: a lost connection or answer is retried on the queue (its window dedups)
                if (not self.idempotent or isinstance(e, MQBrokerError | ValidationError)
                        or time.monotonic() - t0 + pause >= timeout):
                    raise
            await asyncio.sleep(pause)
        self.fault.update(mq.broker_name, int((time.monotonic() - t0) * 1000), False)
        return res

    async def _select(self, p: _Prepared, msg: Message, selector: MessageQueueSelector, arg: Any) -> MessageQueue:
        _, queues = await self._queues(p.topic)
        mq = selector(queues, msg, arg)
        if mq not in queues:
            raise ValidationError(f"the selector returned {mq}, which is not a queue of {p.topic}")
        return mq

    # public sends -----------------------------------------------------------------------------
    async def send(self, msg: Message, *, queue: MessageQueue | None = None,
                   selector: MessageQueueSelector | None = None, arg: Any = None,
                   timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer. Without ``queue`` or ``selector`` the queue is chosen
        round-robin, and a failed send is retried on another broker (``retry_times_when_send_failed``)."""
        self._check_running()
        p = self._prepare(msg)
        if queue is None and selector is None and msg.message_group is not None:
            selector, arg = select_by_hash, msg.message_group  # one queue per message group: FIFO
        if queue is not None:
            res = await self._send_to(p, queue, timeout)
        elif selector is not None:
            res = await self._send_to(p, await self._select(p, msg, selector, arg), timeout)
        else:
            res = await self._send_default(p, _MODE_SYNC, timeout)
        assert res is not None
        return res

    async def send_orderly(self, msg: Message, sharding_key: Any, *, timeout: float | None = None) -> SendResult:
        """Send to the queue of ``sharding_key`` (hash, as SelectMessageQueueByHash): messages of one key
        stay in order as long as the topic's queues do not change."""
        return await self.send(msg, selector=select_by_hash, arg=sharding_key, timeout=timeout)

    def send_async(self, msg: Message, callback: SendCallback | None = None, *, queue: MessageQueue | None = None,
                   selector: MessageQueueSelector | None = None, arg: Any = None,
                   timeout: float | None = None) -> asyncio.Future[SendResult]:
        """Start a send and return at once: await the returned future, or pass ``callback(result, error)``.
        Validation errors raise here, before anything is sent."""
        self._check_running()
        p = self._prepare(msg)
        if queue is None and selector is None and msg.message_group is not None:
            selector, arg = select_by_hash, msg.message_group  # one queue per message group: FIFO
        fut: asyncio.Future[SendResult] | None = None
        if queue is None and selector is None:
            fut = self._send_async_first(p, timeout)
        if fut is not None:
            self._pending.add(fut)  # _first_answered takes it out: no done-callback of its own
        else:

            async def run() -> SendResult:
                if queue is not None:
                    r = await self._send_to(p, queue, timeout)
                elif selector is not None:
                    r = await self._send_to(p, await self._select(p, msg, selector, arg), timeout)
                else:
                    r = await self._send_default(p, _MODE_ASYNC, timeout)
                assert r is not None
                return r

            fut = asyncio.ensure_future(run())
            self._pending.add(fut)
            fut.add_done_callback(self._pending.discard)
        if callback is not None:
            fut.add_done_callback(lambda f: _invoke_callback(callback, f))
        return fut

    def _send_async_first(self, p: _Prepared, timeout: float | None) -> asyncio.Future[SendResult] | None:
        """The hot path of ``send_async`` (round-robin queue): when the topic's route is cached and the
        broker's connection is open, the first attempt goes out at once and its answer is turned into
        the result by a callback, with no Task or coroutine per send. A failed attempt that deserves a
        retry continues in ``_send_default``. None: the send must take the general path."""
        cached = self._publish.get(p.topic)
        current = self._instance.routes.get(p.topic)
        if cached is None or not (cached[0] is current or current is None):
            return None
        route, queues = cached
        rr = self._rr.get(p.topic)
        if rr is None:
            rr = self._rr[p.topic] = RoundRobin()
        mq = idempotent_queue(queues, p.uniq) if self.idempotent else self.fault.select(queues, rr, None)
        addr = route.master_addr(mq.broker_name) or self._instance.master_addr(mq.broker_name)
        conn = self._instance.ready_connection(addr) if addr is not None else None
        if conn is None:
            return None
        timeout = self.send_timeout if timeout is None else timeout
        first = _FirstAttempt(p, mq, addr, timeout)  # type: ignore[arg-type]  # addr is set when conn is
        out: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        conn.request(self._instance.sign(self._request(p, mq)), timeout).add_done_callback(
            functools.partial(self._first_answered, first, out))
        return out

    def _first_answered(self, first: _FirstAttempt, out: asyncio.Future[SendResult],
                        answer: asyncio.Future[RemotingCommand]) -> None:
        self._pending.discard(out)  # back below if a retry follows
        mq = first.mq
        elapsed_ms = int((time.monotonic() - first.begin) * 1000)
        error: BaseException | None = answer.exception() if not answer.cancelled() else MQClientError(
            CONNECT_BROKER_EXCEPTION, f"request to {first.addr} cancelled")
        if error is None:
            try:
                result = _send_result(first.p, mq, first.addr, answer.result())
            except MQBrokerError as e:
                error = e
            else:
                self.fault.update(mq.broker_name, elapsed_ms, False)
                if not out.done():
                    out.set_result(result)
                return
        if isinstance(error, RemotingTimeout):
            error = MQClientError(ACCESS_BROKER_TIMEOUT, error.remark)
        elif isinstance(error, RemotingError) and not isinstance(error, MQClientError):  # as ClientInstance.invoke
            error = MQClientError(error.code, error.remark)
        self.fault.update(mq.broker_name, elapsed_ms, True)
        first.error = error
        if out.done():
            return
        if isinstance(error, MQBrokerError) and error.code == ResponseCode.SYSTEM_BUSY:
            # shed by flow control: back off and retry the same broker (as the general path does)
            retry = asyncio.ensure_future(self._send_until_not_busy(
                first.p, mq, first.addr, first.begin + first.timeout, busy=answer.result()))
            retry.add_done_callback(functools.partial(_chain, out))
            self._pending.add(out)
            out.add_done_callback(self._pending.discard)
            return
        if isinstance(error, MQBrokerError) and error.code not in RETRY_RESPONSE_CODES:
            out.set_exception(error)
            return
        rest = asyncio.ensure_future(self._send_default(first.p, _MODE_ASYNC, first.timeout, first=first))
        rest.add_done_callback(functools.partial(_chain, out))
        self._pending.add(out)
        out.add_done_callback(self._pending.discard)

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None,
                          selector: MessageQueueSelector | None = None, arg: Any = None) -> None:
        """Send without waiting for (or getting) an answer: fastest, no delivery guarantee."""
        self._check_running()
        p = self._prepare(msg)
        if queue is not None:
            await self._send_to(p, queue, None, oneway=True)
        elif selector is not None:
            await self._send_to(p, await self._select(p, msg, selector, arg), None, oneway=True)
        else:
            await self._send_default(p, _MODE_ONEWAY, None)

    async def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """Send messages of one topic in one request (stored to one queue). ``msg_id`` of the result
        joins the messages' ids with commas, as RocketMQ's does. Messages with a deliver time
        (``deliver_time_ms``, ``delay_ms``, ``delay_sec``) may be batched, each scheduled at its own time,
        when every message of the batch has one (docs/scheduled-delivery.md)."""
        self._check_running()
        p = self._prepare_batch(list(msgs))
        res = await (self._send_to(p, queue, timeout) if queue is not None else self._send_default(p, _MODE_SYNC, timeout))
        assert res is not None
        return res

    async def cancel_scheduled(self, result: SendResult | None = None, *, topic: str | None = None,
                               uniq_key: str | None = None, deliver_time_ms: int | None = None,
                               queue: MessageQueue | None = None, timeout: float | None = None) -> SendResult:
        """Cancel a message scheduled with a delivery time (RocketMQ 5's timer delete): send a marker with
        ``TIMER_DEL_UNIQKEY`` = ``<topic>+<uniq key>`` (TimerMessageStore.buildDeleteKey) and the same
        ``TIMER_DELIVER_MS``, to the same broker. Pass the original ``SendResult`` (its deliver time is known
        exactly only when the message was sent with an absolute ``deliver_time_ms``), or the fields."""
        self._check_running()
        if result is not None:
            topic = topic or result.message_queue.topic
            uniq_key = uniq_key or result.msg_id
            deliver_time_ms = deliver_time_ms or result.deliver_time_ms
            queue = queue or result.message_queue
        if not topic or not uniq_key:
            raise ValidationError("cancel_scheduled needs the topic and the uniq key of the scheduled message")
        if not deliver_time_ms:
            raise ValidationError("cancel_scheduled needs the message's deliver time (TIMER_DELIVER_MS)")
        marker = Message(topic, b"0", properties={
            mc.TIMER_DEL_UNIQKEY: f"{topic}+{uniq_key}",
            mc.UNIQ_KEY: uniq_key,
            mc.TIMER_DELIVER_MS: str(deliver_time_ms),
        })
        if queue is not None:
            route, queues = await self._queues(topic)
            if queue not in queues:
                queue = next((q for q in queues if q.broker_name == queue.broker_name), queues[0])
            p = self._prepare_unchecked(marker)
            res = await self._send_to(p, queue, timeout)
            assert res is not None
            return res
        return await self.send(marker, timeout=timeout)

    async def recall(self, topic: str, recall_handle: str, *, timeout: float | None = None) -> str:
        """Recall a scheduled message before it is due (RocketMQ 5.3's recallMessage): ``recall_handle`` is
        its ``SendResult.recall_handle``. Returns the recalled message's id; MQBrokerError when the broker
        refuses (``recallMessageEnable`` off, the message already delivered, recalled or unknown ...)."""
        self._check_running()
        v.check_topic(topic)
        if topic.startswith(("%RETRY%", "%DLQ%")):
            raise ValidationError("topic is not supported")
        try:
            handle = decode_recall_handle(recall_handle)
        except RecallHandleError as e:
            raise ValidationError(str(e)) from None
        route, _ = await self._queues(topic)
        addr = route.master_addr(handle.broker_name) or self._instance.master_addr(handle.broker_name)
        if addr is None:
            raise MQClientError(10003, f"The broker[{handle.broker_name}] not exist")
        req = RemotingCommand(code=RC.RECALL_MESSAGE, ext_fields=bh.RecallMessageRequestHeader(
            producer_group=self.group, topic=topic, recall_handle=recall_handle, broker_name=handle.broker_name).to_ext())
        resp = await self._instance.invoke(addr, req, self.send_timeout if timeout is None else timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return bh.RecallMessageResponseHeader.parse(resp.ext_fields).msg_id or handle.message_id

    def _prepare_unchecked(self, msg: Message) -> _Prepared:
        v.check_message(msg, self.max_message_size)
        return _Prepared(msg.topic, msg.body, 0, 0, mc.encode_properties(msg.properties),
                         msg.properties[mc.UNIQ_KEY], False, _deliver_ms(msg.properties))


_TSO = bh.CheckTransactionStateRequestHeader.key_of("tran_state_table_offset")
_CLO = bh.CheckTransactionStateRequestHeader.key_of("commit_log_offset")


class _FirstAttempt:
    """The first try of an async send made by ``_send_async_first``, and how it failed."""

    __slots__ = ("p", "mq", "addr", "timeout", "begin", "error")

    def __init__(self, p: _Prepared, mq: MessageQueue, addr: str, timeout: float) -> None:
        self.p, self.mq, self.addr, self.timeout = p, mq, addr, timeout
        self.begin = time.monotonic()
        self.error: BaseException | None = None

    @property
    def broker_name(self) -> str:
        return self.mq.broker_name


def _send_result(p: _Prepared, mq: MessageQueue, addr: str, resp: RemotingCommand) -> SendResult:
    """The broker's answer to a send as a ``SendResult``; an error code raises ``MQBrokerError``."""
    status = _STATUS.get(resp.code)
    if status is None:
        raise MQBrokerError(resp.code, resp.remark, addr)
    h = _SEND_RESPONSE.parse(resp.ext_fields)
    qid = h.queue_id if _SEND_QUEUE_ID in resp.ext_fields else mq.queue_id
    queue = mq if qid == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, qid)
    offset = h.queue_offset if _SEND_QUEUE_OFFSET in resp.ext_fields else -1
    return SendResult(status, p.uniq, h.msg_id, queue, offset, h.transaction_id, h.msg_region or "DefaultRegion",
                      p.deliver_ms, h.recall_handle)


_SEND_RESPONSE = bh.SendMessageResponseHeader
_SEND_QUEUE_ID, _SEND_QUEUE_OFFSET = _SEND_RESPONSE.key_of("queue_id"), _SEND_RESPONSE.key_of("queue_offset")


def _chain(out: asyncio.Future[Any], done: asyncio.Future[Any]) -> None:
    """Copy the outcome of ``done`` into ``out`` (unless ``out`` was cancelled meanwhile)."""
    if out.done():
        return
    if done.cancelled():
        out.cancel()
    elif done.exception() is not None:
        out.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        out.set_result(done.result())


def _deliver_ms(props: dict[str, str]) -> int | None:
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


def _invoke_callback(callback: SendCallback, fut: asyncio.Future[SendResult]) -> None:
    error: BaseException | None
    if fut.cancelled():
        result, error = None, asyncio.CancelledError()
    else:
        error = fut.exception()
        result = None if error is not None else fut.result()
    try:
        out = callback(result, error)
        if inspect.isawaitable(out):
            asyncio.ensure_future(out)
    except Exception:
        log.exception("send callback failed")


# ---- transactions -----------------------------------------------------------------------------------

class TransactionListener(Protocol):
    """The application's side of a transactional send. Either method may be a coroutine function."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionState | Awaitable[TransactionState]:
        """Run the local transaction after the half message is stored; return its outcome."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> TransactionState | Awaitable[TransactionState]:
        """Answer the broker's question about a half message whose outcome it never learned."""
        ...


_END_TYPE = {
    TransactionState.COMMIT: sf.TRANSACTION_COMMIT_TYPE,
    TransactionState.ROLLBACK: sf.TRANSACTION_ROLLBACK_TYPE,
    TransactionState.UNKNOWN: sf.TRANSACTION_NOT_TYPE,
}


async def _call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


class TransactionProducer(Producer):
    """Transactional messages: a half message (``TRAN_MSG=true``, ``PGROUP``) is stored but invisible,
    the local transaction runs, then END_TRANSACTION commits or rolls it back. The broker asks about
    half messages left unresolved with CHECK_TRANSACTION_STATE; ``check_local_transaction`` answers."""

    def __init__(self, group: str, listener: TransactionListener, namesrv_addr: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.listener = listener
        self._checks: set[asyncio.Task[Any]] = set()

    async def send_in_transaction(self, msg: Message, arg: Any = None, *, timeout: float | None = None) -> TransactionSendResult:
        self._check_running()
        for prop in (mc.DELAY, *_TIMER_PROPS):  # a half message is never delayed (as the Java client)
            msg.properties.pop(prop, None)
        msg.properties[mc.TRAN_MSG] = "true"
        msg.properties[mc.PGROUP] = self.group
        result = await self.send(msg, timeout=timeout)
        state = TransactionState.UNKNOWN
        error: BaseException | None = None
        if result.status == SendStatus.SEND_OK:
            result.transaction_id = result.transaction_id or result.msg_id
            msg.properties[mc.TRANSACTION_ID] = result.transaction_id
            try:
                out = await _call_maybe_async(self.listener.execute_local_transaction, msg, arg)
                state = TransactionState(out) if out is not None else TransactionState.UNKNOWN
            except Exception as e:
                log.warning("local transaction of %s failed: %s", result.msg_id, e)
                error = e
        else:
            state = TransactionState.ROLLBACK
        try:
            await self.end_transaction(result, state, error)
        except MQClientError as e:
            log.warning("END_TRANSACTION of %s failed (the broker will check back): %s", result.msg_id, e)
        return TransactionSendResult(result, state)

    async def end_transaction(self, result: SendResult, state: TransactionState,
                              error: BaseException | None = None) -> None:
        """END_TRANSACTION (oneway) to the broker that stored the half message."""
        _, _, commit_offset = decode_offset_msg_id(result.offset_msg_id)
        route, _ = await self._queues(result.message_queue.topic)
        addr = self._broker_addr(route, result.message_queue)
        ext = bh.EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=result.queue_offset, commit_log_offset=commit_offset,
            commit_or_rollback=_END_TYPE[state], from_transaction_check=False, msg_id=result.msg_id,
            transaction_id=result.transaction_id or None).to_ext()
        remark = f"executeLocalTransactionBranch exception: {error!r}" if error is not None else None
        await self._instance.invoke_oneway(addr, RemotingCommand(code=RC.END_TRANSACTION, ext_fields=ext, remark=remark))

    def on_check_transaction_state(self, conn: Connection, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE from a broker (server→client, oneway): answer in a task."""
        if self._state != "running":
            return None
        task = asyncio.ensure_future(self._check(conn, cmd))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None

    async def _check(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            h = bh.CheckTransactionStateRequestHeader.parse(cmd.ext_fields)
        except RequestError as e:
            log.warning("CHECK_TRANSACTION_STATE from %s refused: %s", conn.addr, e)
            return
        msgs = codec.decode_messages(cmd.body_bytes())
        if not msgs:
            log.warning("CHECK_TRANSACTION_STATE without a message body from %s", conn.addr)
            return
        msg = msgs[0]
        uniq = msg.properties.get(mc.UNIQ_KEY) or msg.offset_msg_id
        tid = h.transaction_id or uniq
        msg.properties.setdefault(mc.TRANSACTION_ID, tid)
        group = msg.properties.get(mc.PGROUP) or self.group
        error: BaseException | None = None
        try:
            out = await _call_maybe_async(self.listener.check_local_transaction, msg)
            state = TransactionState(out) if out is not None else TransactionState.UNKNOWN
        except Exception as e:
            log.warning("check_local_transaction of %s failed: %s", uniq, e)
            state, error = TransactionState.UNKNOWN, e
        given = cmd.ext_fields
        ext = bh.EndTransactionRequestHeader(
            producer_group=group,
            tran_state_table_offset=h.tran_state_table_offset if _TSO in given else msg.queue_offset,
            commit_log_offset=h.commit_log_offset if _CLO in given else msg.commit_log_offset,
            commit_or_rollback=_END_TYPE[state], from_transaction_check=True, msg_id=uniq, transaction_id=tid,
        ).to_ext()
        remark = f"checkLocalTransactionState Exception: {error!r}" if error is not None else None
        conn.invoke_oneway(self._instance.sign(RemotingCommand(code=RC.END_TRANSACTION, ext_fields=ext, remark=remark)))

    async def shutdown(self) -> None:
        if self._checks:
            await asyncio.wait(list(self._checks), timeout=self.send_timeout)
        await super().shutdown()
