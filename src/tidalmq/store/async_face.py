"""StoreFace: the store as an event loop may use it, without ever waiting on one of the store's threads.

The store (``MessageStore``) is synchronous and thread-safe; its waits (reput, flush) block the
caller and its lookups may read files. On the broker's event loop a block stalls every connection, so:

- waits become futures completed from the store's thread through ``call_soon_threadsafe``
  (``wait_reput``, ``flushed``);
- calls that may block (index lookups, scans, reads of cold pages) run in an executor (``run``).

Everything here is a thin adapter: the store keeps every rule (what "dispatched" or "flushed" means).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tidalmq.store.api import MessageStore

T = TypeVar("T")


def _settle(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():  # a timed-out wait cancelled it already
        fut.set_result(value)


class StoreFace:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    async def wait_reput(self, offset: int, timeout: float) -> bool:
        """True once everything before CommitLog ``offset`` is dispatched (queues and index built),
        False after ``timeout`` seconds. The loop keeps serving meanwhile."""
        store = self.store
        loop = asyncio.get_running_loop()
        if not store.dispatch_running:
            await loop.run_in_executor(None, store.dispatch)  # not started (tools, tests): dispatch off-loop
        fut: asyncio.Future[bool] = loop.create_future()
        store.on_reput(offset, lambda: loop.call_soon_threadsafe(_settle, fut, True))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return False

    async def flushed(self, offset: int) -> bool:
        """SYNC_FLUSH: True once the CommitLog is durable up to ``offset``, False when that took longer
        than ``syncFlushTimeout``; ASYNC_FLUSH: True at once (``MessageStore.request_flush``)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self.store.request_flush(offset, lambda ok: loop.call_soon_threadsafe(_settle, fut, ok))
        return await fut

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the loop's executor: for store calls that may block (index lookups, scans)."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
