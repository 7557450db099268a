"""Log lines that input from the wire can provoke, at most one a key an interval.

A client sending malformed requests in a loop must not fill the broker's log: a failure caused by input
writes one short line (no traceback) per key per ``interval`` seconds, and the next line that gets
through says how many were held back meanwhile. Keys are what the operator needs to tell failures
apart (a request code, a gRPC method), never a value the client chooses freely, so the table stays
small; it is bounded anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable

_MAX_KEYS = 1024


class LogLimiter:
    def __init__(self, logger: logging.Logger, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._interval = interval
        self._clock = clock
        self._next_at: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}

    def allow(self, key: Hashable) -> tuple[bool, int]:
        """Whether a line for ``key`` may be written now, and how many were held back since the last."""
        now = self._clock()
        at = self._next_at.get(key)
        if at is not None and now < at:
            self._held[key] = self._held.get(key, 0) + 1
            return False, 0
        if at is None and len(self._next_at) >= _MAX_KEYS:
            self._next_at.clear()
            self._held.clear()
        self._next_at[key] = now + self._interval
        return True, self._held.pop(key, 0)

    def warning(self, key: Hashable, msg: str, *args: object) -> bool:
        """``msg % args`` at WARNING unless a line for ``key`` was written within the interval."""
        ok, held = self.allow(key)
        if ok:
            if held:
                self._log.warning(msg + " (%d more like it not logged)", *args, held)
            else:
                self._log.warning(msg, *args)
        return ok


def short_error(exc: BaseException, limit: int = 160) -> str:
    """An exception as one short line for a remark or a log line: its type and the start of its text."""
    text = f"{type(exc).__name__}: {exc}"
    text = text.replace("\n", " ").replace("\r", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
