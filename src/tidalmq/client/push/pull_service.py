"""The pull loop of each queue (DefaultMQPushConsumerImpl.pullMessage + PullAPIWrapper): long-polling
PULL_MESSAGE requests from the queue's next offset, flow control against the messages still in its
process queue, the tag check after the broker's hash filter, and the offset corrections the broker
asks for (PULL_NOT_FOUND, PULL_OFFSET_MOVED). Pulled messages go to ``dispatch``, the consume service."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidalmq.client import codec
from tidalmq.client.broker_addr import find_master_addr
from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import MessageQueue
from tidalmq.client.offset_store import OffsetStore
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh

log = logging.getLogger(__name__)

# PullSysFlag
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
# DefaultMQPushConsumerImpl's delays (RocketMQ waits 50 ms under flow control, 3 s after an error or
# while an orderly queue is not locked)
PULL_DELAY_FLOW_CONTROL = 0.05
PULL_DELAY_EXCEPTION = 3.0
# Beyond RocketMQ: a pull that failed to reach its broker (connection refused or lost: a restart) is
# retried after 0.1 s, then every 0.2 s (the connect backoff's cap, ClientInstance.backoff), so a consumer
# is back within about 0.2 s of a broker's restart instead of up to 3 s after it (a refused connect costs
# the client next to nothing; five a second per broker address while it is down); a broker's error answer
# still waits 3 s.
PULL_DELAY_RECONNECT_FIRST = 0.1
PULL_DELAY_RECONNECT_MAX = 0.2
PULL_DELAY_NOT_LOCKED = 3.0
PULL_ANSWERS = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                ResponseCode.PULL_OFFSET_MOVED)


def pull_retry_delay(error: MQClientError, unreachable_before: int) -> float:
    """Seconds before the next pull after ``error``: 3 s after a broker's error answer (RocketMQ's
    pullTimeDelayMillsWhenException); after failing to reach the broker, 0.1 s doubling with each
    failure in a row (``unreachable_before`` of them so far) up to 0.2 s."""
    if isinstance(error, MQBrokerError):
        return PULL_DELAY_EXCEPTION
    return min(PULL_DELAY_RECONNECT_MAX, PULL_DELAY_RECONNECT_FIRST * 2 ** min(unreachable_before, 10))


@dataclass(frozen=True)
class FlowControl:
    """When a queue may be pulled again: not while its process queue holds more than ``max_count``
    messages or ``max_size`` body bytes, nor (concurrent) while the offsets in flight span more than
    ``max_span``, nor (orderly clustering) while the queue is not locked by this client."""

    max_count: int = 1000
    max_size: int = 100 * 1024 * 1024
    max_span: int = 2000
    orderly: bool = False

    def delay(self, pq: ProcessQueue) -> float:
        """Seconds to wait before looking again; 0.0 when the queue may be pulled now."""
        if pq.count > self.max_count or pq.msg_size > self.max_size:
            return PULL_DELAY_FLOW_CONTROL
        if not self.orderly and pq.max_span() > self.max_span:
            return PULL_DELAY_FLOW_CONTROL
        if self.orderly and not pq.locked:
            return PULL_DELAY_NOT_LOCKED
        return 0.0


def pull_request_header(group: str, mq: MessageQueue, offset: int, sub: codec.Subscription, *, max_nums: int,
                        commit_offset: int, suspend_timeout: float) -> bh.PullMessageRequestHeader:
    """PullMessageRequestHeader of a long-polling pull; a ``commit_offset`` > 0 piggy-backs the consumed
    offset on the pull (FLAG_COMMIT_OFFSET) as RocketMQ's clustering consumers do."""
    sysflag = FLAG_SUSPEND | FLAG_SUBSCRIPTION | (FLAG_COMMIT_OFFSET if commit_offset > 0 else 0)
    return bh.PullMessageRequestHeader(
        consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=sysflag, commit_offset=max(commit_offset, 0), suspend_timeout_millis=int(suspend_timeout * 1000),
        subscription=sub.expression, sub_version=sub.version, expression_type=sub.expression_type,
    )


