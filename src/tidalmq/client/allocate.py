"""Queue allocation strategies for clustering consumers (AllocateMessageQueueStrategy).

A strategy is any callable ``(group, current_client_id, all_queues, all_client_ids) -> queues``; each
client of a group runs the same strategy over the same sorted inputs, so they agree without talking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidalmq.client.message import MessageQueue

AllocateStrategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def _check(current: str, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> bool:
    if not current:
        raise ValueError("currentCID is empty")
    return bool(mqs) and current in cids


def allocate_averagely(group: str, current: str, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> list[MessageQueue]:
    """AllocateMessageQueueAveragely: contiguous ranges, the first ``len(mqs) % len(cids)`` clients one more."""
    if not _check(current, mqs, cids):
        return []
    index = list(cids).index(current)
    n, c = len(mqs), len(cids)
    mod = n % c
    if n <= c:
        average = 1
    elif mod > 0 and index < mod:
        average = n // c + 1
    else:
        average = n // c
    start = index * average if mod > 0 and index < mod else index * average + mod
    rng = min(average, n - start)
    return [mqs[(start + i) % n] for i in range(max(0, rng))]


def allocate_by_circle(group: str, current: str, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> list[MessageQueue]:
    """AllocateMessageQueueAveragelyByCircle: queue i goes to client ``i % len(cids)``."""
    if not _check(current, mqs, cids):
        return []
    index = list(cids).index(current)
    return [mqs[i] for i in range(index, len(mqs), len(cids))]


class AllocateByConfig:
    """AllocateMessageQueueByConfig: always the same, configured queues."""

    def __init__(self, queues: Sequence[MessageQueue]) -> None:
        self.queues = list(queues)

    def __call__(self, group: str, current: str, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> list[MessageQueue]:
        return list(self.queues)
