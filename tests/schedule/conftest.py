from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidalmq.schedule import TimerStore
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.message_store import DefaultMessageStore


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
        args: dict[str, Any] = {"precision_ms": 10, "slot_ms": 100, "wheel_slots": 20, "records_per_segment": 64}
        args.update(kw)
        s = TimerStore(str(tmp_path / "timer"), clock=clock, **args)
        s.load()
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    """A started message store under the test's temp dir (4 MiB CommitLog files), for a timer service."""
    cfg = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=4 << 20)
    s = DefaultMessageStore(cfg)
    assert s.load()
    s.start()
    yield s
    s.shutdown()
