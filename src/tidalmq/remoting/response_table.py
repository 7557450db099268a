"""The requests a connection sent and awaits responses to, by opaque (RocketMQ's responseTable), and
their deadlines: one timer armed for the earliest sweeps them all (as RocketMQ's scanResponseTable). A
TimerHandle per request, and its cancellation, cost a pipelining client about as much as encoding the
request."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

from tidalmq.remoting.command import RemotingCommand

Pending = asyncio.Future[RemotingCommand]


class ResponseTable:
    def __init__(self, timed_out: Callable[[float], Exception]) -> None:
        self._timed_out = timed_out  # the error of a request unanswered after its timeout (seconds)
        self.pending: dict[int, Pending] = {}
        # Deadlines of requests with a timeout, earliest first: (at, opaque, timeout, future)
        self._deadlines: list[tuple[float, int, float, Pending]] = []
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = 0.0

    def answered(self, cmd: RemotingCommand) -> None:
        fut = self.pending.pop(cmd.opaque, None)
        if fut is not None and not fut.done():
            fut.set_result(cmd)

    def expire(self, loop: asyncio.AbstractEventLoop, opaque: int, timeout: float, fut: Pending) -> None:
        """Fail ``fut`` with the timeout error if it is still pending after ``timeout`` seconds."""
        at = loop.time() + timeout
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self.pending) + 1024:  # mostly answered: keep the heap small
            deadlines[:] = [d for d in deadlines if self.pending.get(d[1]) is d[3]]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (at, opaque, timeout, fut))
        if self._sweep is None or at < self._sweep_at:
            self._arm(loop, at)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        self._sweep_at = at
        self._sweep = loop.call_at(at, self._expire_due)

    def _expire_due(self) -> None:
        """Fail the requests whose deadline passed unanswered; arm the timer for the next deadline."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines, pending = self._deadlines, self.pending
        while deadlines and deadlines[0][0] <= now:
            _at, opaque, timeout, fut = heapq.heappop(deadlines)
            if pending.get(opaque) is fut:
                del pending[opaque]
                if not fut.done():
                    fut.set_exception(self._timed_out(timeout))
        # entries answered since they were queued go without a wake-up of their own
        while deadlines and pending.get(deadlines[0][1]) is not deadlines[0][3]:
            heapq.heappop(deadlines)
        if deadlines:
            self._arm(loop, deadlines[0][0])

    def fail_all(self, error: Callable[[], Exception]) -> None:
        """The connection is gone: every pending request fails with ``error()``."""
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(error())
        self.pending.clear()
        self._deadlines.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
