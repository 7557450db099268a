"""PushConsumer (DefaultMQPushConsumer): rebalance, long-polling pulls, flow control, concurrent or
orderly consumption, retries, offsets — the broker pushes nothing, the consumer pulls for you."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from tidalmq.client import codec
from tidalmq.client import validators as v
from tidalmq.client.allocate import AllocateStrategy, allocate_averagely
from tidalmq.client.errors import IllegalStateError, MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    now_ms,
)
from tidalmq.client.offset_store import (
    NOT_FOUND,
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
)
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.producer import Producer
from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.tls import TlsOption

log = logging.getLogger(__name__)

MessageListener = Callable[[list[MessageExt]], "ConsumeResult | None | Awaitable[ConsumeResult | None]"]
"""``listener(messages) -> ConsumeResult``: a plain function (run in a thread pool unless
``listener_inline``) or a coroutine function (run on the event loop). ``None`` means SUCCESS; an
exception means RECONSUME_LATER (concurrent) or SUSPEND_CURRENT_QUEUE_A_MOMENT (orderly)."""

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
PULL_DELAY_FLOW_CONTROL = 0.05
PULL_DELAY_EXCEPTION = 3.0
PULL_DELAY_NOT_LOCKED = 3.0
LOCK_INTERVAL = 20.0
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


class PushConsumer:
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
                 poll_name_server_interval: float = 30.0, tls: TlsOption = None) -> None:
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
        self._incomplete_rebalance = False
        self.listener_inline = listener_inline
        self.listener = listener
        self._instance = ClientInstance(namesrv_addr, instance_name=instance_name, client_ip=client_ip,
                                        heartbeat_broker_interval=heartbeat_interval,
                                        poll_name_server_interval=poll_name_server_interval, tls=tls)
        self.offset_store: OffsetStore
        if self.message_model == MessageModel.BROADCASTING:
            self.offset_store = LocalFileOffsetStore(offset_store_dir, self._instance.client_id, group)
        else:
            self.offset_store = RemoteBrokerOffsetStore(self._instance, group)
        self._subs: dict[str, codec.Subscription] = {}
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[Any]] = {}
        self._orderly_tasks: dict[MessageQueue, asyncio.Task[Any]] = {}
        self._orderly_wake: dict[MessageQueue, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._workers: list[asyncio.Task[Any]] = []
        self._work: asyncio.Queue[tuple[ProcessQueue, MessageQueue, list[MessageExt]] | None] | None = None
        self._orderly_sem: asyncio.Semaphore | None = None
        self._rebalance_event: asyncio.Event | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._inner_producer: Producer | None = None
        self._later: set[asyncio.TimerHandle] = set()
        self._broker_locks = True  # False once a broker said it does not know LOCK_BATCH_MQ
        self._state = "created"
        self.stats = {"consumed_ok": 0, "consumed_failed": 0, "sent_back": 0, "sent_back_fallback": 0,
                      "retried_locally": 0, "pulls": 0}

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

    def running_info(self) -> dict[str, Any]:
        return {
            "properties": {"consumeType": "CONSUME_PASSIVELY", "consumeOrderly": str(self.orderly).lower(),
                           "PROP_CLIENT_VERSION": "TidalMQ", "PROP_CONSUMER_START_TIMESTAMP": str(self._started_ms)},
            "subscriptionSet": [s.to_json() for s in self._all_subscriptions().values()],
            "mqTable": {}, "statusTable": {}, "jstack": "",
        }

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this consumer pulls now."""
        return sorted(self._pqs)

    # lifecycle --------------------------------------------------------------------------------
    def _check_running(self) -> None:
        if self._state != "running":
            raise IllegalStateError(f"the consumer {self.group} is not running (state {self._state})")

    async def start(self) -> None:
        """Fetch routes, heartbeat, rebalance, and start pulling."""
        if self._state == "running":
            return
        if self._state != "created":
            raise IllegalStateError(f"the consumer {self.group} has been shut down and cannot start again")
        if self.listener is None:
            raise IllegalStateError("no listener: pass listener= or call register_listener() before start()")
        if not self._subs:
            raise IllegalStateError("no subscription: call subscribe(topic, expression) before start()")
        self._started_ms = now_ms()
        inst = self._instance
        inst.consumers[self.group] = self
        await self.offset_store.load()
        self._rebalance_event = asyncio.Event()
        self._work = asyncio.Queue()
        self._orderly_sem = asyncio.Semaphore(self.consume_thread_max)
        if not self.listener_inline and not _is_async(self.listener):
            self._executor = concurrent.futures.ThreadPoolExecutor(self.consume_thread_max,
                                                                   thread_name_prefix=f"consume-{self.group}")
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
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None
            self._state = "shutdown"
            raise
        self._state = "running"
        if not self.orderly:
            self._workers = [asyncio.create_task(self._worker(), name=f"consume-{i}")
                             for i in range(self.consume_thread_max)]
        await inst.send_heartbeat()
        for t in self._all_subscriptions():  # the heartbeat makes the broker create the retry topic
            if t not in inst.routes:
                try:
                    await inst.update_route(t)
                except MQClientError:
                    pass
        await self.rebalance()
        self._tasks.append(asyncio.create_task(self._rebalance_loop(), name="rebalance"))
        self._tasks.append(asyncio.create_task(self._persist_loop(), name="persist-offsets"))
        if self.orderly and self.message_model == MessageModel.CLUSTERING:
            self._tasks.append(asyncio.create_task(self._lock_loop(), name="lock-queues"))

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
        for h in self._later:
            h.cancel()
        self._later.clear()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        # A rebalance that was under way when we stopped may still have started pulls: cancel until
        # none is left.
        while self._pull_tasks:
            pulls = list(self._pull_tasks.values())
            self._pull_tasks.clear()
            for t in pulls:
                t.cancel()
            await asyncio.gather(*pulls, return_exceptions=True)
        # finish in-flight listener calls; what is still queued is not committed and comes again later
        if self._work is not None:
            while not self._work.empty():
                self._work.get_nowait()
            for _ in self._workers:
                self._work.put_nowait(None)
        for ev in self._orderly_wake.values():
            ev.set()
        waiting = [*self._workers, *self._orderly_tasks.values()]
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=self.shutdown_timeout)
            for t in pending:
                t.cancel()
        await self.offset_store.persist(list(self._pqs))
        if self.orderly and self.message_model == MessageModel.CLUSTERING:
            await self._unlock(list(self._pqs))
        for pq in self._pqs.values():
            pq.dropped = True
        self._instance.consumers.pop(self.group, None)
        await self._instance.unregister(consumer_group=self.group)
        if self._inner_producer is not None:
            await self._inner_producer.shutdown()
        await self._instance.shutdown()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._state = "shutdown"

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

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
        if self._rebalance_event is not None:
            self._rebalance_event.set()

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_event is not None
        # Each background loop ends once the consumer stops, even if the cancellation by shutdown() is
        # lost (Python 3.11's asyncio.wait_for drops one that arrives with the result it waits for).
        while self._state == "running":
            # a topic without a route yet (a retry topic the broker just created): look again soon
            wait = min(1.0, self.rebalance_interval) if self._incomplete_rebalance else self.rebalance_interval
            try:
                # not wait_for: a NOTIFY_CONSUMER_IDS_CHANGED setting the event in the loop iteration
                # of shutdown()'s cancel would make it return True and drop the cancel
                async with asyncio.timeout(wait):
                    await self._rebalance_event.wait()
            except TimeoutError:
                pass
            self._rebalance_event.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance of %s failed", self.group)

    async def rebalance(self) -> None:
        """Work out this client's queues for every subscribed topic and start or stop pulling them."""
        if self._state != "running":
            return
        wanted: dict[MessageQueue, None] = {}
        covered_topics: set[str] = set()
        self._incomplete_rebalance = False
        for topic in self._all_subscriptions():
            route = self._instance.routes.get(topic)
            if route is None:
                try:
                    route = await self._instance.update_route(topic)
                except MQClientError as e:
                    log.info("rebalance %s: no route of %s: %s", self.group, topic, e)
                if route is None:
                    self._incomplete_rebalance = True
                    continue
            mqs = route.subscribe_queues()
            if self.message_model == MessageModel.BROADCASTING:
                mine = mqs
            else:
                cids = sorted(await self._instance.find_consumer_ids(topic, self.group))
                if not cids:
                    self._incomplete_rebalance = True
                    continue
                try:
                    mine = self.allocate_strategy(self.group, self.client_id, mqs, cids)
                except Exception:
                    log.exception("allocate strategy failed")
                    continue
            covered_topics.add(topic)
            for mq in mine:
                wanted[mq] = None
        for mq in list(self._pqs):
            if mq.topic in covered_topics and mq not in wanted or mq.topic not in self._all_subscriptions():
                await self._remove_queue(mq)
        new = [mq for mq in wanted if mq not in self._pqs]
        if self.orderly and self.message_model == MessageModel.CLUSTERING and new:
            locked = await self._lock(new)
        else:
            locked = set(new)
        for mq in new:
            await self._add_queue(mq, mq in locked)

    async def _add_queue(self, mq: MessageQueue, locked: bool) -> None:
        if self._state != "running":
            return
        offset = await self._compute_pull_from_where(mq)
        if self._state != "running":
            return  # stopped while we asked the broker where to start
        if offset < 0:
            log.warning("rebalance %s: cannot find where to consume %s from, will try again", self.group, mq)
            return
        pq = ProcessQueue()
        pq.locked = locked
        pq.last_lock_ts = time.monotonic()
        self._pqs[mq] = pq
        self.offset_store.update(mq, offset)
        old = self._pull_tasks.get(mq)
        if old is not None:  # two rebalances raced for the same queue: one pull loop per queue
            old.cancel()
        self._pull_tasks[mq] = asyncio.create_task(self._pull_loop(mq, pq, offset), name=f"pull-{mq}")
        if self.orderly:
            self._orderly_wake[mq] = asyncio.Event()
            self._orderly_tasks[mq] = asyncio.create_task(self._orderly_loop(mq, pq), name=f"orderly-{mq}")
        log.info("%s: pulling %s from offset %d", self.group, mq, offset)

    async def reset_offsets(self, table: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (a rewind by the operator): drop the queues without committing
        what this client had, then pull them again from the offsets the broker now holds."""
        for mq in table:
            pq = self._pqs.pop(mq, None)
            if pq is not None:
                pq.dropped = True
            for tasks in (self._pull_tasks, self._orderly_tasks):
                task = tasks.pop(mq, None)
                if task is not None:
                    task.cancel()
            ev = self._orderly_wake.pop(mq, None)
            if ev is not None:
                ev.set()
            self.offset_store.remove(mq)
        log.info("%s: offsets reset by the broker for %d queues", self.group, len(table))
        self.rebalance_soon()

    async def _remove_queue(self, mq: MessageQueue) -> None:
        pq = self._pqs.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        ot = self._orderly_tasks.pop(mq, None)
        ev = self._orderly_wake.pop(mq, None)
        if ot is not None:
            if ev is not None:
                ev.set()
            try:  # the batch in progress (asyncio.wait, unlike wait_for, never drops a cancel of this task)
                done, _ = await asyncio.wait({ot}, timeout=self.shutdown_timeout)
            except asyncio.CancelledError:
                ot.cancel()
                raise
            if not done:
                ot.cancel()
        await self.offset_store.persist([mq])
        self.offset_store.remove(mq)
        if self.orderly and self.message_model == MessageModel.CLUSTERING:
            await self._unlock([mq])
        log.info("%s: stopped pulling %s", self.group, mq)

    async def _compute_pull_from_where(self, mq: MessageQueue) -> int:
        """RebalancePushImpl.computePullFromWhere."""
        last = await self.offset_store.read(mq, from_store=True)
        if last >= 0:
            return last
        if last != NOT_FOUND:
            return -1
        retry = mq.topic.startswith(nm.RETRY_GROUP_TOPIC_PREFIX)
        cfw = self.consume_from_where
        try:
            if cfw == ConsumeFromWhere.FIRST_OFFSET:
                return 0
            if cfw == ConsumeFromWhere.LAST_OFFSET or retry:
                return 0 if retry else await self._queue_offset(mq, RC.GET_MAX_OFFSET)
            return await self._search_offset(mq, self.consume_timestamp)
        except MQClientError as e:
            log.warning("offset of %s: %s", mq, e)
            return -1

    async def _queue_offset(self, mq: MessageQueue, code: int) -> int:
        addr = await self._addr(mq)
        resp = await self._instance.invoke_ok(addr, code, {"topic": mq.topic, "queueId": str(mq.queue_id)})
        return int(resp.ext_fields["offset"])

    async def _search_offset(self, mq: MessageQueue, ts: int) -> int:
        addr = await self._addr(mq)
        resp = await self._instance.invoke_ok(addr, RC.SEARCH_OFFSET_BY_TIMESTAMP,
                                              {"topic": mq.topic, "queueId": str(mq.queue_id), "timestamp": str(ts)})
        return int(resp.ext_fields["offset"])

    async def _addr(self, mq: MessageQueue) -> str:
        addr = self._instance.master_addr(mq.broker_name)
        if addr is None:
            await self._instance.update_route(mq.topic)
            addr = self._instance.master_addr(mq.broker_name)
        if addr is None:
            raise MQClientError(10003, f"The broker[{mq.broker_name}] not exist")
        return addr

    # orderly locks (clustering) ---------------------------------------------------------------
    async def _lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ per broker. A broker without the request: rely on rebalance alone (documented)."""
        if not self._broker_locks:
            return set(mqs)
        out: set[MessageQueue] = set()
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, group_mqs in by_broker.items():
            body = fastjson.dumpb({"consumerGroup": self.group, "clientId": self.client_id,
                                   "mqSet": [_mq_json(m) for m in group_mqs]})
            try:
                addr = await self._addr(group_mqs[0])
                resp = await self._instance.invoke_ok(addr, RC.LOCK_BATCH_MQ, body=body)
            except MQBrokerError as e:
                if e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    log.info("broker %s has no LOCK_BATCH_MQ: orderly consumption relies on rebalance alone", broker)
                    self._broker_locks = False
                    return set(mqs)
                log.warning("lock %s failed: %s", group_mqs, e)
                continue
            except MQClientError as e:
                log.warning("lock %s failed: %s", group_mqs, e)
                continue
            data = fastjson.loads(resp.body_bytes() or b"{}")
            for m in data.get("lockOKMQSet") or []:
                out.add(MessageQueue(m["topic"], m["brokerName"], int(m["queueId"])))
        return out

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        if not self._broker_locks or not mqs:
            return
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for group_mqs in by_broker.values():
            body = fastjson.dumpb({"consumerGroup": self.group, "clientId": self.client_id,
                                   "mqSet": [_mq_json(m) for m in group_mqs]})
            try:
                addr = await self._addr(group_mqs[0])
                await self._instance.invoke_ok(addr, RC.UNLOCK_BATCH_MQ, body=body, timeout=1.0)
            except MQClientError as e:
                log.info("unlock %s failed: %s", group_mqs, e)

    async def _lock_loop(self) -> None:
        while self._state == "running":
            await asyncio.sleep(LOCK_INTERVAL)
            mqs = list(self._pqs)
            if not mqs or not self._broker_locks or self._state != "running":
                continue
            ok = await self._lock(mqs)
            for mq, pq in list(self._pqs.items()):
                pq.locked = mq in ok
                if pq.locked:
                    pq.last_lock_ts = time.monotonic()

    # pulling ----------------------------------------------------------------------------------
    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        sub = self._all_subscriptions().get(mq.topic) or codec.Subscription.build(mq.topic, "*", 0)
        next_offset = offset
        clustering = self.message_model == MessageModel.CLUSTERING
        while not pq.dropped and self._state == "running":
            if pq.count > self.pull_threshold_for_queue or pq.msg_size > self.pull_threshold_size_for_queue:
                await asyncio.sleep(PULL_DELAY_FLOW_CONTROL)
                continue
            if not self.orderly and pq.max_span() > self.max_span:
                await asyncio.sleep(PULL_DELAY_FLOW_CONTROL)
                continue
            if self.orderly and not pq.locked:
                await asyncio.sleep(PULL_DELAY_NOT_LOCKED)
                continue
            sub = self._all_subscriptions().get(mq.topic) or sub
            commit = self.offset_store.read_memory(mq) if clustering else 0
            sysflag = FLAG_SUSPEND | FLAG_SUBSCRIPTION | (FLAG_COMMIT_OFFSET if commit > 0 else 0)
            ext = {
                "consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id),
                "queueOffset": str(next_offset), "maxMsgNums": str(self.pull_batch_size), "sysFlag": str(sysflag),
                "commitOffset": str(max(commit, 0)), "suspendTimeoutMillis": str(int(self.suspend_timeout * 1000)),
                "subscription": sub.expression, "subVersion": str(sub.version),
                "expressionType": sub.expression_type,
            }
            try:
                addr = await self._addr(mq)
                resp = await self._instance.invoke_ok(
                    addr, RC.PULL_MESSAGE, ext, timeout=self.pull_timeout,
                    ok=(ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                        ResponseCode.PULL_OFFSET_MOVED))
            except asyncio.CancelledError:
                raise
            except MQClientError as e:
                if self._state == "running" and not pq.dropped:
                    log.warning("pull %s failed: %s", mq, e)
                await asyncio.sleep(PULL_DELAY_EXCEPTION)
                continue
            self.stats["pulls"] += 1
            pq.last_pull_ts = time.monotonic()
            code = resp.code
            nbo = int(resp.ext_fields.get("nextBeginOffset", next_offset))
            if code == ResponseCode.SUCCESS:
                msgs = codec.decode_messages(resp.body_bytes(), mq.broker_name)
                if not sub.matches_all:
                    msgs = [m for m in msgs if sub.matches(m.tags)]
                next_offset = nbo
                if msgs and not pq.dropped:
                    pq.put(msgs)
                    self._dispatch(mq, pq)
                elif not msgs and pq.count == 0:
                    self.offset_store.update(mq, next_offset, increase_only=True)
            elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                next_offset = nbo
                if pq.count == 0:  # correctTagsOffset
                    self.offset_store.update(mq, next_offset, increase_only=True)
            else:  # PULL_OFFSET_MOVED: start again where the broker says
                log.warning("%s: offset %d of %s is illegal, moving to %d (%s)", self.group, next_offset, mq, nbo,
                            resp.remark)
                next_offset = nbo
                self.offset_store.update(mq, nbo)
                await self.offset_store.persist([mq])
            if self.pull_interval > 0:
                await asyncio.sleep(self.pull_interval)

    # consuming --------------------------------------------------------------------------------
    def _dispatch(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        if self.orderly:
            ev = self._orderly_wake.get(mq)
            if ev is not None:
                ev.set()
            return
        assert self._work is not None
        while pq.pending:
            self._work.put_nowait((pq, mq, pq.take_pending(self.batch_max)))

    def _reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        rt = nm.retry_topic(self.group)
        for m in msgs:
            real = m.properties.get(mc.RETRY_TOPIC)
            if real and m.topic == rt:
                m.topic = real

    async def _call_listener(self, msgs: list[MessageExt]) -> ConsumeResult | None:
        fn = self.listener
        assert fn is not None
        if self._executor is not None:
            out = await asyncio.get_running_loop().run_in_executor(self._executor, fn, msgs)
        else:
            out = fn(msgs)
        if inspect.isawaitable(out):
            out = await out
        return None if out is None else ConsumeResult(out)

    async def _worker(self) -> None:
        assert self._work is not None
        while True:
            item = await self._work.get()
            if item is None:
                return
            pq, mq, msgs = item
            if pq.dropped:
                continue
            await self._consume_concurrently(pq, mq, msgs)

    async def _consume_concurrently(self, pq: ProcessQueue, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        self._reset_retry_topic(msgs)
        try:
            result = await self._call_listener(msgs)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("listener of %s failed on %d message(s): %r", self.group, len(msgs), e)
            result = ConsumeResult.RECONSUME_LATER
        if result in (None, ConsumeResult.SUCCESS):
            self.stats["consumed_ok"] += len(msgs)
            done = msgs
        else:
            self.stats["consumed_failed"] += len(msgs)
            if self.message_model == MessageModel.BROADCASTING:
                log.warning("BROADCASTING: consuming %d message(s) failed, dropped (no retry)", len(msgs))
                done = msgs
            else:
                done, failed = [], []
                for m in msgs:
                    (done if await self.send_message_back(m) else failed).append(m)
                if failed:
                    self._consume_later(pq, mq, failed)
        offset = pq.remove(done) if done else -1
        if offset >= 0 and not pq.dropped:
            self.offset_store.update(mq, offset, increase_only=True)

    def _consume_later(self, pq: ProcessQueue, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        """Neither the broker nor the retry topic took the messages back: consume them again here."""
        self.stats["retried_locally"] += len(msgs)
        for m in msgs:
            m.reconsume_times += 1
        loop = asyncio.get_running_loop()

        def again() -> None:
            self._later.discard(handle)
            if self._state == "running" and not pq.dropped and self._work is not None:
                self._work.put_nowait((pq, mq, msgs))

        handle = loop.call_later(self.retry_local_delay, again)
        self._later.add(handle)

    def _max_reconsume(self) -> int:
        if self.max_reconsume_times >= 0:
            return self.max_reconsume_times
        return 0x7FFFFFFF if self.orderly else 16

    async def send_message_back(self, msg: MessageExt, delay_level: int | None = None) -> bool:
        """Hand a failed message back for a later retry: CONSUMER_SEND_MSG_BACK, or — when the broker
        refuses or lacks it — re-send it to ``%RETRY%<group>`` ourselves (as the Java client does). After
        ``max_reconsume_times`` the fallback sends it to ``%DLQ%<group>``. False when both failed."""
        max_times = self._max_reconsume()
        if delay_level is None:
            delay_level = self.delay_level_when_next_consume
        ext = {
            "offset": str(msg.commit_log_offset), "group": self.group, "delayLevel": str(delay_level),
            "originMsgId": msg.msg_id, "originTopic": msg.topic, "unitMode": "false",
            "maxReconsumeTimes": str(max_times),
        }
        try:
            addr = await self._addr(MessageQueue(msg.topic, msg.broker_name, msg.queue_id))
            await self._instance.invoke_ok(addr, RC.CONSUMER_SEND_MSG_BACK, ext, timeout=5.0)
            self.stats["sent_back"] += 1
            return True
        except MQClientError as e:
            if not (isinstance(e, MQBrokerError) and e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
                log.info("CONSUMER_SEND_MSG_BACK of %s failed (%s), re-sending to the retry topic", msg.msg_id, e)
        try:
            producer = await self._producer()
            times = msg.reconsume_times + 1
            props = dict(msg.properties)
            props.pop(mc.DELAY, None)
            for k in (mc.TRAN_MSG, mc.PGROUP, mc.MIN_OFFSET, mc.MAX_OFFSET):
                props.pop(k, None)
            props.setdefault(mc.ORIGIN_MESSAGE_ID, msg.msg_id)
            props[mc.RETRY_TOPIC] = msg.topic
            props[mc.RECONSUME_TIME] = str(times)
            props[mc.MAX_RECONSUME_TIMES] = str(max_times)
            if times > max_times or delay_level < 0:
                topic = nm.dlq_topic(self.group)
            else:
                topic = nm.retry_topic(self.group)
                level = delay_level if delay_level > 0 else 3 + msg.reconsume_times
                props[mc.DELAY] = str(min(level, producer.max_delay_level))
            new = Message(topic, msg.body, flag=msg.flag, properties=props)
            await producer.send(new)
            self.stats["sent_back_fallback"] += 1
            return True
        except MQClientError as e:
            log.warning("re-sending %s to the retry topic failed: %s", msg.msg_id, e)
            return False

    async def _producer(self) -> Producer:
        if self._inner_producer is None:
            p = Producer(INNER_PRODUCER_GROUP, instance=self._instance)
            await p.start()
            self._inner_producer = p
        return self._inner_producer

    async def _orderly_loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        ev = self._orderly_wake[mq]
        sem = self._orderly_sem
        assert sem is not None
        clustering = self.message_model == MessageModel.CLUSTERING
        while True:
            if not pq.pending:
                if self._state != "running" or pq.dropped:
                    return
                ev.clear()
                await ev.wait()
                continue
            if self._state != "running" or pq.dropped:
                return
            if clustering and not pq.locked:
                await asyncio.sleep(0.1)
                continue
            async with sem:
                msgs = pq.take(self.batch_max)
                self._reset_retry_topic(msgs)
                try:
                    result = await self._call_listener(msgs)
                except asyncio.CancelledError:
                    pq.rollback()
                    raise
                except Exception as e:
                    log.warning("orderly listener of %s failed: %r", self.group, e)
                    result = ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if result == ConsumeResult.RECONSUME_LATER:
                result = ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if result in (None, ConsumeResult.SUCCESS):
                self.stats["consumed_ok"] += len(msgs)
                offset = pq.commit()
                if offset >= 0 and not pq.dropped:
                    self.offset_store.update(mq, offset)
                continue
            self.stats["consumed_failed"] += len(msgs)
            if await self._orderly_give_up(msgs):
                offset = pq.commit()
                if offset >= 0 and not pq.dropped:
                    self.offset_store.update(mq, offset)
                continue
            pq.rollback()
            ev.clear()
            try:  # suspend this queue a moment; a shutdown or drop wakes it early
                await asyncio.wait_for(ev.wait(), self.suspend_time)
            except TimeoutError:
                pass

    async def _orderly_give_up(self, msgs: list[MessageExt]) -> bool:
        """checkReconsumeTimes: past ``max_reconsume_times`` a message goes to the DLQ (via send-back)."""
        max_times = self._max_reconsume()
        over = [m for m in msgs if m.reconsume_times >= max_times]
        for m in msgs:
            m.reconsume_times += 1
            m.properties[mc.RECONSUME_TIME] = str(m.reconsume_times)
        if not over:
            return False
        if self.message_model == MessageModel.BROADCASTING:
            return True
        for m in over:
            if not await self.send_message_back(m):
                return False
        return len(over) == len(msgs)

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


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(type(fn).__call__))
