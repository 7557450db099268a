"""RebalancePushImpl: which queues are this client's, and the process queue of each.

Every ``interval`` and at once on NOTIFY_CONSUMER_IDS_CHANGED (``rebalance_soon``) the queues of each
subscribed topic are allocated among the group's clients (clustering) or all taken (broadcasting). The
difference with the process queue table is applied: a queue gained gets a process queue and its
``QueueOwner.start_queue`` (pulling and consuming start); a queue lost is marked dropped, its owner stops
it (waiting for an orderly batch in progress), its offset is persisted and its lock released."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from tidalmq.client import codec
from tidalmq.client.allocate import AllocateStrategy
from tidalmq.client.broker_addr import find_master_addr
from tidalmq.client.errors import MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import ConsumeFromWhere, MessageModel, MessageQueue
from tidalmq.client.offset_store import NOT_FOUND, OffsetStore
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.push.queue_lock import QueueLocker
from tidalmq.common import naming as nm
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.protocol import broker_headers as bh

log = logging.getLogger(__name__)

INCOMPLETE_RETRY = 1.0  # a topic without a route or members yet: look again this soon


class QueueOwner(Protocol):
    """What runs on a queue once it is allocated: the pull loop and the consume service."""

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None: ...

    async def stop_queue(self, mq: MessageQueue) -> None:
        """The queue went to another client: stop, letting an orderly batch in progress finish."""

    def drop_queue(self, mq: MessageQueue) -> None:
        """The offsets were reset: stop at once, nothing of what is in flight will be committed."""


class RebalancePush:
    """``locker`` is given for orderly clustering consumers only: new queues are locked before they
    are pulled, lost ones unlocked."""

    def __init__(self, instance: ClientInstance, group: str, *, message_model: MessageModel,
                 allocate_strategy: AllocateStrategy, consume_from_where: ConsumeFromWhere,
                 consume_timestamp: int, offset_store: OffsetStore,
                 subscriptions: Callable[[], dict[str, codec.Subscription]], owner: QueueOwner,
                 running: Callable[[], bool], locker: QueueLocker | None = None, interval: float = 20.0,
                 stop_timeout: float = 30.0) -> None:
        self.instance = instance
        self.group = group
        self.message_model = message_model
        self.allocate_strategy = allocate_strategy
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self.offset_store = offset_store
        self.subscriptions = subscriptions
        self.owner = owner
        self.running = running
        self.locker = locker
        self.interval = interval
        self.stop_timeout = stop_timeout
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.incomplete = False  # some topic could not be allocated: the next round comes sooner
        self._event = asyncio.Event()

    # when ---------------------------------------------------------------------------------------
    def rebalance_soon(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED: rebalance now instead of at the next period."""
        self._event.set()

    async def run(self) -> None:
        """The periodic rebalance. It ends once the consumer stops even if the cancel by shutdown()
        is lost (Python 3.11's asyncio.wait_for drops one that arrives with the result it waits for)."""
        while self.running():
            wait = min(INCOMPLETE_RETRY, self.interval) if self.incomplete else self.interval
            try:
                # not wait_for: a NOTIFY_CONSUMER_IDS_CHANGED setting the event in the loop iteration
                # of shutdown()'s cancel would make it return True and drop the cancel
                async with asyncio.timeout(wait):
                    await self._event.wait()
            except TimeoutError:
                pass
            self._event.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance of %s failed", self.group)

    # what ---------------------------------------------------------------------------------------
    async def allocate(self) -> tuple[dict[MessageQueue, None], set[str]]:
        """This client's queues (in allocation order), and the topics whose allocation is known: a
        topic without a route or without members is left as it is until a later round."""
        wanted: dict[MessageQueue, None] = {}
        covered: set[str] = set()
        self.incomplete = False
        for topic in self.subscriptions():
            route = self.instance.routes.get(topic)
            if route is None:
                try:
                    route = await self.instance.update_route(topic)
                except MQClientError as e:
                    log.info("rebalance %s: no route of %s: %s", self.group, topic, e)
                if route is None:
                    self.incomplete = True
                    continue
            mqs = route.subscribe_queues()
            if self.message_model == MessageModel.BROADCASTING:
                mine = mqs
            else:
                cids = sorted(await self.instance.find_consumer_ids(topic, self.group))
                if not cids:
                    self.incomplete = True
                    continue
                try:
                    mine = self.allocate_strategy(self.group, self.instance.client_id, mqs, cids)
                except Exception:
                    log.exception("allocate strategy failed")
                    continue
            covered.add(topic)
            for mq in mine:
                wanted[mq] = None
        return wanted, covered

    async def rebalance(self) -> None:
        """Work out this client's queues for every subscribed topic and start or stop pulling them."""
        if not self.running():
            return
        wanted, covered = await self.allocate()
        for mq in list(self.process_queues):
            if mq.topic in covered and mq not in wanted or mq.topic not in self.subscriptions():
                await self.remove_queue(mq)
        new = [mq for mq in wanted if mq not in self.process_queues]
        locked = await self.locker.lock(new) if self.locker is not None and new else set(new)
        for mq in new:
            await self.add_queue(mq, mq in locked)

    async def add_queue(self, mq: MessageQueue, locked: bool) -> None:
        if not self.running():
            return
        offset = await self.compute_pull_from_where(mq)
        if not self.running():
            return  # stopped while we asked the broker where to start
        if offset < 0:
            log.warning("rebalance %s: cannot find where to consume %s from, will try again", self.group, mq)
            return
        pq = ProcessQueue()
        pq.locked = locked
        pq.last_lock_ts = time.monotonic()
        self.process_queues[mq] = pq
        self.offset_store.update(mq, offset)
        self.owner.start_queue(mq, pq, offset)
        log.info("%s: pulling %s from offset %d", self.group, mq, offset)

    async def remove_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queues.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        await self.owner.stop_queue(mq)
        await self.offset_store.persist([mq])
        self.offset_store.remove(mq)
        if self.locker is not None:
            await self.locker.unlock([mq])
        log.info("%s: stopped pulling %s", self.group, mq)

    async def reset_offsets(self, table: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (a rewind by the operator): drop the queues without committing
        what this client had, then pull them again from the offsets the broker now holds."""
        for mq in table:
            pq = self.process_queues.pop(mq, None)
            if pq is not None:
                pq.dropped = True
            self.owner.drop_queue(mq)
            self.offset_store.remove(mq)
        log.info("%s: offsets reset by the broker for %d queues", self.group, len(table))
        self.rebalance_soon()

    async def lock_all(self) -> None:
        """lockAll: renew the locks of every queue held; a queue whose lock was lost stops consuming."""
        if self.locker is None or not self.locker.supported or not self.process_queues:
            return
        ok = await self.locker.lock(list(self.process_queues))
        for mq, pq in list(self.process_queues.items()):
            pq.locked = mq in ok
            if pq.locked:
                pq.last_lock_ts = time.monotonic()

    # where --------------------------------------------------------------------------------------
    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """computePullFromWhere: the committed offset; for a group without one, per
        ``consume_from_where`` (a retry topic from its start). -1 when it cannot be known now."""
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
            return await self._queue_offset(mq, RC.SEARCH_OFFSET_BY_TIMESTAMP, self.consume_timestamp)
        except MQClientError as e:
            log.warning("offset of %s: %s", mq, e)
            return -1

    async def _queue_offset(self, mq: MessageQueue, code: int, timestamp: int | None = None) -> int:
        addr = await find_master_addr(self.instance, mq)
        ext: bh.TopicQueueRequestHeader | bh.SearchOffsetRequestHeader = (
            bh.TopicQueueRequestHeader(topic=mq.topic, queue_id=mq.queue_id) if timestamp is None
            else bh.SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp))
        resp = await self.instance.invoke_ok(addr, code, ext)
        return bh.OffsetResponseHeader.parse(resp.ext_fields).offset
