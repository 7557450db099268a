"""ConsumeMessageOrderlyService: one batch at a time per queue, in offset order. In clustering a queue
is consumed only while this client holds its broker lock (renewed every LOCK_INTERVAL by
``lock_loop``). A failed batch is put back in front and retried after ``suspend_time``; past
``max_reconsume_times`` its messages go to the DLQ through the send-back and the queue moves on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tidalmq.client.message import ConsumeResult, MessageExt, MessageModel, MessageQueue
from tidalmq.client.offset_store import OffsetStore
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.push.consume_concurrently import MessageSender
from tidalmq.client.push.consume_service import ConsumeMessageService
from tidalmq.client.push.listener import ListenerRunner, reset_retry_topic
from tidalmq.client.push.queue_lock import LOCK_INTERVAL
from tidalmq.common import message as mc

log = logging.getLogger(__name__)

NOT_LOCKED_RECHECK = 0.1  # an orderly queue waiting for its lock looks again this often


class ConsumeOrderlyService(ConsumeMessageService):
    """A task per queue; at most ``thread_max`` listener calls at once over all queues."""

    def __init__(self, group: str, *, listener: ListenerRunner, sender: MessageSender, offset_store: OffsetStore,
                 message_model: MessageModel = MessageModel.CLUSTERING, batch_max: int = 1,
                 thread_max: int = 20, max_reconsume_times: int = 0x7FFFFFFF, suspend_time: float = 1.0,
                 stop_timeout: float = 30.0, running: Callable[[], bool] = lambda: True,
                 stats: dict[str, int] | None = None) -> None:
        super().__init__(group, listener=listener, sender=sender, offset_store=offset_store,
                         message_model=message_model, batch_max=batch_max, running=running)
        self.max_reconsume_times = max_reconsume_times
        self.suspend_time = suspend_time
        self.stop_timeout = stop_timeout
        self.stats = stats if stats is not None else {"consumed_ok": 0, "consumed_failed": 0}
        self.tasks: dict[MessageQueue, asyncio.Task[Any]] = {}
        self._wake: dict[MessageQueue, asyncio.Event] = {}
        self._sem = asyncio.Semaphore(thread_max)

    @property
    def clustering(self) -> bool:
        return self.message_model == MessageModel.CLUSTERING

    def start(self) -> None:
        return None  # the tasks start with their queues

    # the queues -------------------------------------------------------------------------------
    def start_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        old = self.tasks.get(mq)
        if old is not None:  # two rebalances raced for the same queue: one consuming task per queue
            old.cancel()
        self._wake[mq] = asyncio.Event()
        self.tasks[mq] = asyncio.create_task(self._consume_loop(mq, pq), name=f"orderly-{mq}")

    def submit(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """The pull service put messages in ``pq``: wake the queue's task."""
        ev = self._wake.get(mq)
        if ev is not None:
            ev.set()

    async def stop_queue(self, mq: MessageQueue) -> None:
        """The queue's process queue is dropped: let the batch in progress finish (``stop_timeout``)."""
        task = self.tasks.pop(mq, None)
        ev = self._wake.pop(mq, None)
        if task is None:
            return
        if ev is not None:
            ev.set()
        try:  # asyncio.wait, unlike wait_for, never drops a cancel of the task awaiting it (a rebalance)
            done, _ = await asyncio.wait({task}, timeout=self.stop_timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()

    def drop_queue(self, mq: MessageQueue) -> None:
        task = self.tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        ev = self._wake.pop(mq, None)
        if ev is not None:
            ev.set()

    async def shutdown(self, timeout: float) -> None:
        """Let the batches in progress finish (up to ``timeout``); the waiting ones are not consumed."""
        for ev in self._wake.values():
            ev.set()
        if self.tasks:
            _, pending = await asyncio.wait(list(self.tasks.values()), timeout=timeout)
            for t in pending:
                t.cancel()

    async def lock_loop(self, lock_all: Callable[[], Awaitable[None]]) -> None:
        """lockMQPeriodically: renew the broker locks of the queues held (clustering)."""
        while self.running():
            await asyncio.sleep(LOCK_INTERVAL)
            if self.running():
                await lock_all()

    # consuming --------------------------------------------------------------------------------
    async def _consume_loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        ev = self._wake[mq]
        while True:
            if not pq.pending:
                if not self.running() or pq.dropped:
                    return
                ev.clear()
                await ev.wait()
                continue
            if not self.running() or pq.dropped:
                return
            if self.clustering and not pq.locked:
                await asyncio.sleep(NOT_LOCKED_RECHECK)
                continue
            async with self._sem:
                msgs = pq.take(self.batch_max)
                reset_retry_topic(self.group, msgs)
                try:
                    result = await self.listener.call(msgs)
                except asyncio.CancelledError:
                    pq.rollback()
                    raise
                except Exception as e:
                    log.warning("orderly listener of %s failed: %r", self.group, e)
                    result = ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if result in (None, ConsumeResult.SUCCESS):
                self.stats["consumed_ok"] += len(msgs)
                self._commit(mq, pq)
                continue
            # RECONSUME_LATER means SUSPEND_CURRENT_QUEUE_A_MOMENT here, as in RocketMQ
            self.stats["consumed_failed"] += len(msgs)
            if await self.give_up(msgs):
                self._commit(mq, pq)
                continue
            pq.rollback()
            ev.clear()
            try:  # suspend this queue a moment; a shutdown or drop wakes it early (not wait_for: on 3.11
                # it drops a cancel that meets the wake-up, CPython gh-86296)
                async with asyncio.timeout(self.suspend_time):
                    await ev.wait()
            except TimeoutError:
                pass

    def _commit(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        offset = pq.commit()
        if offset >= 0 and not pq.dropped:
            self.offset_store.update(mq, offset)

    async def give_up(self, msgs: list[MessageExt]) -> bool:
        """checkReconsumeTimes: count one more reconsume of each message; those already consumed
        ``max_reconsume_times`` times are sent back (to the DLQ; dropped in broadcasting). True when
        the whole batch is done with, False when it is to be consumed again."""
        over = [m for m in msgs if m.reconsume_times >= self.max_reconsume_times]
        for m in msgs:
            m.reconsume_times += 1
            m.properties[mc.RECONSUME_TIME] = str(m.reconsume_times)
        if not over:
            return False
        if not self.clustering:
            return True
        for m in over:
            if not await self.sender.send_message_back(m):
                return False
        return len(over) == len(msgs)
