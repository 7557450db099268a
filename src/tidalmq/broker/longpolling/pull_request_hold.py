"""Long polling (PullRequestHoldService): a PULL_MESSAGE that finds nothing is held until a
message arrives for its queue or its suspend time runs out, then answered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from tidalmq.remoting.command import RemotingCommand


@dataclass(eq=False)
class HeldPull:
    offset: int
    retry: Callable[[bool], RemotingCommand | None]  # retry(allow_suspend) -> response or None (still nothing)
    future: asyncio.Future[RemotingCommand]
    timer: asyncio.TimerHandle | None = None


class PullRequestHoldService:
    """Held pulls by queue. A held pull leaves as soon as its future is done, whatever finished it: an
    answer, its timer, or its cancellation when the client's connection closes (the transport cancels
    a closed connection's pending replies), so a client that holds pulls and goes away leaves nothing
    (the transport learns of the close even while it has stopped reading from that client, see
    RemotingServer._sweep)."""

    def __init__(self) -> None:
        # Dicts used as ordered sets: removal of one held pull is O(1), however many wait on a queue.
        self._held: dict[tuple[str, int], dict[HeldPull, None]] = {}
        self._count = 0  # held pulls not released yet: what the broker-wide cap counts, without a walk

    @property
    def held(self) -> int:
        return self._count

    def hold(self, topic: str, queue_id: int, offset: int, timeout_s: float,
             retry: Callable[[bool], RemotingCommand | None]) -> asyncio.Future[RemotingCommand]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        held = HeldPull(offset, retry, fut)
        key = (topic, queue_id)
        self._held.setdefault(key, {})[held] = None
        self._count += 1
        held.timer = loop.call_later(max(0.0, timeout_s), self._expire, held)
        fut.add_done_callback(lambda _f: self._release(key, held))
        return fut

    def _release(self, key: tuple[str, int], held: HeldPull) -> None:
        if held.timer is not None:
            held.timer.cancel()
        waiting = self._held.get(key)
        if waiting is not None and waiting.pop(held, False) is None:
            self._count -= 1
            if not waiting:
                del self._held[key]

    def _expire(self, held: HeldPull) -> None:
        if not held.future.done():
            resp = held.retry(False)
            if resp is not None:
                held.future.set_result(resp)
            else:  # retry(False) always answers; should it not, the pull is still not left held forever
                held.future.cancel()

    def notify_arrivals(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Called on the event loop after a reput round: the queues it touched, with their max offsets."""
        if self._held:
            for (topic, queue_id), max_offset in arrivals.items():
                self.notify_arrival(topic, queue_id, max_offset)

    def notify_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called on the event loop when the reput thread dispatched new entries for the queue."""
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        for held in list(waiting):
            if held.future.done() or max_offset <= held.offset:
                continue
            resp = held.retry(True)  # None: still nothing, keep holding
            if resp is not None:
                held.future.set_result(resp)  # its done callback takes it out

    def held_count(self) -> int:
        return sum(1 for w in self._held.values() for h in w if not h.future.done())

    def cancel_all(self) -> None:
        for waiting in list(self._held.values()):
            for held in list(waiting):
                if held.timer:
                    held.timer.cancel()
                if not held.future.done():
                    held.future.cancel()
        self._held.clear()
        self._count = 0
