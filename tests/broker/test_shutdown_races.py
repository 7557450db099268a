"""The broker's periodic loops end when cancelled, even when the cancel meets their wake-up event in the
same loop iteration. Python 3.11's ``asyncio.wait_for`` returns instead of raising CancelledError there
(CPython gh-86296); a loop built on it went on running, and the standalone's shutdown waited for it for
ever (``standalone did not stop within 30s`` in about one run in three of tests/broker/test_bad_input.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from tidalmq.broker.out.broker_outer_api import BrokerOuterAPI
from tidalmq.broker.transaction.check_service import TransactionCheckService


async def _cancel_with_wakeup(task: asyncio.Task[None], wake: asyncio.Event) -> None:
    await asyncio.sleep(0.05)  # let the loop settle into its wait (it is waiting on ``wake`` when this ends)
    wake.set()  # what register_soon() / wakeup() do ...
    task.cancel()  # ... in the iteration of shutdown's cancel
    await asyncio.wait([task], timeout=5)
    assert task.cancelled(), "the loop swallowed its cancel and went on"


async def _registrations() -> None:
    pass


def test_register_loop_ends_when_cancelled_with_register_soon() -> None:
    async def body() -> None:
        stand_in = SimpleNamespace(_register_event=asyncio.Event(), _register_waiters=[], register_all=_registrations,
                                   config=SimpleNamespace(register_name_server_period=30_000))
        task = asyncio.ensure_future(BrokerOuterAPI.run(stand_in))  # type: ignore[arg-type]
        await _cancel_with_wakeup(task, stand_in._register_event)

    asyncio.run(body())


def test_a_wait_for_registration_ends_when_the_register_loop_is_cancelled() -> None:
    """BrokerOuterAPI.registered() (UPDATE_AND_CREATE_TOPIC's answer waits on it) asked while the loop
    waits for its next round, and shutdown cancels the loop in that iteration: the wait ends, the
    request is answered, nothing is left pending."""
    async def body() -> None:
        round_done = asyncio.Event()

        async def register_all() -> None:
            round_done.set()

        stand_in = SimpleNamespace(_register_event=asyncio.Event(), _register_waiters=[], register_all=register_all,
                                   config=SimpleNamespace(register_name_server_period=30_000),
                                   namesrv_addrs=lambda: ["127.0.0.1:9"])
        task = asyncio.ensure_future(BrokerOuterAPI.run(stand_in))  # type: ignore[arg-type]
        await round_done.wait()  # the first round has taken its waiters: a new one waits for the next
        waiting = asyncio.ensure_future(BrokerOuterAPI.registered(stand_in))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # registered() has queued its waiter and set the event ...
        assert stand_in._register_waiters and not waiting.done()
        task.cancel()  # ... and shutdown cancels the loop before it runs its round
        await asyncio.wait([task, waiting], timeout=5)
        assert task.cancelled()
        assert waiting.done() and waiting.exception() is None

    asyncio.run(body())


def test_transaction_check_loop_ends_when_cancelled_with_a_wakeup() -> None:
    async def body() -> None:
        stand_in = SimpleNamespace(_wake=None, interval_ms=60_000, run_round=lambda: None)
        task = asyncio.ensure_future(TransactionCheckService.run(stand_in))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert stand_in._wake is not None
        await _cancel_with_wakeup(task, stand_in._wake)

    asyncio.run(body())
