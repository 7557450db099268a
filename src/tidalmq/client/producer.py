"""Producer (DefaultMQProducer), asyncio-native; TransactionProducer is in transaction_producer.py."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

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
from tidalmq.client.lifecycle import InstanceClient
from tidalmq.client.message import (
    Message,
    MessageQueue,
    SendResult,
)
from tidalmq.client.reschedule import RescheduleResult, deliver_time, masters, reschedule
from tidalmq.client.selector import FaultStrategy, MessageQueueSelector, RoundRobin, select_by_hash
from tidalmq.client.send_request import (
    RETRY_RESPONSE_CODES,
    FirstAttempt,
    PreparedSend,
    busy_backoff,
    chain_future,
    deliver_ms,
    idempotent_backoff,
    idempotent_queue,
    send_request,
    send_result,
)
from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.msgid import UniqIdGenerator, host_bytes
from tidalmq.common.recall_handle import RecallHandleError, decode_recall_handle
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.tls import TlsOption
from tidalmq.remoting.transport import RemotingError, RemotingTimeout

log = logging.getLogger(__name__)

SendCallback = Callable[[SendResult | None, BaseException | None], Any]
"""``callback(result, error)``: exactly one of them is None; may be a coroutine function."""

_MODE_SYNC, _MODE_ASYNC, _MODE_ONEWAY = 0, 1, 2


class Producer(InstanceClient):
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
    def _prepare(self, msg: Message) -> PreparedSend:
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
        due = deliver_ms(props)
        p = PreparedSend(msg.topic, body, msg.flag, sysflag, mc.encode_properties(props), uniq, False, due)
        if msg.topic.startswith("%RETRY%"):
            p.reconsume_times = int(props.get(mc.RECONSUME_TIME, "0") or 0)
            mrt = props.get(mc.MAX_RECONSUME_TIMES)
            p.max_reconsume_times = int(mrt) if mrt else None
        return p

    def _prepare_batch(self, msgs: Sequence[Message]) -> PreparedSend:
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
        return PreparedSend(msgs[0].topic, body, 0, 0, props, ",".join(uniqs), True, None)

    def _request(self, p: PreparedSend, mq: MessageQueue) -> RemotingCommand:
        return send_request(p, mq, group=self.group, default_topic_queue_nums=self.default_topic_queue_nums,
                            templates=self._headers if self._instance.signer is None else None)

    # the send loop ----------------------------------------------------------------------------
    async def _send_once(self, p: PreparedSend, route: codec.TopicRoute, mq: MessageQueue, timeout: float) -> SendResult:
        addr = self._broker_addr(route, mq)
        return await self._send_until_not_busy(p, mq, addr, time.monotonic() + timeout)

    async def _send_until_not_busy(self, p: PreparedSend, mq: MessageQueue, addr: str, deadline: float,
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
        return send_result(p, mq, addr, resp)

    async def _send_default(self, p: PreparedSend, mode: int, timeout: float | None, *,
                            first: FirstAttempt | None = None) -> SendResult | None:
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
                # idempotent: a busy answer whose retry met a broker going down is tried again too
                if e.code in RETRY_RESPONSE_CODES or (self.idempotent and e.code == ResponseCode.SYSTEM_BUSY):
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

    async def _send_to(self, p: PreparedSend, mq: MessageQueue, timeout: float | None, oneway: bool = False) -> SendResult | None:
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

    async def _select(self, p: PreparedSend, msg: Message, selector: MessageQueueSelector, arg: Any) -> MessageQueue:
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

    def _send_async_first(self, p: PreparedSend, timeout: float | None) -> asyncio.Future[SendResult] | None:
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
        first = FirstAttempt(p, mq, addr, timeout)  # type: ignore[arg-type]  # addr is set when conn is
        out: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        conn.request(self._instance.sign(self._request(p, mq)), timeout).add_done_callback(
            functools.partial(self._first_answered, first, out))
        return out

    def _first_answered(self, first: FirstAttempt, out: asyncio.Future[SendResult],
                        answer: asyncio.Future[RemotingCommand]) -> None:
        self._pending.discard(out)  # back below if a retry follows
        mq = first.mq
        elapsed_ms = int((time.monotonic() - first.begin) * 1000)
        error: BaseException | None = answer.exception() if not answer.cancelled() else MQClientError(
            CONNECT_BROKER_EXCEPTION, f"request to {first.addr} cancelled")
        if error is None:
            try:
                result = send_result(first.p, mq, first.addr, answer.result())
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
            retry.add_done_callback(functools.partial(chain_future, out))
            self._pending.add(out)
            out.add_done_callback(self._pending.discard)
            return
        if isinstance(error, MQBrokerError) and error.code not in RETRY_RESPONSE_CODES:
            out.set_exception(error)
            return
        rest = asyncio.ensure_future(self._send_default(first.p, _MODE_ASYNC, first.timeout, first=first))
        rest.add_done_callback(functools.partial(chain_future, out))
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

    async def reschedule(self, topic: str, msg_id: str | None = None, *, key: str | None = None,
                         deliver_time_ms: int | None = None, delay_ms: int | None = None,
                         timeout: float | None = None) -> RescheduleResult:
        """Deliver a pending scheduled message of ``topic`` (timer or delay level), named by its id or a key, at
        ``deliver_time_ms`` or ``delay_ms`` from now (0: now) instead, atomically (client/reschedule.py)."""
        self._check_running()
        v.check_topic(topic)
        when, (route, _) = deliver_time(deliver_time_ms, delay_ms), await self._queues(topic)
        wait = self.send_timeout if timeout is None else timeout
        return await reschedule(lambda addr, req: self._instance.invoke(addr, req, wait), masters(route), topic,
                                msg_id, key, when, self.group)

    def _prepare_unchecked(self, msg: Message) -> PreparedSend:
        v.check_message(msg, self.max_message_size)
        return PreparedSend(msg.topic, msg.body, 0, 0, mc.encode_properties(msg.properties),
                         msg.properties[mc.UNIQ_KEY], False, deliver_ms(msg.properties))


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
