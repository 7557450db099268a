"""Queue selection for sends: round-robin, by key hash, user selectors, and RocketMQ's latency-fault
avoidance (MQFaultStrategy, LatencyFaultToleranceImpl)."""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidalmq.client.message import Message, MessageQueue
from tidalmq.common.taghash import java_string_hash

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""``selector(queues, message, arg) -> queue``: the queue for one send (MessageQueueSelector)."""


def java_hash(arg: Any) -> int:
    """``arg.hashCode()`` as Java computes it for strings and integers, so keys map to the same queue
    index a Java producer would choose; other objects use Python's ``hash``."""
    if isinstance(arg, str):
        return java_string_hash(arg)
    if isinstance(arg, bool):
        return 1231 if arg else 1237
    if isinstance(arg, int):
        if -(1 << 31) <= arg < (1 << 31):
            return arg
        v = arg & 0xFFFFFFFFFFFFFFFF  # Long.hashCode
        h = (v ^ (v >> 32)) & 0xFFFFFFFF
        return h - (1 << 32) if h & 0x80000000 else h
    return hash(arg)


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByHash: ``abs(hash(arg) % n)`` with Java's remainder (sign of the dividend)."""
    h = java_hash(arg)
    n = len(queues)
    value = abs(h) % n  # Java: h % n keeps the sign of h, then Math.abs — the same index
    return queues[value]


def select_by_random(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    return queues[random.randrange(len(queues))]


class RoundRobin:
    """TopicPublishInfo.sendWhichQueue: a counter starting at a random point."""

    def __init__(self, start: int | None = None) -> None:
        self._i = random.randrange(1 << 16) if start is None else start

    def next(self) -> int:
        self._i = (self._i + 1) & 0x7FFFFFFF
        return self._i

    def select(self, queues: Sequence[MessageQueue], last_broker: str | None = None) -> MessageQueue:
        """The next queue, avoiding ``last_broker`` (the one that just failed) when another exists."""
        n = len(queues)
        if last_broker is not None:
            for _ in range(n):
                mq = queues[self.next() % n]
                if mq.broker_name != last_broker:
                    return mq
        return queues[self.next() % n]


# latency-fault avoidance ------------------------------------------------------------------------------
LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY = 30000  # a failed send counts as this latency


@dataclass
class FaultItem:
    name: str
    latency_ms: int
    start_ms: int  # available again from this time

    def available(self, now: int) -> bool:
        return now >= self.start_ms


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class LatencyFaultTolerance:
    """Brokers that answered slowly or failed are avoided for a while, longer the slower they were."""

    def __init__(self, clock: Callable[[], int] = _now_ms) -> None:
        self.items: dict[str, FaultItem] = {}
        self._clock = clock

    def update(self, name: str, latency_ms: int, not_available_ms: int) -> None:
        now = self._clock()
        item = self.items.get(name)
        if item is None:
            self.items[name] = FaultItem(name, latency_ms, now + not_available_ms)
        else:
            item.latency_ms = latency_ms
            item.start_ms = now + not_available_ms

    def is_available(self, name: str) -> bool:
        item = self.items.get(name)
        return item is None or item.available(self._clock())

    def remove(self, name: str) -> None:
        self.items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """The least bad broker: the one that becomes available soonest (then the fastest)."""
        if not self.items:
            return None
        return min(self.items.values(), key=lambda i: (i.start_ms, i.latency_ms)).name


def not_available_duration(latency_ms: int) -> int:
    """The penalty of the highest LATENCY_MAX step ``latency_ms`` reaches (0 below the first); asked
    after every send, hence a bisection rather than a walk of the table."""
    i = bisect.bisect_right(LATENCY_MAX, latency_ms)
    return NOT_AVAILABLE_DURATION[i - 1] if i else 0


class FaultStrategy:
    """MQFaultStrategy: pick a queue on an available broker; remember each broker's last latency."""

    def __init__(self, enabled: bool = True, clock: Callable[[], int] = _now_ms) -> None:
        self.enabled = enabled
        self.tolerance = LatencyFaultTolerance(clock)

    def select(self, queues: Sequence[MessageQueue], rr: RoundRobin, last_broker: str | None) -> MessageQueue:
        if not queues:
            raise ValueError("no queue to select from")
        if self.enabled:
            n = len(queues)
            for _ in range(n):
                mq = queues[rr.next() % n]
                if self.tolerance.is_available(mq.broker_name) and mq.broker_name != last_broker:
                    return mq
            for _ in range(n):  # every broker is in the penalty box, or only the last one is left
                mq = queues[rr.next() % n]
                if self.tolerance.is_available(mq.broker_name):
                    return mq
            best = self.tolerance.pick_one_at_least()
            if best is not None:
                on_best = [q for q in queues if q.broker_name == best]
                if on_best:
                    return on_best[rr.next() % len(on_best)]
            return queues[rr.next() % n]
        return rr.select(queues, last_broker)

    def update(self, broker_name: str, latency_ms: int, isolation: bool) -> None:
        if self.enabled:
            lat = ISOLATION_LATENCY if isolation else latency_ms
            self.tolerance.update(broker_name, latency_ms, not_available_duration(lat))
