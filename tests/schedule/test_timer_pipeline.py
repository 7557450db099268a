"""Pipelined delivery batches (the schedule process keeps several puts in flight to the broker): stored in
order and exactly once, also when the broker refuses one of them while later ones are in flight."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.support import wait_for
from tidalmq.common import message as mc
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import decode_record, encode_record
from tidalmq.schedule import timer_deliver, timer_service
from tidalmq.schedule.timer_service import TimerMessageService
from tidalmq.store.message_store import AppendResult, DefaultMessageStore, PutRequest, PutStatus

N = 1200
QUEUES = 2


class BrokerSide:
    """TimerProcess's rule for pipelined puts, in process: puts are stored in the order made; the put
    numbered ``fail_at`` is refused, and so is every later one until ``resume()``."""

    def __init__(self, store: DefaultMessageStore, fail_at: int) -> None:
        self.store, self.fail_at = store, fail_at
        self.puts = self.in_flight = self.most_in_flight = self.resumed = 0
        self.refusing = False

    def submit_put(self, requests: Sequence[PutRequest]) -> Callable[[], list[AppendResult]]:
        self.puts += 1
        if self.puts == self.fail_at or self.refusing:
            self.refusing = True
            statuses = [PutStatus.SERVICE_NOT_AVAILABLE] * len(requests)
        else:
            statuses = [r.status for r in self.store.put_messages(requests)]
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)

        def wait() -> list[AppendResult]:
            self.in_flight -= 1
            return [AppendResult(s, msg_num=len(r.records)) for s, r in zip(statuses, requests, strict=True)]

        return wait

    def resume(self) -> None:
        self.refusing = False
        self.resumed += 1


@pytest.mark.parametrize("fail_at", [0, 3], ids=["all-accepted", "third-refused"])
def test_pipelined_batches_are_stored_in_order_exactly_once(store: DefaultMessageStore, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, fail_at: int) -> None:
    monkeypatch.setattr(timer_deliver, "DELIVER_BATCH", 100)  # a dozen batches
    due0 = int(time.time() * 1000) - 5000  # all due already: delivered as fast as the batches go
    recs = []
    for i in range(N):
        d = due0 + i  # distinct deliver times, sent out of order
        props = {mc.REAL_TOPIC: "Pipe", mc.REAL_QID: str(i % QUEUES), mc.UNIQ_KEY: f"U{i}", mc.TIMER_OUT_MS: str(d)}
        recs.append(encode_record(topic=TIMER_TOPIC, queue_id=0, body=str(d).encode(), properties=props,
                                  born_timestamp=1, born_port=1, store_port=10911))
    recs = recs[1::2] + recs[0::2]
    # due after every other, in a topic of its own: once it is delivered, so is (or was) everything before it
    sentinel = {mc.REAL_TOPIC: "PipeEnd", mc.REAL_QID: "0", mc.UNIQ_KEY: "sentinel", mc.TIMER_OUT_MS: str(due0 + N + 50)}
    recs.append(encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"sentinel", properties=sentinel,
                              born_timestamp=1, born_port=1, store_port=10911))
    assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
    broker = BrokerSide(store, fail_at)
    svc = TimerMessageService(store, tmp_path / "store", precision_ms=10, pipeline=broker, pipeline_depth=3)
    svc.load()
    svc.start()
    try:
        wait_for(lambda: store.queue_range("PipeEnd", 0).max_offset >= 1, 30, what="the sentinel delivered")
    finally:
        svc.shutdown()
    got: Counter[str] = Counter()
    for q in range(QUEUES):
        entries = store.read_queue("Pipe", q, 0, 2 * N)
        msgs = [decode_record(store.select_one_message_by_offset(int(o), int(s)))  # type: ignore[arg-type]
                for o, s in zip(entries.commit_log_offsets, entries.sizes, strict=True)]
        got.update(m.properties[mc.UNIQ_KEY] for m in msgs)
        deliver = [int(m.body) for m in msgs]
        assert deliver == sorted(deliver), f"queue {q} out of deliver order"
    assert got == Counter(f"U{i}" for i in range(N)), "lost or duplicated"
    assert broker.most_in_flight >= 2, "the batches were not pipelined"
    assert broker.resumed == (1 if fail_at else 0)
    assert svc.stats.snapshot()["delivered"] == N + 1


def test_deliveries_go_on_while_the_durable_commit_waits_for_the_disk(store: DefaultMessageStore, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The once-a-second commit (TimerLog and wheel synced, checkpoint written) runs on the TimerFlush
    thread without the service's lock: a write-back that takes long (a busy disk) holds up no delivery,
    and the checkpoint follows once the sync returns."""
    from tidalmq.schedule.timer_checkpoint import TimerCheckpoint
    from tidalmq.schedule.timer_store import TimerStore

    in_sync, release = threading.Event(), threading.Event()
    real = TimerStore.sync_point

    def slow_sync(self: TimerStore, point: object) -> None:
        if threading.current_thread().name == "TimerFlush":  # not load's, nor shutdown's
            in_sync.set()
            assert release.wait(30)
        real(self, point)  # type: ignore[arg-type]

    monkeypatch.setattr(TimerStore, "sync_point", slow_sync)

    def put(n: int, due: int, tag: str) -> None:
        recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=str(due).encode(), born_timestamp=1, born_port=1,
                              store_port=10911, properties={mc.REAL_TOPIC: "Busy", mc.REAL_QID: "0",
                                                            mc.UNIQ_KEY: f"{tag}{i}", mc.TIMER_OUT_MS: str(due)})
                for i in range(n)]
        assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))

    svc = TimerMessageService(store, tmp_path / "store", precision_ms=10)
    svc.load()
    svc.start()
    try:
        put(10, int(time.time() * 1000) + 100, "A")
        wait_for(lambda: store.queue_range("Busy", 0).max_offset >= 10, 10, what="the first messages delivered")
        assert in_sync.wait(10), "no durable commit began"
        put(10, int(time.time() * 1000) + 100, "B")  # due while the commit's sync is held
        wait_for(lambda: store.queue_range("Busy", 0).max_offset >= 20, 10,
                 what="messages delivered while the commit waited for the disk")
        assert not release.is_set()
        cp = TimerCheckpoint.read(tmp_path / "store" / "timercheck")
        assert cp is not None
        held_at = (cp.read_ms, cp.read_offset)
        release.set()
        # the checkpoint catches up: its read cursor passes every delivered message
        last = int(store.read_queue(TIMER_TOPIC, 0, 19, 1).commit_log_offsets[0])

        def committed() -> bool:
            c = TimerCheckpoint.read(tmp_path / "store" / "timercheck")
            return c is not None and (c.read_ms, c.read_offset) > held_at and c.enqueue_offset > last
        wait_for(committed, 10, what="the checkpoint written after the sync")
    finally:
        release.set()
        svc.shutdown()


