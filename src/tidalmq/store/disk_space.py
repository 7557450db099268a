"""DiskSpaceGuard: whether the store refuses writes for lack of disk space, and why.

Three causes, each set and cleared by the part of the store that sees it:

- ``ratio``: the CleanService found the disk fuller than ``diskSpaceWarningLevelRatio`` (RocketMQ's
  "disk full" flag); cleared when a later check finds it below.
- ``unconsumed``: the disk is over ``diskSpaceCleanForciblyRatio`` and the only files that could go hold
  messages some group has not consumed yet (and ``cleanFileForciblyEnable`` is off): the store keeps
  them and refuses new ones instead; cleared when a check finds the disk below that ratio.
- a refused reservation (ENOSPC) where a file was being made: ``commitlog`` (a put retries after
  ``RETRY_MS``, and clears it when it succeeds), ``consumequeue`` (the reput retries by itself every
  second and clears it), ``index`` (retried with the next dispatch round after ``RETRY_MS``).

Logging is one WARN when writes start being refused and one when they are accepted again, never per send.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("tidalmq.store")

# After a refused reservation by a put, writes are refused this long before a put tries again (a full
# disk is not hammered with reservations of a whole CommitLog file under the put lock).
RETRY_MS = 1000

RATIO = "ratio"
UNCONSUMED = "unconsumed"
COMMIT_LOG = "commitlog"
CONSUME_QUEUE = "consumequeue"
INDEX = "index"
# Causes that stand until cleared (the others lapse after RETRY_MS so that a write tries again).
_STANDING = (RATIO, UNCONSUMED, CONSUME_QUEUE)


class DiskSpaceGuard:
    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._causes: dict[str, tuple[int, str]] = {}  # cause -> (since ms, detail)

    def refuse_writes(self) -> bool:
        causes = self._causes
        if not causes:
            return False
        now = self._clock()
        return any(c in _STANDING or now - at < RETRY_MS for c, (at, _) in list(causes.items()))

    @property
    def full(self) -> bool:
        """Some cause stands (a lapsed ENOSPC still counts until a write succeeds)."""
        return bool(self._causes)

    def set(self, cause: str, detail: str) -> None:
        with self._lock:
            was = bool(self._causes)
            known = cause in self._causes
            self._causes[cause] = (self._clock(), detail)
        if not was:
            log.warning("disk full: refusing writes (%s: %s); reads, pulls and offsets go on", cause, detail)
        elif not known:
            log.warning("disk full, also %s: %s", cause, detail)

    def clear(self, cause: str) -> None:
        if cause not in self._causes:
            return
        with self._lock:
            if self._causes.pop(cause, None) is None:
                return
            left = bool(self._causes)
        if not left:
            log.warning("disk space available again: accepting writes (%s cleared)", cause)

    def reason(self) -> str:
        """What refuses writes, for runtime info and remarks ("" when nothing does)."""
        return "; ".join(f"{c}: {d}" for c, (_, d) in sorted(self._causes.items()))
