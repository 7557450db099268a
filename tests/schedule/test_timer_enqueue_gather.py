"""Enqueue rounds that wait for more (ENQUEUE_GATHER_MS): arrivals due well ahead are filed in one round
instead of one round per arrival; the wait is bounded, a full round does not wait, and an entry due soon
ends the wait at once."""

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
from tidalmq.schedule import timer_enqueue, timer_fields
from tidalmq.schedule.timer_enqueue import TimerEnqueue
from tidalmq.schedule.timer_fields import EnqueueFields
from tidalmq.schedule.timer_service import TimerMessageService
from tidalmq.schedule.timer_store import TimerStore
from tidalmq.store.message_store import DefaultMessageStore, PutRequest, PutStatus

TOPIC = "Gather"
GATHER_MS = 3000  # far longer than the test's own steps take: a round that waits shows it


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each enqueue round the timer store is given."""
    sizes: list[int] = []
    real = TimerStore.enqueue

    def enqueue(self: TimerStore, entries: np.ndarray, enqueue_commit_offset: int):
        if len(entries):
            sizes.append(len(entries))
        return real(self, entries, enqueue_commit_offset)

    monkeypatch.setattr(TimerStore, "enqueue", enqueue)
    monkeypatch.setattr(timer_enqueue, "ENQUEUE_GATHER_MS", GATHER_MS)
    return sizes


def park(store: DefaultMessageStore, svc: TimerMessageService, deliver_ms: list[int], tag: str) -> None:
    """Timer messages as the send path parks them, then the arrival as reput tells it."""
    recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"b", born_timestamp=1, born_port=1, store_port=10911,
                          properties={mc.REAL_TOPIC: TOPIC, mc.REAL_QID: "0", mc.UNIQ_KEY: f"{tag}{i}",
                                      mc.TIMER_OUT_MS: str(d)})
            for i, d in enumerate(deliver_ms)]
    assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
    assert store.wait_reput(store.max_phy_offset, 10)
    svc.on_arrival({(TIMER_TOPIC, 0): len(recs)})


@pytest.fixture
def svc(store: DefaultMessageStore, tmp_path: Path, rounds: list[int]) -> Iterator[TimerMessageService]:
    """A started timer service over ``store``, its rounds counted (``rounds``)."""
    s = TimerMessageService(store, tmp_path / "store", precision_ms=10)
    s.load()
    s.start()
    yield s
    s.shutdown()


def delivered_on_time(store: DefaultMessageStore, due_ms: int) -> None:
    """The one message due at ``due_ms`` is in its topic well before a wait could run out, not late."""
    wait_for(lambda: store.queue_range(TOPIC, 0).max_offset == 1, GATHER_MS / 1000 / 2,
             what="the message due soon delivered before a wait could run out")
    assert now_ms() - due_ms < 200, "delivered late"


def now_ms() -> int:
    return int(time.time() * 1000)


def test_arrivals_due_well_ahead_are_filed_in_one_round_within_the_bound(
        store: DefaultMessageStore, svc: TimerMessageService, rounds: list[int]) -> None:
    began = time.monotonic()
    far = now_ms() + 3_600_000
    for g in range(10):  # ten arrivals, as ten STATEs of a burst would tell them
        park(store, svc, [far + 50 * g + i for i in range(50)], f"G{g}-")
    wait_for(lambda: svc.stats.snapshot()["enqueued"] == 500, GATHER_MS / 1000 + 10,
             what="the gathered entries filed once the wait ran out")
    assert rounds == [500], rounds
    assert time.monotonic() - began >= GATHER_MS / 1000 * 0.9  # they waited for more, as long as allowed


def test_a_full_round_is_filed_without_waiting(store: DefaultMessageStore, svc: TimerMessageService, rounds: list[int]) -> None:
    far = now_ms() + 3_600_000
    began = time.monotonic()
    park(store, svc, [far + i for i in range(timer_enqueue.ENQUEUE_BATCH)], "F")
    wait_for(lambda: svc.stats.snapshot()["enqueued"] == timer_enqueue.ENQUEUE_BATCH, 10, what="a full round")
    assert time.monotonic() - began < GATHER_MS / 1000 / 2
    assert rounds == [timer_enqueue.ENQUEUE_BATCH]


def test_an_entry_due_soon_ends_the_wait_and_is_delivered_on_time(
        store: DefaultMessageStore, svc: TimerMessageService, rounds: list[int]) -> None:
    far = now_ms() + 3_600_000
    park(store, svc, [far + i for i in range(50)], "W")  # these wait for more
    soon = now_ms() + 300  # due within the margin the wait keeps: ends it
    park(store, svc, [soon], "S")
    delivered_on_time(store, soon)
    assert svc.stats.snapshot()["enqueued"] == 51  # filed together with those that waited
    assert sum(rounds) == 51


def test_a_first_arrival_due_soon_is_filed_at_once(store: DefaultMessageStore, svc: TimerMessageService, rounds: list[int]) -> None:
    soon = now_ms() + 300
    park(store, svc, [soon, now_ms() + 3_600_000], "E")  # one of them due within the margin: no wait
    delivered_on_time(store, soon)
    assert rounds == [2]


def test_a_round_stops_after_a_chunk_once_a_delivery_is_due_and_is_whole_otherwise(
        store: DefaultMessageStore, tmp_path: Path, rounds: list[int]) -> None:
    """Deliveries come first: a round that reads a full batch while a filed message is due files
    ENQUEUE_MIN entries and stops (the deliver rounds run next); with nothing due it files all it read."""
    clock = [now_ms()]
    s = TimerMessageService(store, tmp_path / "store", precision_ms=10, clock=lambda: clock[0])
    s.load()
    try:
        due = clock[0] + 1000
        park(store, s, [due], "D")
        assert s.enqueue.enqueue_round() and rounds == [1]
        park(store, s, [clock[0] + 3_600_000 + i for i in range(2 * timer_enqueue.ENQUEUE_BATCH)], "F")
        assert s.enqueue.enqueue_round()  # the due one a second away: the whole round
        assert rounds == [1, timer_enqueue.ENQUEUE_BATCH]
        clock[0] = due  # now it is due: a chunk, then the round gives way
        assert s.enqueue.enqueue_round()
        assert rounds == [1, timer_enqueue.ENQUEUE_BATCH, timer_enqueue.ENQUEUE_MIN]
    finally:
        s.shutdown()


def test_a_round_of_large_records_stops_where_its_span_would_exceed_one_view(
        store: DefaultMessageStore, tmp_path: Path, rounds: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A round reads its records' fields from one view of the CommitLog, at most timer_fields.SPAN_MAX bytes: a full
    batch of large records is filed over several rounds, each one view, none record by record."""
    monkeypatch.setattr(timer_fields, "SPAN_MAX", 64 * 1024)
    s = TimerMessageService(store, tmp_path / "store", precision_ms=10)
    s.load()
    views: list[bool] = []
    real = EnqueueFields.chunk_fields

    def chunk_fields(self: EnqueueFields, phys: np.ndarray, sizes: np.ndarray, deliver: np.ndarray):
        got = real(self, phys, sizes, deliver)
        views.append(got is not None)
        return got

    monkeypatch.setattr(EnqueueFields, "chunk_fields", chunk_fields)
    monkeypatch.setattr(TimerEnqueue, "_gathering", lambda self, n, deliver: False)  # rounds at once
    try:
        far = now_ms() + 3_600_000
        recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"b" * 3000, born_timestamp=1, born_port=1,
                              store_port=10911, properties={mc.REAL_TOPIC: TOPIC, mc.REAL_QID: "0",
                                                            mc.UNIQ_KEY: f"L{i}", mc.TIMER_OUT_MS: str(far + i)})
                for i in range(50)]
        size = len(recs[0])
        assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
        assert store.wait_reput(store.max_phy_offset, 10)
        while s.enqueue.enqueue_round():
            pass
        fit = 64 * 1024 // size
        assert rounds == [fit] * (50 // fit) + ([50 % fit] if 50 % fit else [])
        assert views and all(views), "a round read record by record"
        assert s.stats.snapshot()["enqueued"] == 50
    finally:
        s.shutdown()