def test_a_failing_commit_is_logged_once_retried_and_logged_again_when_it_succeeds(
        store: DefaultMessageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A disk that refuses the timer's commit (ENOSPC) gets one ERROR line, not one a second; deliveries go
    on; the commit is retried and, once it succeeds, one line says so and the checkpoint moves."""
    import errno
    import logging

    from tidalmq.schedule.timer_checkpoint import TimerCheckpoint
    from tidalmq.schedule.timer_store import TimerStore

    monkeypatch.setattr(timer_service, "SYNC_INTERVAL_MS", 50)
    monkeypatch.setattr(timer_service, "IDLE_WAIT_S", 0.05)
    failures = [0]
    real = TimerStore.sync_point

    def refusing(self: TimerStore, point: object) -> None:
        if threading.current_thread().name == "TimerFlush" and failures[0] < 4:
            failures[0] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, point)  # type: ignore[arg-type]

    monkeypatch.setattr(TimerStore, "sync_point", refusing)
    due = int(time.time() * 1000) + 100
    recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=str(due).encode(), born_timestamp=1, born_port=1,
                          store_port=10911, properties={mc.REAL_TOPIC: "Full", mc.REAL_QID: "0",
                                                        mc.UNIQ_KEY: f"F{i}", mc.TIMER_OUT_MS: str(due)})
            for i in range(5)]
    assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
    svc = TimerMessageService(store, tmp_path / "store", precision_ms=10)
    svc.load()
    before = TimerCheckpoint.read(tmp_path / "store" / "timercheck")
    assert before is not None
    with caplog.at_level(logging.INFO, logger=timer_service.__name__):
        svc.start()
        try:
            wait_for(lambda: store.queue_range("Full", 0).max_offset >= 5, 10, what="delivered while the commit fails")

            def committed() -> bool:
                cp = TimerCheckpoint.read(tmp_path / "store" / "timercheck")
                return failures[0] >= 4 and cp is not None and (cp.read_ms, cp.read_offset) > (before.read_ms, before.read_offset)
            wait_for(committed, 15, what="the commit made once the disk takes it")
        finally:
            svc.shutdown()
    lines = [r for r in caplog.records if "timer store commit" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.ERROR, logging.WARNING], [r.getMessage() for r in lines]
    assert "No space left on device" in lines[0].getMessage() and lines[0].exc_info is None
