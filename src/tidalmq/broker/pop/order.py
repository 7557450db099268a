"""Orderly pop (FIFO): a queue is lent to one popper at a time until every message it was given is acked
(RocketMQ's ConsumerOrderInfoManager). Messages of one message group go to one queue, so this keeps
the group in order. When the invisible time runs out first, the same messages are popped again (with
their attempt count raised); nothing behind them is popped meanwhile. After the group's retryMaxTimes
attempts they go to the DLQ and the queue moves on. The group's offset moves only
when all are acked, so a restart re-pops from the first unacked message (the locks live in memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field

OrderKey = tuple[str, str, int]  # group, topic, queue id


@dataclass(slots=True)
class OrderLock:
    pop_time: int
    invisible_time: int
    offsets: list[int]
    next_offset: int  # the group's offset once all are acked
    attempts: int = 0  # times these messages were popped before
    acked: set[int] = field(default_factory=set)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def done(self) -> bool:
        return self.acked.issuperset(self.offsets)

    def first_unacked(self) -> int:
        return min(o for o in self.offsets if o not in self.acked)


class OrderLocks:
    def __init__(self) -> None:
        self._locks: dict[OrderKey, OrderLock] = {}

    def get(self, key: OrderKey) -> OrderLock | None:
        return self._locks.get(key)

    def busy(self, key: OrderKey, now: int) -> bool:
        """True while the queue is lent: messages given, not all acked, invisible time not over."""
        lock = self._locks.get(key)
        return lock is not None and not lock.done and now < lock.deadline

    def lend(self, key: OrderKey, lock: OrderLock) -> None:
        self._locks[key] = lock

    def ack(self, key: OrderKey, pop_time: int, offset: int) -> int | None:
        """Record an ack; the offset to commit when it was the last one of the lock, else None. An ack
        of an earlier lending (another pop time) or of an offset never lent is ignored."""
        lock = self._locks.get(key)
        if lock is None or lock.pop_time != pop_time or offset not in lock.offsets:
            return None
        lock.acked.add(offset)
        if not lock.done:
            return None
        del self._locks[key]
        return lock.next_offset

    def release(self, key: OrderKey, lock: OrderLock) -> None:
        if self._locks.get(key) is lock:
            del self._locks[key]

    def holds(self, key: OrderKey, pop_time: int) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.pop_time == pop_time

    def change_invisible(self, key: OrderKey, pop_time: int, new_pop_time: int, invisible_time: int) -> bool:
        lock = self._locks.get(key)
        if lock is None or lock.pop_time != pop_time:
            return False
        lock.pop_time, lock.invisible_time = new_pop_time, invisible_time
        return True
