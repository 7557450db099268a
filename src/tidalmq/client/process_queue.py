"""ProcessQueue: the messages pulled from one queue and not yet consumed, for flow control and for
computing the offset that is safe to commit (the smallest offset still in flight)."""

from __future__ import annotations

import time
from collections import deque

from tidalmq.client.message import MessageExt


class ProcessQueue:
    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}  # queue offset -> message, not yet consumed
        self._order: deque[int] = deque()  # offsets in arrival (increasing) order; consumed ones pruned lazily
        self.msg_size = 0
        self.queue_offset_max = -1
        self.dropped = False
        self.locked = False
        self.last_lock_ts = 0.0
        self.last_pull_ts = time.monotonic()
        self.last_consume_ts = time.monotonic()
        # orderly: messages waiting in offset order, and those taken by the listener now
        self.pending: deque[MessageExt] = deque()
        self.consuming: list[MessageExt] = []

    @property
    def count(self) -> int:
        return len(self.msgs)

    def put(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            off = m.queue_offset
            if off in self.msgs:
                continue
            self.msgs[off] = m
            self._order.append(off)
            self.msg_size += len(m.body)
            if off > self.queue_offset_max:
                self.queue_offset_max = off
            self.pending.append(m)

    def max_span(self) -> int:
        self._prune()
        if not self._order:
            return 0
        return self.queue_offset_max - self._order[0]

    def _prune(self) -> None:
        order, msgs = self._order, self.msgs
        while order and order[0] not in msgs:
            order.popleft()

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit (RocketMQ's removeMessage)."""
        for m in msgs:
            if self.msgs.pop(m.queue_offset, None) is not None:
                self.msg_size -= len(m.body)
        self.last_consume_ts = time.monotonic()
        self._prune()
        if self._order:
            return self._order[0]
        return self.queue_offset_max + 1 if self.queue_offset_max >= 0 else -1

    # concurrent: ``pending`` is drained as batches are dispatched -------------------------------
    def take_pending(self, n: int) -> list[MessageExt]:
        p = self.pending
        if n >= len(p):
            out = list(p)
            p.clear()
            return out
        popleft = p.popleft
        return [popleft() for _ in range(n)]

    # orderly ----------------------------------------------------------------------------------
    def take(self, n: int) -> list[MessageExt]:
        """The next ``n`` messages in offset order, now being consumed."""
        self.consuming = self.take_pending(n)
        return list(self.consuming)

    def commit(self) -> int:
        """The listener succeeded: the offset after the consumed batch (-1 when nothing was taken)."""
        if not self.consuming:
            return -1
        offset = max(m.queue_offset for m in self.consuming) + 1
        self.remove(self.consuming)
        self.consuming = []
        return offset

    def rollback(self) -> None:
        """Put the batch back in front, to be consumed again (makeMessageToConsumeAgain)."""
        self.pending.extendleft(reversed(self.consuming))
        self.consuming = []
