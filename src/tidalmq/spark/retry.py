"""Retries with backoff for the Spark source and its driver-side queries (no pyspark here).

A broker restart or a NameServer blip shows as a refused or broken connection, a timeout, or a broker's
"busy / not available" answer; those are tried again (``RetryPolicy``: pause doubling from
``fetchOffset.retryIntervalMs`` to 2 s, until ``retryDeadlineMs``, as Kafka's clients give up after
``default.api.timeout.ms``; the driver's queries are tried at least ``fetchOffset.numRetries`` times more
even past a short deadline). Anything else (a refused subscription, a topic that does not exist) fails
at once. When the retries run out the error names the operation, the tries, the time and the last cause.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tidalmq.client.errors import IllegalStateError, MQBrokerError, MQClientError, ValidationError
from tidalmq.remoting.codes import ResponseCode
from tidalmq.spark.options import RetryPolicy

T = TypeVar("T")

# Broker answers that say "not now" rather than "no" (SYSTEM_ERROR is also "no": a refused subscription).
_TRANSIENT_CODES = frozenset({ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE})


def transient(e: BaseException) -> bool:
    """Whether trying again later may succeed."""
    if isinstance(e, ValidationError | IllegalStateError):
        return False
    if isinstance(e, MQBrokerError):
        return e.code in _TRANSIENT_CODES
    return isinstance(e, MQClientError | TimeoutError | ConnectionError)


def describe(e: BaseException) -> str:
    """The cause, saying whether the broker answered or the client could not get an answer."""
    if isinstance(e, MQBrokerError):
        return f"broker answered {e.code}: {e.remark}"
    if isinstance(e, MQClientError):
        return f"client-side error {e.code}: {e.remark}"
    return f"client-side error: {type(e).__name__}: {e}"


def gives_up(policy: RetryPolicy, tries: int, elapsed_s: float, counted: bool) -> bool:
    """Whether a call that failed ``tries`` times stops: the deadline bounds every retry (a caught-up
    stream waiting out a 30 s outage must not end after a count of short pauses), and ``counted`` calls
    get their ``num_retries`` retries even where the deadline is shorter."""
    if elapsed_s <= policy.deadline_s:
        return False
    return not counted or tries > policy.num_retries


class RetriesExhausted(RuntimeError):
    """Retries ran out; ``__cause__`` is the last failure."""


def _exhausted(what: str, tries: int, began: float, policy: RetryPolicy, last: BaseException) -> RetriesExhausted:
    return RetriesExhausted(
        f"{what} failed after {tries} tries over {time.monotonic() - began:.1f} s (fetchOffset.numRetries="
        f"{policy.num_retries}, retryDeadlineMs={int(policy.deadline_s * 1000)}): {describe(last)}")


def _pause_after(e: BaseException, policy: RetryPolicy, what: str, tries: int, began: float, counted: bool) -> float:
    """The pause before the next try after failure ``e`` (called while it is handled); raises it again when it
    is not transient, and RetriesExhausted when the policy gives up."""
    if not transient(e):
        raise e
    pause = policy.pause(tries)
    if gives_up(policy, tries, time.monotonic() + pause - began, counted):
        raise _exhausted(what, tries, began, policy, e) from e
    return pause


async def retry_async(call: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str, *,
                      counted: bool = True) -> T:
    """``await call()`` until it succeeds or fails for good: retried until the deadline; ``counted`` (the
    driver's queries): and at least ``num_retries`` times, whatever the deadline."""
    began = time.monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            return await call()
        except BaseException as e:  # noqa: BLE001 - sorted by _pause_after
            pause = _pause_after(e, policy, what, tries, began, counted)
        await asyncio.sleep(pause)


def retry_sync(call: Callable[[], T], policy: RetryPolicy, what: str, *, counted: bool = True) -> T:
    """``call()`` (a blocking call) with the same rules as ``retry_async``."""
    began = time.monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            return call()
        except BaseException as e:  # noqa: BLE001 - sorted by _pause_after
            pause = _pause_after(e, policy, what, tries, began, counted)
        time.sleep(pause)
