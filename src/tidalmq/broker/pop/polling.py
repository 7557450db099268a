"""Pop long polling: a POP_MESSAGE or NOTIFICATION that finds nothing waits for an arrival on one of its
topics (PopLongPollingService, keyed by topic here: a pop of queue -1 reads every queue)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class PopLongPolling:
    def __init__(self, max_waiting: int = 100_000) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}
        # RocketMQ's maxPopPollingSize: past it, a pop that would wait is answered POLLING_FULL at once,
        # so that clients holding polls cannot grow the broker's memory without bound.
        self.max_waiting = max_waiting
        self._count = 0

    @property
    def full(self) -> bool:
        return self._count >= self.max_waiting

    def register(self, topics: Iterable[str]) -> asyncio.Event:
        """An event set by the next arrival on any of ``topics``; ``unregister`` it when done. Register
        before looking, so an arrival between the look and the wait is not missed."""
        ev = asyncio.Event()
        self._count += 1
        for t in topics:
            self._waiting.setdefault(t, set()).add(ev)
        return ev

    def unregister(self, topics: Iterable[str], ev: asyncio.Event) -> None:
        self._count -= 1
        for t in topics:
            waiting = self._waiting.get(t)
            if waiting is not None:
                waiting.discard(ev)
                if not waiting:
                    del self._waiting[t]

    def notify(self, topics: Iterable[str]) -> None:
        """On the event loop: wake whoever waits on these topics."""
        if self._waiting:
            for t in topics:
                for ev in self._waiting.get(t, ()):
                    ev.set()

    def has_waiters(self) -> bool:
        """Safe from another thread (one truth test of a dict), unlike iterating the waiters."""
        return bool(self._waiting)

    def waiting_count(self) -> int:
        return self._count
