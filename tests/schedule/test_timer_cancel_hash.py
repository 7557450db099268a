"""Ordinary timer messages are filed without their delete key's hash (the enqueue round reads them as
columns and leaves it out); a cancel that comes in a later round still finds its one target among others
due the same millisecond, before and after a restart: the store hashes the candidates' keys then."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support import wait_for
from tidalmq.common import message as mc
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import encode_record
from tidalmq.schedule.timer_log import MAGIC_DELETE
from tidalmq.schedule.timer_service import TimerMessageService
from tidalmq.schedule.timer_store import TimerStore
from tidalmq.store.message_store import DefaultMessageStore, PutRequest, PutStatus

TOPIC = "CancelLater"


@pytest.fixture
def filed(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """The entries of every enqueue round, as the timer store is given them."""
    rounds: list[np.ndarray] = []
    real = TimerStore.enqueue

    def enqueue(self: TimerStore, entries: np.ndarray, enqueue_commit_offset: int):
        rounds.append(entries.copy())
        return real(self, entries, enqueue_commit_offset)

    monkeypatch.setattr(TimerStore, "enqueue", enqueue)
    return rounds


def put(store: DefaultMessageStore, svc: TimerMessageService, props: list[dict[str, str]]) -> None:
    """Records as the send path parks them (the client's properties, then REAL_TOPIC, REAL_QID and
    TIMER_OUT_MS), then the arrival as reput tells it."""
    recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=p[mc.UNIQ_KEY].encode(), born_timestamp=1, born_port=1,
                          store_port=10911, properties=p) for p in props]
    assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
    assert store.wait_reput(store.max_phy_offset, 10)
    svc.on_arrival({(TIMER_TOPIC, 0): len(recs)})


def parked(uniq: str, deliver_ms: int, **extra: str) -> dict[str, str]:
    return {mc.UNIQ_KEY: uniq, **extra, mc.REAL_TOPIC: TOPIC, mc.REAL_QID: "0", mc.TIMER_OUT_MS: str(deliver_ms)}


def started(store: DefaultMessageStore, root: Path) -> TimerMessageService:
    svc = TimerMessageService(store, root, precision_ms=10)
    svc.load()
    svc.start()
    return svc


@pytest.fixture
def svc(store: DefaultMessageStore, tmp_path: Path) -> Iterator[list[TimerMessageService]]:
    """The running service, in a list a test may replace it in (a restart)."""
    running = [started(store, tmp_path / "store")]
    yield running
    running[0].shutdown()


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after-a-restart"])
def test_a_later_cancel_drops_its_one_target_among_those_due_the_same_millisecond(
        store: DefaultMessageStore, svc: list[TimerMessageService], filed: list[np.ndarray], tmp_path: Path,
        restart: bool) -> None:
    due = int(time.time() * 1000) + 2500
    targets = [parked(f"KEEP-A-{restart}", due), parked(f"DROP-{restart}", due), parked(f"KEEP-B-{restart}", due)]
    later = parked(f"LATER-{restart}", due + 300)  # due after them: once it is delivered, they were judged
    put(store, svc[0], [*targets, later])
    wait_for(lambda: sum(len(r) for r in filed) == 4, 10, what="the targets enqueued")
    assert all((r["uhash"] == 0).all() for r in filed), "the targets were filed with their hashes: not the columns"
    if restart:
        svc[0].shutdown()
        svc[0] = started(store, tmp_path / "store")
    cancel = parked(f"CANCEL-{restart}", due, **{mc.TIMER_DEL_UNIQKEY: f"{TOPIC}+DROP-{restart}"})
    put(store, svc[0], [cancel])
    wait_for(lambda: any((r["flags"] & MAGIC_DELETE).any() for r in filed), 10, what="the cancel enqueued")
    assert now_ms() < due, "the cancel came after its target's time: the test proves nothing"
    wait_for(lambda: store.queue_range(TOPIC, 0).max_offset >= 3, 10, what="the deliveries")
    got = store.read_queue(TOPIC, 0, 0, 10)
    bodies = sorted(bytes(store.look_message_by_offset(int(p), int(s)).body)  # type: ignore[union-attr]
                    for p, s in zip(got.commit_log_offsets, got.sizes, strict=True))
    assert bodies == sorted(f"{k}-{restart}".encode() for k in ("KEEP-A", "KEEP-B", "LATER"))


def now_ms() -> int:
    return int(time.time() * 1000)
