"""ConsumeMessageConcurrentlyService: batches of pulled messages go to a pool of workers in any order;
a queue's committed offset is the lowest offset still in flight (ProcessQueue.remove), so a slow batch
holds the commit back and nothing unconsumed is ever committed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from tidalmq.client.message import ConsumeResult, MessageExt, MessageModel, MessageQueue
from tidalmq.client.offset_store import OffsetStore
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.push.consume_service import ConsumeMessageService
from tidalmq.client.push.listener import ListenerRunner, reset_retry_topic

log = logging.getLogger(__name__)

WorkItem = tuple[ProcessQueue, MessageQueue, list[MessageExt]]


class MessageSender(Protocol):
    """The send-back of a failed message (push.send_back.SendBack)."""

    async def send_message_back(self, msg: MessageExt, delay_level: int | None = None) -> bool: ...


class ConsumeConcurrentlyService(ConsumeMessageService):
    """``workers`` tasks (consume_thread_max) take batches of up to ``batch_max`` messages. A failed
    batch (RECONSUME_LATER or an exception) is sent back message by message (clustering) or dropped
    (broadcasting, as RocketMQ); what could not be sent back is consumed again here after
    ``retry_local_delay`` seconds, its offset held back meanwhile."""

    def __init__(self, group: str, *, listener: ListenerRunner, sender: MessageSender, offset_store: OffsetStore,
                 message_model: MessageModel = MessageModel.CLUSTERING, batch_max: int = 1, workers: int = 20,
                 retry_local_delay: float = 5.0, running: Callable[[], bool] = lambda: True,
                 stats: dict[str, int] | None = None) -> None:
        super().__init__(group, listener=listener, sender=sender, offset_store=offset_store,
                         message_model=message_model, batch_max=batch_max, running=running)
        self.worker_count = workers
        self.retry_local_delay = retry_local_delay
        self.stats = stats if stats is not None else {"consumed_ok": 0, "consumed_failed": 0, "retried_locally": 0}
        self._work: asyncio.Queue[WorkItem | None] = asyncio.Queue()
        self._workers: list[asyncio.Task[Any]] = []
        self._later: set[asyncio.TimerHandle] = set()

    def start(self) -> None:
        self._workers = [asyncio.create_task(self._worker(), name=f"consume-{i}") for i in range(self.worker_count)]

    # the queues: nothing runs per queue, batches carry their process queue ------------------------
    def start_queue(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        return None

    async def stop_queue(self, mq: MessageQueue) -> None:
        return None  # batches of a dropped process queue are skipped, their offsets not committed

    def drop_queue(self, mq: MessageQueue) -> None:
        return None

    def submit(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """The pull service put messages in ``pq``: queue them as work items of whole listener batches.
        An item holds as many listener batches as keep every worker busy and no more (a pull of 32 for
        20 workers: items of 2 batches; a pull of 256: 13), so the work queue, the process queue's
        removal and the offset update are paid per item rather than per listener call, and a slow
        listener call holds back at most its own item."""
        per_item = self.batch_max * max(1, -(-len(pq.pending) // (self.batch_max * self.worker_count)))
        while pq.pending:
            self._work.put_nowait((pq, mq, pq.take_pending(per_item)))

    # consuming --------------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            item = await self._work.get()
            if item is None:
                return
            pq, mq, msgs = item
            if pq.dropped:
                continue
            await self.consume(pq, mq, msgs)

    async def consume(self, pq: ProcessQueue, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        """One work item: the listener on each ``batch_max`` of it in turn, what failed sent back, then the
        queue's offset advanced once. A queue dropped meanwhile (rebalance, shutdown) stops the item: the
        rest is not consumed here and its offset not committed."""
        reset_retry_topic(self.group, msgs)
        bm = self.batch_max
        done: list[MessageExt] = []
        for i in range(0, len(msgs), bm):
            if i and (pq.dropped or not self.running()):
                break
            chunk = msgs[i:i + bm] if len(msgs) > bm else msgs
            try:
                result = await self.listener.call(chunk)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("listener of %s failed on %d message(s): %r", self.group, len(chunk), e)
                result = ConsumeResult.RECONSUME_LATER
            if result is None or result == ConsumeResult.SUCCESS:
                self.stats["consumed_ok"] += len(chunk)
                done += chunk
                continue
            self.stats["consumed_failed"] += len(chunk)
            if self.message_model == MessageModel.BROADCASTING:
                log.warning("BROADCASTING: consuming %d message(s) failed, dropped (no retry)", len(chunk))
                done += chunk
                continue
            failed: list[MessageExt] = []
            for m in chunk:
                (done if await self.sender.send_message_back(m) else failed).append(m)
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
            if self.running() and not pq.dropped:
                self._work.put_nowait((pq, mq, msgs))

        handle = loop.call_later(self.retry_local_delay, again)
        self._later.add(handle)

    async def shutdown(self, timeout: float) -> None:
        """Let the batches in progress finish (up to ``timeout``); queued ones are not consumed, their
        offsets not committed, so they come again later."""
        for h in self._later:
            h.cancel()
        self._later.clear()
        while not self._work.empty():
            self._work.get_nowait()
        for _ in self._workers:
            self._work.put_nowait(None)
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=timeout)
            for t in pending:
                t.cancel()
