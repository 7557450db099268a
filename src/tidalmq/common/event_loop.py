"""Event loops for the threads TidalMQ starts itself: uvloop's where it is installed (it is a dependency
on every platform but Windows), asyncio's otherwise. The servers install uvloop's policy at start
(``tidalmq.cli``); a library thread (the client's sync facade, the Spark source's pull threads) must not
change the policy of the program it runs in, so it makes its loop through ``new_event_loop``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

try:
    import uvloop as _uvloop
except ImportError:  # pragma: no cover - uvloop is optional on platforms that lack it
    _uvloop = None


def new_event_loop() -> asyncio.AbstractEventLoop:
    return _uvloop.new_event_loop() if _uvloop is not None else asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a loop of ``new_event_loop``."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
