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
    def __init__(self) -> None:
        self._held: dict[tuple[str, int], list[HeldPull]] = {}

    def hold(self, topic: str, queue_id: int, offset: int, timeout_s: float,
             retry: Callable[[bool], RemotingCommand | None]) -> asyncio.Future[RemotingCommand]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        held = HeldPull(offset, retry, fut)
        key = (topic, queue_id)
        self._held.setdefault(key, []).append(held)
        held.timer = loop.call_later(max(0.0, timeout_s), self._expire, key, held)
        return fut

    def _expire(self, key: tuple[str, int], held: HeldPull) -> None:
        lst = self._held.get(key)
        if lst is not None and held in lst:
            lst.remove(held)
            if not lst:
                del self._held[key]
        if not held.future.done():
            resp = held.retry(False)
            if resp is not None:
                held.future.set_result(resp)

    def notify_arrivals(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Called on the event loop after a reput round: the queues it touched, with their max offsets."""
        if self._held:
            for (topic, queue_id), max_offset in arrivals.items():
                self.notify_arrival(topic, queue_id, max_offset)

    def notify_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called on the event loop when the reput thread dispatched new entries for the queue."""
        key = (topic, queue_id)
        lst = self._held.get(key)
        if not lst:
            return
        keep: list[HeldPull] = []
        for held in lst:
            if held.future.done():
                if held.timer:
                    held.timer.cancel()
                continue
            if max_offset > held.offset:
                resp = held.retry(True)  # None: still nothing, keep holding
                if resp is not None:
                    if held.timer:
                        held.timer.cancel()
                    held.future.set_result(resp)
                    continue
            keep.append(held)
        if keep:
            self._held[key] = keep
        else:
            self._held.pop(key, None)

    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def cancel_all(self) -> None:
        for lst in self._held.values():
            for held in lst:
                if held.timer:
                    held.timer.cancel()
                if not held.future.done():
                    held.future.cancel()
        self._held.clear()
