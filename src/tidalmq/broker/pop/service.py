"""PopService: pop, ack, change invisible time and notification as async methods. The remoting
processors (``processors``) are a thin layer over it, and a gRPC ReceiveMessage / AckMessage /
ChangeInvisibleDuration can call it directly. Errors are ``PopError`` with RocketMQ's response code.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidalmq.broker.client.consumer_manager import SubscriptionData
from tidalmq.broker.message import InnerMessage
from tidalmq.broker.pop import requeue
from tidalmq.broker.pop.order import OrderKey, OrderLock, OrderLocks
from tidalmq.broker.pop.polling import PopLongPolling
from tidalmq.broker.pop.revive_log import CK_TAG, AckMsg, PopCheckPoint, revive_topic
from tidalmq.broker.topic.topic_config import PERM_READ, PERM_WRITE, TopicConfig
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common import pop_handle as xi
from tidalmq.common.attribute.topic_message_type import TopicMessageType, priority_factor
from tidalmq.common.message import encode_properties
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import POS_QUEUEID, POS_QUEUEOFFSET
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.store.message_store import GetStatus

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.filter.expression_filter import ExpressionFilters
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.schedule.services import ScheduleServices
    from tidalmq.broker.stats import BrokerStats
    from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.broker.transaction.half_service import StoreInternal
    from tidalmq.store.api import MessageStore

log = logging.getLogger(__name__)

MAX_POP_NUMS = 32  # RocketMQ refuses more in one pop
INIT_MODE_MIN, INIT_MODE_MAX = 0, 1  # ConsumeInitMode
REVIVE_QID = 0  # one revive queue: the revive service reads it in order
# One pop in this many reads the retry topic first (RocketMQ's popFromRetryProbability, 20 %), so
# retries are neither starved by a backlog nor starve it.
RETRY_FIRST_EVERY = 5
# How long an orderly queue whose messages go to the DLQ stays lent to nobody, should storing them hang.
DEAD_LETTER_GUARD_MS = 60_000
TOPIC_FILE_NAME_MAX = 255  # a topic is a directory name: its pop retry topic too


class PopError(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _as_read_from(record: memoryview, queue_id: int, queue_offset: int) -> bytes:
    """A copy of a stored record showing the queue it was popped from: a lite topic's message is stored
    under its parent topic's queue, and popped from its LMQ, whose queue id and offset the receipt
    handle (and an ack) must name."""
    out = bytearray(record)
    struct.pack_into(">i", out, POS_QUEUEID, queue_id)
    struct.pack_into(">q", out, POS_QUEUEOFFSET, queue_offset)
    return bytes(out)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class PopRequest:
    group: str
    topic: str
    queue_id: int  # -1: every readable queue of the topic
    max_nums: int
    invisible_time: int  # ms
    poll_time: int = 0  # ms to wait for a message when none is there
    init_mode: int = INIT_MODE_MIN
    exp_type: str = "TAG"
    exp: str = "*"
    order: bool = False


@dataclass(slots=True)
class PopResult:
    pop_time: int
    invisible_time: int
    revive_qid: int = REVIVE_QID
    rest_num: int = 0
    records: list[bytes] = field(default_factory=list)  # stored records, as a pull's body
    start_offsets: list[tuple[str, int, int]] = field(default_factory=list)
    msg_offsets: list[tuple[str, int, list[int]]] = field(default_factory=list)
    order_counts: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.records)


class PopService:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager, filters: ExpressionFilters,
                 stats: BrokerStats, scheduled: ScheduleServices, store_internal: StoreInternal,
                 register_soon: Callable[[], None]) -> None:
        """``store_internal``: the send path, for what the service stores (checkpoints, acks, retries);
        ``register_soon``: tells the NameServers of a retry or dead-letter topic it creates."""
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.filters = filters
        self.stats = stats
        self.scheduled = scheduled
        self.store_internal = store_internal
        self.register_soon = register_soon
        self.store_host_bytes = host_bytes(config.broker_ip1)
        self.revive_topic = revive_topic(config.broker_cluster_name)
        self.order = OrderLocks()
        self.polling = PopLongPolling()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rounds = itertools.count()
        self._queue_start = itertools.count()
        self._priority_pops: dict[tuple[str, str], int] = {}  # (group, topic) -> pops, for priority.factor
        self._background: set[asyncio.Task[None]] = set()

    # lifecycle --------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.topics.create_system_like(self.revive_topic, 1, PERM_READ | PERM_WRITE)

    def on_arrival(self, arrivals: dict[tuple[str, int], int]) -> None:
        """From the reput thread: wake the pops and notifications waiting on these topics."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and self.polling.has_waiters():
            loop.call_soon_threadsafe(self.polling.notify, {t for t, _q in arrivals})

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config; for a lite topic's queue ``%LMQ%$<parent>$<lite>``, one readable queue (0)
        with its parent's permission, when the parent exists and is a LITE topic (docs/grpc.md)."""
        tc = self.topics.get(topic)
        if tc is not None or not topic.startswith(nm.LITE_QUEUE_PREFIX):
            return tc
        names = nm.parse_lite_queue(topic)
        if names is None:
            return None
        parent = self.topics.get(names[0])
        if parent is None or parent.message_type != TopicMessageType.LITE:
            return None
        return TopicConfig(topic, 1, 1, parent.perm, attributes=dict(parent.attributes))

    # pop --------------------------------------------------------------------------------------
    async def pop(self, req: PopRequest) -> PopResult:
        sub = self._check_pop(req)
        retry = xi.pop_retry_topic(req.topic, req.group)
        topics = (req.topic, retry)
        deadline = time.monotonic() + max(0, req.poll_time) / 1000.0
        if req.poll_time > 0 and self.polling.full:
            result = await self._pop_once(req, sub, retry)
            if not result.found:
                raise PopError(ResponseCode.POLLING_FULL, "the broker holds too many polling requests")
            return result
        while True:
            ev = self.polling.register(topics) if req.poll_time > 0 else None
            try:
                result = await self._pop_once(req, sub, retry)
                left = deadline - time.monotonic()
                if result.found or ev is None or left <= 0:
                    return result
                try:
                    async with asyncio.timeout(left):
                        await ev.wait()
                except TimeoutError:
                    return await self._pop_once(req, sub, retry)
            finally:
                if ev is not None:
                    self.polling.unregister(topics, ev)

    def _check_pop(self, req: PopRequest) -> SubscriptionData:
        if not (self.config.broker_permission & PERM_READ):
            raise PopError(ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_ip1}] peeking message is forbidden")
        if not 1 <= req.max_nums <= MAX_POP_NUMS:
            raise PopError(ResponseCode.INVALID_PARAMETER,
                           f"the broker pops 1..{MAX_POP_NUMS} messages at a time, asked {req.max_nums}")
        self._check_invisible(req.invisible_time)
        tc = self.topic_config(req.topic)
        if tc is None:
            raise PopError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{req.topic}] not exist, apply first please!")
        if not tc.readable:
            raise PopError(ResponseCode.NO_PERMISSION, f"the topic[{req.topic}] peeking message is forbidden")
        if req.queue_id >= tc.read_queue_nums or req.queue_id < -1:
            raise PopError(ResponseCode.INVALID_PARAMETER,
                           f"queueId[{req.queue_id}] is illegal, topic:[{req.topic}] "
                           f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        sg = self.groups.find(req.group)
        if sg is None:
            raise PopError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{req.group}] does not exist")
        if not sg.consume_enable:
            raise PopError(ResponseCode.NO_PERMISSION, f"subscription group no permission, {req.group}")
        if not nm.is_lite_queue(req.topic) and len(xi.pop_retry_topic(req.topic, req.group)) > TOPIC_FILE_NAME_MAX:
            raise PopError(ResponseCode.INVALID_PARAMETER,
                           "the group and topic are too long together to name their pop retry topic "
                           f"(%RETRY%<group>_<topic>, at most {TOPIC_FILE_NAME_MAX} characters)")
        sub = SubscriptionData.build(req.topic, req.exp, 0, req.exp_type or "TAG")
        if sub.expression_type != "TAG":
            why = self.filters.check_expression(sub)
            if why is not None:
                raise PopError(ResponseCode.SUBSCRIPTION_PARSE_FAILED, why)
        return sub

    def _check_invisible(self, invisible_time: int) -> None:
        if self.scheduled.timer is None:
            raise PopError(ResponseCode.SERVICE_NOT_AVAILABLE,
                           "pop needs the timer service (timerWheelEnable) to bring back unacked messages")
        max_ms = self.scheduled.timer_max_delay_ms
        if not 0 < invisible_time <= max_ms:
            raise PopError(ResponseCode.INVALID_PARAMETER,
                           f"invisibleTime must be within 1..{max_ms} ms, got {invisible_time}")

    async def _pop_once(self, req: PopRequest, sub: SubscriptionData, retry: str) -> PopResult:
        pop_time = now_ms()
        result = PopResult(pop_time, req.invisible_time)
        tc = self.topic_config(req.topic)
        if tc is None:  # deleted while polling
            return result
        n = tc.read_queue_nums
        # RocketMQ 5.4's priority mode: a PRIORITY topic's queues are its priorities, read highest first.
        by_priority = tc.message_type == TopicMessageType.PRIORITY and not req.order and self._priority_mode(req)
        if req.queue_id >= 0:
            qids = [req.queue_id]
        elif by_priority:
            qids = list(range(n - 1, -1, -1) if self.config.priority_order_asc else range(n))
        else:
            start = next(self._queue_start) % max(n, 1)
            qids = [(start + i) % n for i in range(n)]
        sources: list[tuple[str, list[int], SubscriptionData]] = [(req.topic, qids, sub)]
        rtc = self.topics.get(retry)
        # Orderly messages are never retried through a topic, nor lite topics' (requeue puts them back
        # into their LMQ).
        if rtc is not None and not req.order:
            rsub = SubscriptionData.build(retry, "*")
            rsource = (retry, list(range(rtc.read_queue_nums)), rsub)
            if self._retry_first(by_priority):
                sources.insert(0, rsource)
            else:
                sources.append(rsource)
        cks: list[PopCheckPoint] = []
        for topic, queues, s in sources:
            for q in queues:
                left = req.max_nums - sum(len(o) for _t, _q, o in result.msg_offsets)
                if left <= 0:
                    result.rest_num += self._rest(req.group, topic, q)
                    continue
                ck = self._pop_queue(req, topic, q, s, left, result)
                if ck is not None:
                    cks.append(ck)
        if cks:
            try:
                await asyncio.gather(*(self._put_revive(CK_TAG, ck.encode(), ck.deadline) for ck in cks))
            except PopError:
                # Without its checkpoint a message would be lost if never acked: give the range back.
                for ck in cks:
                    self._give_back(ck)
                raise
        return result

    def _priority_mode(self, req: PopRequest) -> bool:
        """Whether this pop of a PRIORITY topic uses the priority order: the first priority.factor of every
        100 pops of the group on the topic (PopConsumerService counts them the same way; the default 100:
        every pop). The others rotate over the queues, so low priorities are read under a steady high load."""
        sg = self.groups.table.get(req.group)
        factor = priority_factor(sg.attributes if sg is not None else None)
        if factor >= 100:
            return True
        key = (req.group, req.topic)
        n = self._priority_pops.get(key, 0)
        self._priority_pops[key] = n + 1
        return n % 100 < factor

    def _retry_first(self, by_priority: bool) -> bool:
        """Whether this pop reads the retry topic before the topic: one pop in RETRY_FIRST_EVERY; in priority
        mode popFromRetryProbabilityForPriority percent of them (0, the default: retries come last, as
        the lowest priority; over 50: always first), counted as RocketMQ's PopConsumerService counts."""
        if not by_priority:
            return next(self._rounds) % RETRY_FIRST_EVERY == 0
        p = max(0, min(100, self.config.pop_from_retry_probability_for_priority))
        return p > 0 and next(self._rounds) % (100 // p) == 0

    def _rest(self, group: str, topic: str, queue_id: int) -> int:
        store = self.store
        offset = self.offsets.query(group, topic, queue_id)
        return max(0, store.get_max_offset_in_queue(topic, queue_id) - max(offset, 0))

    def _init_offset(self, req: PopRequest, topic: str, queue_id: int) -> int:
        offset = self.offsets.query(req.group, topic, queue_id)
        if offset >= 0:
            return offset
        store = self.store
        if req.init_mode == INIT_MODE_MAX and topic == req.topic:
            offset = store.get_max_offset_in_queue(topic, queue_id)
        else:
            offset = store.get_min_offset_in_queue(topic, queue_id)
        self.offsets.commit(req.group, topic, queue_id, offset)
        return offset

    def _pop_queue(self, req: PopRequest, topic: str, queue_id: int, sub: SubscriptionData, max_nums: int,
                   result: PopResult) -> PopCheckPoint | None:
        """Read one queue into ``result``; the checkpoint to write for what was read (None for orderly
        pops and empty reads). Runs without awaiting, so two pops never read the same range."""
        key: OrderKey = (req.group, topic, queue_id)
        attempts = 0
        if req.order:
            if self.order.busy(key, result.pop_time):
                return None
            lock = self.order.get(key)
            offset = self._init_offset(req, topic, queue_id)
            if lock is not None and not lock.done:  # its time ran out: the same messages again
                if lock.attempts >= requeue.max_times(self, req.group):
                    self._dead_letter_soon(key, lock, result.pop_time)
                    return None
                offset, attempts = lock.first_unacked(), lock.attempts + 1
        else:
            offset = self._init_offset(req, topic, queue_id)
        res = self.store.get_message(req.group, topic, queue_id, offset, max_nums, tag_codes=sub.tag_codes(),
                                  filter=self.filters.message_filter(sub))
        if res.status != GetStatus.FOUND or not res.buffers:
            if res.next_begin_offset > offset and not (req.order and attempts):
                # filtered out, or the queue's head moved past the offset: nothing there for this group
                self.offsets.commit(req.group, topic, queue_id, res.next_begin_offset)
            return None
        offsets = list(res.queue_offsets)
        # Copied: the pop awaits its checkpoint before answering, and a mapped file may go meanwhile.
        if topic.startswith(nm.LITE_QUEUE_PREFIX):
            result.records.extend(_as_read_from(buf, queue_id, qoff) for buf, qoff in zip(res.buffers, offsets, strict=True))
        else:
            result.records.extend(bytes(buf) for buf in res.buffers)
        result.start_offsets.append((topic, queue_id, offset))
        result.msg_offsets.append((topic, queue_id, offsets))
        result.rest_num += max(0, res.max_offset - res.next_begin_offset)
        self.stats.on_get(req.group, topic, res.message_count, res.buffer_total_size)
        if req.order:
            result.order_counts.append((topic, queue_id, attempts))
            self.order.lend(key, OrderLock(result.pop_time, req.invisible_time, offsets,
                                           max(res.next_begin_offset, offsets[-1] + 1), attempts))
            return None
        self.offsets.commit(req.group, topic, queue_id, res.next_begin_offset)
        return PopCheckPoint(topic, queue_id, req.group, offset, result.pop_time, req.invisible_time, offsets,
                             self.config.broker_name)

    def _dead_letter_soon(self, key: OrderKey, lock: OrderLock, now: int) -> None:
        """An orderly lending retried retryMaxTimes: its unacked messages go to the DLQ, then the queue
        moves on. The lock stays (lent to nobody) until they are stored."""
        lock.pop_time, lock.invisible_time = now, DEAD_LETTER_GUARD_MS
        task = asyncio.ensure_future(self._dead_letter(key, lock))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _dead_letter(self, key: OrderKey, lock: OrderLock) -> None:
        group, topic, queue_id = key
        try:
            for offset in sorted(set(lock.offsets) - lock.acked):
                msg = requeue.look(self, topic, queue_id, offset)
                if msg is not None:
                    await requeue.requeue(self, group, topic, msg, lock.pop_time, attempts=lock.attempts, dead=True)
                lock.acked.add(offset)
        except Exception as e:
            lock.invisible_time = 0  # over: the next orderly pop tries again
            log.error("orderly pop: dead-lettering %s@%d for %s failed: %s", topic, queue_id, group, e)
            return
        self.order.release(key, lock)
        self.offsets.commit(group, topic, queue_id, lock.next_offset)
        self.polling.notify((topic,))

    def _give_back(self, ck: PopCheckPoint) -> None:
        offsets = self.offsets
        if ck.offsets and offsets.query(ck.group, ck.topic, ck.queue_id) > ck.start_offset:
            offsets.commit(ck.group, ck.topic, ck.queue_id, ck.start_offset)

    # ack and change invisible time ------------------------------------------------------------
    def _handle(self, group: str, topic: str, queue_id: int, offset: int, extra: str) -> tuple[xi.ExtraInfo, str]:
        """The parsed handle and the topic its message was read from; PopError for a bad one."""
        try:
            info = xi.ExtraInfo.parse(extra)
        except xi.ExtraInfoError as e:
            raise PopError(ResponseCode.INVALID_PARAMETER, f"bad receipt handle (extraInfo): {e}") from None
        if info.queue_id != queue_id:
            raise PopError(ResponseCode.INVALID_PARAMETER,
                           f"the extraInfo is of queue {info.queue_id}, the request of queue {queue_id}")
        return info, self._acked_queue(group, topic, info.retry, queue_id, [offset])

    def _acked_queue(self, group: str, topic: str, retry: str, queue_id: int, offsets: list[int]) -> str:
        """The topic (``topic`` or its pop retry topic, by ``retry``) whose queue holds ``offsets``."""
        try:
            real = xi.real_topic(topic, group, retry)
        except xi.ExtraInfoError as e:
            raise PopError(ResponseCode.INVALID_PARAMETER, f"bad receipt handle (extraInfo): {e}") from None
        tc = self.topic_config(real)
        if tc is None:
            raise PopError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{real}] not exist, apply first please!")
        if not 0 <= queue_id < tc.read_queue_nums:
            raise PopError(ResponseCode.MESSAGE_ILLEGAL,
                           f"queueId[{queue_id}] is illegal, topic:[{real}] topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        lo = self.store.get_min_offset_in_queue(real, queue_id)
        hi = self.store.get_max_offset_in_queue(real, queue_id)
        for offset in offsets:
            if not lo <= offset < hi:
                raise PopError(ResponseCode.NO_MESSAGE, f"offset is illegal, key:{real}@{queue_id}, offset:{offset}, "
                                                       f"minOffset:{lo}, maxOffset:{hi}")
        return real

    async def ack(self, group: str, topic: str, queue_id: int, offset: int, extra: str) -> None:
        info, real = self._handle(group, topic, queue_id, offset, extra)
        await self._ack(AckMsg(real, queue_id, group, info.ck_queue_offset, info.pop_time, (offset,),
                               info.broker_name), info.deadline, topic)

    async def batch_ack(self, group: str, topic: str, retry: str, queue_id: int, start_offset: int, pop_time: int,
                        invisible_time: int, offsets: list[int]) -> None:
        """Acks of several messages of one pop (one checkpoint): BATCH_ACK_MESSAGE's BatchAck."""
        if not offsets:
            return
        real = self._acked_queue(group, topic, retry, queue_id, offsets)
        await self._ack(AckMsg(real, queue_id, group, start_offset, pop_time, tuple(offsets),
                               self.config.broker_name), pop_time + invisible_time, topic)

    async def _ack(self, ack: AckMsg, deadline: int, topic: str) -> None:
        key: OrderKey = (ack.group, ack.topic, ack.queue_id)
        if self.order.holds(key, ack.pop_time):
            for offset in ack.ack_offsets:
                commit = self.order.ack(key, ack.pop_time, offset)
                if commit is not None:
                    self.offsets.commit(ack.group, ack.topic, ack.queue_id, commit)
                    self.polling.notify((ack.topic, topic))  # the next message of the queue may be popped now
            return
        await self._put_revive(ack.tag, ack.encode(), deadline)

    async def change_invisible(self, group: str, topic: str, queue_id: int, offset: int, extra: str,
                               invisible_time: int) -> xi.ExtraInfo:
        """The message becomes visible ``invisible_time`` ms from now; returns its new handle (the old
        one no longer acks it)."""
        self._check_invisible(invisible_time)
        info, real = self._handle(group, topic, queue_id, offset, extra)
        pop_time = now_ms()
        new = xi.ExtraInfo(offset, pop_time, invisible_time, REVIVE_QID, info.retry, info.broker_name, queue_id, offset)
        if self.order.change_invisible((group, real, queue_id), info.pop_time, pop_time, invisible_time):
            return new
        # A checkpoint of its own, then the old one acked: the message is covered at every moment.
        ck = PopCheckPoint(real, queue_id, group, offset, pop_time, invisible_time, [offset], info.broker_name)
        await self._put_revive(CK_TAG, ck.encode(), ck.deadline)
        old = AckMsg(real, queue_id, group, info.ck_queue_offset, info.pop_time, (offset,), info.broker_name)
        await self._put_revive(old.tag, old.encode(), info.deadline)
        return new

    # notification -----------------------------------------------------------------------------
    async def notification(self, group: str, topic: str, queue_id: int, poll_time: int, order: bool = False) -> bool:
        """True as soon as the group has something to pop from the topic (or its retry topic), False when
        ``poll_time`` ms pass first."""
        tc = self.topic_config(topic)
        if tc is None:
            raise PopError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if queue_id >= tc.read_queue_nums or queue_id < -1:
            raise PopError(ResponseCode.INVALID_PARAMETER, f"queueId[{queue_id}] is illegal, topic:[{topic}]")
        if self.groups.find(group) is None:
            raise PopError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
        retry = xi.pop_retry_topic(topic, group)
        topics = (topic, retry)
        if self.polling.full:
            return self._has_message(group, topic, queue_id, retry, order)
        ev = self.polling.register(topics)
        try:
            if self._has_message(group, topic, queue_id, retry, order):
                return True
            try:
                async with asyncio.timeout(max(0, poll_time) / 1000.0):
                    await ev.wait()
            except TimeoutError:
                return self._has_message(group, topic, queue_id, retry, order)
            # Woken by an arrival: true even if another consumer popped it meanwhile (as RocketMQ answers).
            return True
        finally:
            self.polling.unregister(topics, ev)

    def _has_message(self, group: str, topic: str, queue_id: int, retry: str, order: bool) -> bool:
        tc = self.topic_config(topic)
        qids = range(tc.read_queue_nums) if tc is not None and queue_id < 0 else [queue_id]
        now = now_ms()
        for q in qids:
            if order and self.order.busy((group, topic, q), now):
                continue
            if self._rest(group, topic, q) > 0:
                return True
        rtc = self.topics.get(retry)
        return rtc is not None and not order and any(self._rest(group, retry, q) > 0 for q in range(rtc.read_queue_nums))

    # the revive topic -------------------------------------------------------------------------
    async def _put_revive(self, tag: str, body: bytes, deliver_ms: int) -> None:
        """A checkpoint or ack into the revive topic, due at ``deliver_ms`` through the timer."""
        props = {mc.TAGS: tag, mc.WAIT_STORE_MSG_OK: "true"}
        if deliver_ms > now_ms():
            props[mc.TIMER_DELIVER_MS] = str(deliver_ms)
        await self.put_internal(InnerMessage(self.revive_topic, REVIVE_QID, body, 0, encode_properties(props), 0,
                                             now_ms(), self.store_host_bytes, self.config.listen_port))

    async def put_internal(self, msg: InnerMessage) -> None:
        """Store a message the broker built, through the send path's rewrites; PopError if refused."""
        req = RemotingCommand(code=RC.SEND_MESSAGE)
        resp = await self.store_internal(req, msg)
        if resp.code != ResponseCode.SUCCESS:
            raise PopError(resp.code if resp.code else ResponseCode.SYSTEM_ERROR,
                           f"storing into {msg.topic} failed: {resp.remark}")
