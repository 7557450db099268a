"""PushConsumer (DefaultMQPushConsumer): rebalance, long-polling pulls, flow control, concurrent or
orderly consumption, retries, offsets — the broker pushes nothing, the consumer pulls for you.

This module is the facade: it validates the options, owns the lifecycle, and wires the parts of
:mod:`tidalmq.client.push` (rebalance, pull service, consume services, send-back, queue locks) with the
offset store. docs/client.md, "How the PushConsumer is built"."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client import codec
from tidalmq.client import validators as v
from tidalmq.client.allocate import AllocateStrategy, allocate_averagely
from tidalmq.client.errors import IllegalStateError, MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.lifecycle import ClientLifecycle
from tidalmq.client.message import (
    ConsumeFromWhere,
    MessageExt,
    MessageModel,
    MessageQueue,
    now_ms,
)
from tidalmq.client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.push.consume_concurrently import ConsumeConcurrentlyService
from tidalmq.client.push.consume_orderly import ConsumeOrderlyService
from tidalmq.client.push.listener import ListenerRunner, MessageListener
from tidalmq.client.push.pull_service import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PULL_DELAY_EXCEPTION,
    PULL_DELAY_FLOW_CONTROL,
    PULL_DELAY_NOT_LOCKED,
    FlowControl,
    PullService,
)
from tidalmq.client.push.queue_lock import LOCK_INTERVAL, QueueLocker
from tidalmq.client.push.rebalance import RebalancePush
from tidalmq.client.push.send_back import INNER_PRODUCER_GROUP, SendBack, max_reconsume
from tidalmq.client.running_info import push_running_info
from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.tls import TlsOption

__all__ = [
    "FLAG_COMMIT_OFFSET", "FLAG_SUBSCRIPTION", "FLAG_SUSPEND", "INNER_PRODUCER_GROUP", "LOCK_INTERVAL",
    "PULL_DELAY_EXCEPTION", "PULL_DELAY_FLOW_CONTROL", "PULL_DELAY_NOT_LOCKED", "MessageListener", "PushConsumer",
]

log = logging.getLogger(__name__)


class PushConsumer(ClientLifecycle):
    """Subscribe, register a listener, start; messages arrive at the listener.

    Options (RocketMQ's names): ``message_model`` (CLUSTERING shares queues among the group's
    consumers; BROADCASTING gives each all messages), ``consume_from_where`` and ``consume_timestamp``
    (ms or datetime) for a group without committed offsets, ``allocate_strategy``, ``orderly``,
    ``consume_thread_max``, ``consume_message_batch_max_size``, ``pull_batch_size``,
    ``pull_threshold_for_queue``, ``pull_threshold_size_for_queue`` (MiB), ``consume_concurrently_max_span``,
    ``max_reconsume_times`` (-1: 16 concurrent, unlimited orderly), ``suspend_current_queue_time`` (s),
    ``rebalance_interval`` (20 s), ``persist_offset_interval`` (5 s), ``suspend_timeout`` (long polling, 20 s),
    ``retry_local_delay`` (when even the fallback send-back fails), ``shutdown_timeout``,
    ``delay_level_when_next_consume`` (the delay level of a retry: 0 lets the broker choose, 3 + the
    number of reconsumes; > 0 that level; -1 straight to the DLQ).
    """

    KIND = "consumer"

    def __init__(self, group: str, namesrv_addr: str | None = None, *, listener: MessageListener | None = None,
                 orderly: bool = False, message_model: MessageModel | str = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.LAST_OFFSET,
                 consume_timestamp: int | datetime | None = None,
                 allocate_strategy: AllocateStrategy = allocate_averagely, consume_thread_max: int = 20,
                 consume_message_batch_max_size: int = 1, pull_batch_size: int = 32,
                 pull_threshold_for_queue: int = 1000, pull_threshold_size_for_queue: int = 100,
                 consume_concurrently_max_span: int = 2000, pull_interval: float = 0.0,
                 max_reconsume_times: int = -1, suspend_current_queue_time: float = 1.0,
                 rebalance_interval: float = 20.0, persist_offset_interval: float = 5.0,
                 suspend_timeout: float = 20.0, pull_timeout: float = 30.0, retry_local_delay: float = 5.0,
                 shutdown_timeout: float = 30.0, listener_inline: bool = False,
                 delay_level_when_next_consume: int = 0,
                 offset_store_dir: str | None = None, instance_name: str | None = None,
                 client_ip: str | None = None, heartbeat_interval: float = 30.0,
                 poll_name_server_interval: float = 30.0, credentials: SessionCredentials | None = None,
                 tls: TlsOption = None) -> None:
        v.check_group(group)
        if group == "DEFAULT_CONSUMER":
            raise v.ValidationError("consumerGroup can not equal DEFAULT_CONSUMER, please specify another one.")
        if not 1 <= consume_message_batch_max_size <= 1024:
            raise v.ValidationError("consume_message_batch_max_size out of range [1, 1024]")
        if not 1 <= pull_batch_size <= 1024:
            raise v.ValidationError("pull_batch_size out of range [1, 1024]")
        if not 1 <= pull_threshold_for_queue <= 65535:
            raise v.ValidationError("pull_threshold_for_queue out of range [1, 65535]")
        if not 1 <= consume_thread_max <= 1000:
            raise v.ValidationError("consume_thread_max out of range [1, 1000]")
        self.group = group
        self.orderly = orderly
        self.message_model = MessageModel(message_model)
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        if isinstance(consume_timestamp, datetime):
            consume_timestamp = int(consume_timestamp.timestamp() * 1000)
        self.consume_timestamp = consume_timestamp if consume_timestamp is not None else now_ms() - 30 * 60 * 1000
        self.allocate_strategy = allocate_strategy
        self.consume_thread_max = consume_thread_max
        self.batch_max = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue * 1024 * 1024
        self.max_span = consume_concurrently_max_span
        self.pull_interval = pull_interval
        self.max_reconsume_times = max_reconsume_times
        self.suspend_time = suspend_current_queue_time
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_offset_interval
        self.suspend_timeout = suspend_timeout
        self.pull_timeout = max(pull_timeout, suspend_timeout + 5.0)
        self.retry_local_delay = retry_local_delay
        self.shutdown_timeout = shutdown_timeout
        self.delay_level_when_next_consume = delay_level_when_next_consume
        self.listener_inline = listener_inline
        self.listener = listener
        self._instance = ClientInstance(namesrv_addr, instance_name=instance_name, client_ip=client_ip,
                                        heartbeat_broker_interval=heartbeat_interval,
                                        poll_name_server_interval=poll_name_server_interval,
                                        credentials=credentials, tls=tls)
        self.offset_store: OffsetStore
        if self.message_model == MessageModel.BROADCASTING:
            self.offset_store = LocalFileOffsetStore(offset_store_dir, self._instance.client_id, group)
        else:
            self.offset_store = RemoteBrokerOffsetStore(self._instance, group)
        self._subs: dict[str, codec.Subscription] = {}
        self._state = "created"
        self._started_ms = 0
        self.stats = {"consumed_ok": 0, "consumed_failed": 0, "sent_back": 0, "sent_back_fallback": 0,
                      "retried_locally": 0, "pulls": 0}
        # the parts, built by start() (the listener and ``orderly`` may change until then)
        self._listener_runner: ListenerRunner | None = None
        self._send_back: SendBack | None = None
        self._locker: QueueLocker | None = None
        self._consume: ConsumeConcurrentlyService | ConsumeOrderlyService | None = None
        self._pull: PullService | None = None
        self._rebalance: RebalancePush | None = None
        self._tasks: list[asyncio.Task[Any]] = []

    # configuration ----------------------------------------------------------------------------
    @property
    def client_id(self) -> str:
        return self._instance.client_id

    @property
    def instance(self) -> ClientInstance:
        return self._instance

    def subscribe(self, topic: str, expression: str = "*", *, expression_type: str = "TAG") -> None:
        """Subscribe to ``topic`` with a tag expression (``*`` or ``TagA || TagB``), or with
        ``expression_type="SQL92"`` a SQL92 selector over message properties (``a > 5 AND TAGS IN
        ('x')``; the broker needs enablePropertyFilter=true and filters; see docs/filtering.md)."""
        v.check_topic(topic)
        if self._state in ("stopping", "shutdown"):
            raise IllegalStateError(f"the consumer {self.group} is shut down")
        try:
            self._subs[topic] = codec.Subscription.build(topic, expression, now_ms(), expression_type)
        except ValueError as e:
            raise v.ValidationError(str(e)) from None
        if self._state == "running":
            asyncio.ensure_future(self._after_subscription_change())

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(topic, None)
        if self._state == "running":
            asyncio.ensure_future(self._after_subscription_change())

    def register_listener(self, listener: MessageListener, orderly: bool | None = None) -> None:
        """Set the listener (before start); ``orderly`` switches between concurrent and orderly consumption."""
        if self._state != "created":
            raise IllegalStateError("register the listener before start()")
        self.listener = listener
        if orderly is not None:
            self.orderly = orderly

    def topics(self) -> list[str]:
        return list(self._subs)

    def _all_subscriptions(self) -> dict[str, codec.Subscription]:
        subs = dict(self._subs)
        if self.message_model == MessageModel.CLUSTERING:
            rt = nm.retry_topic(self.group)
            subs.setdefault(rt, codec.Subscription.build(rt, "*", 0))
        return subs

    def consumer_data(self) -> dict[str, Any]:
        return codec.consumer_data(
            self.group, consume_type="CONSUME_PASSIVELY", message_model=self.message_model.value,
            consume_from_where=self.consume_from_where.value, subscriptions=self._all_subscriptions().values())

    def running_info(self, jstack: bool = False) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO's answer, RocketMQ's ConsumerRunningInfo (mqadmin consumerStatus)."""
        return push_running_info(self, self._all_subscriptions().values(), self._pqs, self._started_ms, jstack)

    @property
    def _pqs(self) -> dict[MessageQueue, ProcessQueue]:
        return self._rebalance.process_queues if self._rebalance is not None else {}

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this consumer pulls now."""
        return sorted(self._pqs)

    # lifecycle --------------------------------------------------------------------------------
    def _running(self) -> bool:
        return self._state == "running"

    def _sender(self) -> SendBack:
        if self._send_back is None:
            self._send_back = SendBack(self._instance, self.group,
                                       max_reconsume_times=max_reconsume(self.max_reconsume_times, self.orderly),
                                       delay_level_when_next_consume=self.delay_level_when_next_consume,
                                       stats=self.stats)
        return self._send_back

    def _build(self, listener: MessageListener) -> None:
        """Wire the parts: the rebalance hands queues to the pull service, which feeds the consume service."""
        clustering = self.message_model == MessageModel.CLUSTERING
        runner = self._listener_runner = ListenerRunner(listener, thread_max=self.consume_thread_max,
                                                        inline=self.listener_inline, name=self.group)
        consume: ConsumeConcurrentlyService | ConsumeOrderlyService
        if self.orderly:
            consume = ConsumeOrderlyService(
                self.group, listener=runner, sender=self._sender(), offset_store=self.offset_store,
                message_model=self.message_model, batch_max=self.batch_max, thread_max=self.consume_thread_max,
                max_reconsume_times=max_reconsume(self.max_reconsume_times, True), suspend_time=self.suspend_time,
                stop_timeout=self.shutdown_timeout, running=self._running, stats=self.stats)
            self._locker = QueueLocker(self._instance, self.group) if clustering else None
        else:
            consume = ConsumeConcurrentlyService(
                self.group, listener=runner, sender=self._sender(), offset_store=self.offset_store,
                message_model=self.message_model, batch_max=self.batch_max, workers=self.consume_thread_max,
                retry_local_delay=self.retry_local_delay, running=self._running, stats=self.stats)
        self._consume = consume
        flow = FlowControl(self.pull_threshold_for_queue, self.pull_threshold_size_for_queue, self.max_span,
                           self.orderly)
        self._pull = PullService(
            self._instance, self.group, offset_store=self.offset_store, subscriptions=self._all_subscriptions,
            dispatch=consume.submit, running=self._running, flow=flow, pull_batch_size=self.pull_batch_size,
            suspend_timeout=self.suspend_timeout, pull_timeout=self.pull_timeout, pull_interval=self.pull_interval,
            commit_offsets=clustering, stats=self.stats)
        self._rebalance = RebalancePush(
            self._instance, self.group, message_model=self.message_model, allocate_strategy=self.allocate_strategy,
            consume_from_where=self.consume_from_where, consume_timestamp=self.consume_timestamp,
            offset_store=self.offset_store, subscriptions=self._all_subscriptions,
            owner=_QueuePipeline(self._pull, consume), running=self._running, locker=self._locker,
            interval=self.rebalance_interval, stop_timeout=self.shutdown_timeout)

    async def start(self) -> None:
        """Fetch routes, heartbeat, rebalance, and start pulling."""
        if not self._may_start():
            return
        if self.listener is None:
            raise IllegalStateError("no listener: pass listener= or call register_listener() before start()")
        if not self._subs:
            raise IllegalStateError("no subscription: call subscribe(topic, expression) before start()")
        self._started_ms = now_ms()
        inst = self._instance
        inst.consumers[self.group] = self
        await self.offset_store.load()
        self._build(self.listener)
        assert self._consume is not None and self._rebalance is not None and self._listener_runner is not None
        await inst.start()
        for t in self._all_subscriptions():
            try:
                await inst.update_route(t)
            except MQClientError as e:
                log.warning("route of %s: %s", t, e)
        try:
            await self._check_client_in_broker()
        except MQClientError:  # like Java's START_FAILED: this consumer is done, make a new one
            inst.consumers.pop(self.group, None)
            await inst.shutdown()
            self._listener_runner.shutdown()
            self._state = "shutdown"
            raise
        self._state = "running"
        self._consume.start()
        await inst.send_heartbeat()
        for t in self._all_subscriptions():  # the heartbeat makes the broker create the retry topic
            if t not in inst.routes:
                try:
                    await inst.update_route(t)
                except MQClientError:
                    pass
        await self._rebalance.rebalance()
        self._tasks.append(asyncio.create_task(self._rebalance.run(), name="rebalance"))
        self._tasks.append(asyncio.create_task(self._persist_loop(), name="persist-offsets"))
        if isinstance(self._consume, ConsumeOrderlyService) and self._locker is not None:
            self._tasks.append(asyncio.create_task(self._consume.lock_loop(self._rebalance.lock_all),
                                                   name="lock-queues"))

    async def _check_client_in_broker(self) -> None:
        """MQClientInstance.checkClientInBroker: a SQL92 subscription is sent to the topic's brokers
        (CHECK_CLIENT_CONFIG) before the first heartbeat, so a bad expression fails ``start()`` with
        the broker's position and reason, and a broker without enablePropertyFilter says so."""
        inst = self._instance
        for sub in self._subs.values():
            if sub.expression_type == "TAG":
                continue
            route = inst.routes.get(sub.topic)
            addrs = sorted({a for a in (route.master_addr(qd["brokerName"]) for qd in route.queue_datas) if a}) \
                if route is not None else []
            body = fastjson.dumpb({"clientId": self.client_id, "group": self.group,
                                   "subscriptionData": sub.to_json()})
            for addr in addrs:
                try:
                    await inst.invoke_ok(addr, RC.CHECK_CLIENT_CONFIG, body=body)
                except MQBrokerError as e:
                    raise MQBrokerError(e.code, f"the broker {addr} refused the {sub.expression_type} subscription "
                                                f"of {sub.topic}: {e.remark}", addr) from None

    async def shutdown(self) -> None:
        """Stop pulling, let the listener calls in progress finish, commit offsets, unregister."""
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "stopping"
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        assert self._pull is not None and self._consume is not None and self._listener_runner is not None
        await self._pull.stop_all()
        # finish in-flight listener calls; what is still queued is not committed and comes again later
        await self._consume.shutdown(self.shutdown_timeout)
        pqs = self._pqs
        await self.offset_store.persist(list(pqs))
        if self._locker is not None:
            await self._locker.unlock(list(pqs))
        for pq in pqs.values():
            pq.dropped = True
        self._instance.consumers.pop(self.group, None)
        await self._instance.unregister(consumer_group=self.group)
        if self._send_back is not None:
            await self._send_back.shutdown()
        await self._instance.shutdown()
        self._listener_runner.shutdown()
        self._state = "shutdown"

    async def _after_subscription_change(self) -> None:
        for t in self._all_subscriptions():
            try:
                await self._instance.update_route(t)
            except MQClientError:
                pass
        await self._instance.send_heartbeat()
        self.rebalance_soon()

    # rebalance --------------------------------------------------------------------------------
    def rebalance_soon(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED: rebalance now instead of at the next period."""
        if self._rebalance is not None:
            self._rebalance.rebalance_soon()

    async def rebalance(self) -> None:
        """Work out this client's queues for every subscribed topic and start or stop pulling them."""
        if self._rebalance is not None:
            await self._rebalance.rebalance()

    async def reset_offsets(self, table: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (a rewind by the operator): drop the queues without committing
        what this client had, then pull them again from the offsets the broker now holds."""
        if self._rebalance is not None:
            await self._rebalance.reset_offsets(table)

    # retries ----------------------------------------------------------------------------------
    async def send_message_back(self, msg: MessageExt, delay_level: int | None = None) -> bool:
        """Hand a failed message back for a later retry: CONSUMER_SEND_MSG_BACK, or — when the broker
        refuses or lacks it — re-send it to ``%RETRY%<group>`` ourselves (as the Java client does). After
        ``max_reconsume_times`` the fallback sends it to ``%DLQ%<group>``. False when both failed."""
        return await self._sender().send_message_back(msg, delay_level)

    # offsets ----------------------------------------------------------------------------------
    async def _persist_loop(self) -> None:
        while self._state == "running":
            await asyncio.sleep(self.persist_interval)
            if self._state != "running":
                return  # shutdown() persists the last offsets itself
            try:
                await self.offset_store.persist(list(self._pqs))
            except Exception:
                log.exception("persisting offsets of %s failed", self.group)

    async def persist_offsets(self) -> None:
        """Commit the consumed offsets now (they are committed every ``persist_offset_interval`` anyway)."""
        self._check_running()
        await self.offset_store.persist(list(self._pqs))


class _QueuePipeline:
    """RebalancePush's QueueOwner: a queue allocated to this client is pulled into its process queue and
    consumed from it; a queue lost stops both."""

    def __init__(self, pull: PullService, consume: ConsumeConcurrentlyService | ConsumeOrderlyService) -> None:
        self.pull = pull
        self.consume = consume

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self.pull.start(mq, pq, offset)
        self.consume.start_queue(mq, pq)

    async def stop_queue(self, mq: MessageQueue) -> None:
        self.pull.stop(mq)
        await self.consume.stop_queue(mq)

    def drop_queue(self, mq: MessageQueue) -> None:
        self.pull.stop(mq)
        self.consume.drop_queue(mq)
