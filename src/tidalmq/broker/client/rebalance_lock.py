"""Queue locks for orderly consumption (RebalanceLockManager): within a group, one client holds a
queue; a lock not renewed within ``rebalanceLockMaxLiveTime`` (60 s) expires."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

MessageQueueKey = tuple[str, str, int]  # topic, brokerName, queueId
LOCK_MAX_LIVE_MS = 60_000


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_MS, clock: Callable[[], int] | None = None) -> None:
        self.max_live_ms = max_live_ms
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._locks: dict[str, dict[MessageQueueKey, tuple[str, int]]] = {}  # group -> mq -> (client, last)
        self._lock = threading.Lock()

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueueKey], client_id: str) -> list[MessageQueueKey]:
        """Lock (or renew) what is free, expired or already ours; return the queues this client holds."""
        now = self._clock()
        held: list[MessageQueueKey] = []
        with self._lock:
            table = self._locks.setdefault(group, {})
            for mq in mqs:
                owner = table.get(mq)
                if owner is None or owner[0] == client_id or now - owner[1] > self.max_live_ms:
                    table[mq] = (client_id, now)
                    held.append(mq)
        return held

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueueKey], client_id: str) -> None:
        with self._lock:
            table = self._locks.get(group, {})
            for mq in mqs:
                owner = table.get(mq)
                if owner is not None and owner[0] == client_id:
                    del table[mq]

    def unlock_client(self, group: str, client_id: str) -> None:
        """A consumer that left the group gives up its locks at once (its queues move on rebalance)."""
        with self._lock:
            table = self._locks.get(group, {})
            for mq in [mq for mq, owner in table.items() if owner[0] == client_id]:
                del table[mq]

    def owner(self, group: str, mq: MessageQueueKey) -> str | None:
        with self._lock:
            owner = self._locks.get(group, {}).get(mq)
            if owner is None or self._clock() - owner[1] > self.max_live_ms:
                return None
            return owner[0]
