from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tidalmq.schedule import TimerStore


class Clock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_store(tmp_path: Path, clock: Clock) -> Iterator[Callable[..., TimerStore]]:
    """Open a small-geometry store (100 ms slots, 2 s horizon, 64-record segments) with the fake clock."""
    opened: list[TimerStore] = []

    def make(**kw: int) -> TimerStore:
        args = {"precision_ms": 10, "slot_ms": 100, "wheel_slots": 20, "records_per_segment": 64}
        args.update(kw)
        s = TimerStore(str(tmp_path / "timer"), clock=clock, **args)
        s.load()
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()
