"""Calling the user's listener: a coroutine function on the event loop, a plain function in a thread
pool (or inline on the loop when asked), and the retry topic turned back into the real one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from tidalmq.client.message import ConsumeResult, MessageExt
from tidalmq.common import message as mc
from tidalmq.common import naming as nm

MessageListener = Callable[[list[MessageExt]], "ConsumeResult | None | Awaitable[ConsumeResult | None]"]
"""``listener(messages) -> ConsumeResult``: a plain function (run in a thread pool unless
``listener_inline``) or a coroutine function (run on the event loop). ``None`` means SUCCESS; an
exception means RECONSUME_LATER (concurrent) or SUSPEND_CURRENT_QUEUE_A_MOMENT (orderly)."""


def is_async(fn: Any) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(type(fn).__call__))


def reset_retry_topic(group: str, msgs: list[MessageExt]) -> None:
    """resetRetryAndNamespace: a message pulled from ``%RETRY%<group>`` reaches the listener under
    the topic it was first sent to (its RETRY_TOPIC property)."""
    prefix = nm.RETRY_GROUP_TOPIC_PREFIX
    for m in msgs:
        if not m.topic.startswith(prefix):  # the common case, checked without building the retry topic's name
            continue
        real = m.properties.get(mc.RETRY_TOPIC)
        if real and m.topic == nm.retry_topic(group):
            m.topic = real


class ListenerRunner:
    """Runs the listener and turns what it returns into a ``ConsumeResult`` (``None`` = success);
    exceptions propagate to the consume service, which decides what a failure means."""

    def __init__(self, listener: MessageListener, *, thread_max: int, inline: bool, name: str) -> None:
        self.listener = listener
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._coroutine = is_async(listener)  # awaited straight away: no isawaitable check per call
        if not inline and not self._coroutine:
            self._executor = concurrent.futures.ThreadPoolExecutor(thread_max, thread_name_prefix=f"consume-{name}")

    async def call(self, msgs: list[MessageExt]) -> ConsumeResult | None:
        if self._coroutine:
            out = await self.listener(msgs)  # type: ignore[misc]
            return None if out is None or out is ConsumeResult.SUCCESS else ConsumeResult(out)
        if self._executor is not None:
            out = await asyncio.get_running_loop().run_in_executor(self._executor, self.listener, msgs)
        else:
            out = self.listener(msgs)
        if inspect.isawaitable(out):
            out = await out
        return None if out is None else ConsumeResult(out)

    def shutdown(self) -> None:
        """Release the threads (a call still running in one finishes on its own)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