class PullService:
    """One pull task per queue. ``commit_offsets`` (clustering) piggy-backs the offset on pulls;
    ``stats["pulls"]`` counts the answers."""

    def __init__(self, instance: ClientInstance, group: str, *, offset_store: OffsetStore,
                 subscriptions: Callable[[], dict[str, codec.Subscription]],
                 dispatch: Callable[[MessageQueue, ProcessQueue], None], running: Callable[[], bool],
                 flow: FlowControl, pull_batch_size: int = 32, suspend_timeout: float = 20.0,
                 pull_timeout: float = 30.0, pull_interval: float = 0.0, commit_offsets: bool = True,
                 stats: dict[str, int] | None = None) -> None:
        self.instance = instance
        self.group = group
        self.offset_store = offset_store
        self.subscriptions = subscriptions
        self.dispatch = dispatch
        self.running = running
        self.flow = flow
        self.pull_batch_size = pull_batch_size
        self.suspend_timeout = suspend_timeout
        self.pull_timeout = pull_timeout  # longer than suspend_timeout: the broker holds the pull that long
        self.pull_interval = pull_interval
        self.commit_offsets = commit_offsets
        self.stats = stats if stats is not None else {"pulls": 0}
        self.tasks: dict[MessageQueue, asyncio.Task[Any]] = {}

    def start(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        old = self.tasks.get(mq)
        if old is not None:  # two rebalances raced for the same queue: one pull loop per queue
            old.cancel()
        self.tasks[mq] = asyncio.create_task(self._pull_loop(mq, pq, offset), name=f"pull-{mq}")

    def stop(self, mq: MessageQueue) -> None:
        task = self.tasks.pop(mq, None)
        if task is not None:
            task.cancel()

    async def stop_all(self) -> None:
        # A rebalance that was under way when the consumer stopped may still have started pulls:
        # cancel until none is left.
        while self.tasks:
            pulls = list(self.tasks.values())
            self.tasks.clear()
            for t in pulls:
                t.cancel()
            await asyncio.gather(*pulls, return_exceptions=True)

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        sub = self.subscriptions().get(mq.topic) or codec.Subscription.build(mq.topic, "*", 0)
        next_offset = offset
        unreachable = 0  # pulls in a row that could not reach the broker
        while not pq.dropped and self.running():
            delay = self.flow.delay(pq)
            if delay:
                await asyncio.sleep(delay)
                continue
            sub = self.subscriptions().get(mq.topic) or sub
            commit = self.offset_store.read_memory(mq) if self.commit_offsets else 0
            ext = pull_request_header(self.group, mq, next_offset, sub, max_nums=self.pull_batch_size,
                                      commit_offset=commit, suspend_timeout=self.suspend_timeout)
            try:
                addr = await find_master_addr(self.instance, mq)
                resp = await self.instance.invoke_ok(addr, RC.PULL_MESSAGE, ext, timeout=self.pull_timeout,
                                                     ok=PULL_ANSWERS)
            except asyncio.CancelledError:
                raise
            except MQClientError as e:
                if self.running() and not pq.dropped:
                    log.warning("pull %s failed: %s", mq, e)
                await asyncio.sleep(pull_retry_delay(e, unreachable))
                unreachable = 0 if isinstance(e, MQBrokerError) else unreachable + 1
                continue
            unreachable = 0
            self.stats["pulls"] += 1
            pq.last_pull_ts = time.monotonic()
            next_offset = await self._apply(mq, pq, sub, resp, next_offset)
            if self.pull_interval > 0:
                await asyncio.sleep(self.pull_interval)

    async def _apply(self, mq: MessageQueue, pq: ProcessQueue, sub: codec.Subscription, resp: RemotingCommand,
                     offset: int) -> int:
        """processPullResult: hand the messages on; returns the next offset to pull."""
        code = resp.code
        nbo = bh.PullMessageResponseHeader.parse(resp.ext_fields).next_begin_offset
        nbo = offset if nbo is None else nbo
        if code == ResponseCode.SUCCESS:
            msgs = codec.decode_messages(resp.body_bytes(), mq.broker_name)
            if not sub.matches_all:
                msgs = [m for m in msgs if sub.matches(m.tags)]
            if msgs and not pq.dropped:
                pq.put(msgs)
                self.dispatch(mq, pq)
            elif not msgs and pq.count == 0:  # all filtered out: nothing to wait for before committing
                self.offset_store.update(mq, nbo, increase_only=True)
        elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            if pq.count == 0:  # correctTagsOffset
                self.offset_store.update(mq, nbo, increase_only=True)
        else:  # PULL_OFFSET_MOVED: start again where the broker says
            log.warning("%s: offset %d of %s is illegal, moving to %d (%s)", self.group, offset, mq, nbo,
                        resp.remark)
            self.offset_store.update(mq, nbo)
            await self.offset_store.persist([mq])
        return nbo
