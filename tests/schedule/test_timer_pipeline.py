"""Pipelined delivery batches (the schedule process keeps several puts in flight to the broker): stored in
order and exactly once, also when the broker refuses one of them while later ones are in flight."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support import wait_for
from tidalmq.common import message as mc
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import decode_record, encode_record
from tidalmq.schedule import timer_service
from tidalmq.schedule.timer_service import TimerMessageService
from tidalmq.store.config import MessageStoreConfig
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


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    cfg = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=4 << 20)
    s = DefaultMessageStore(cfg)
    assert s.load()
    s.start()
    yield s
    s.shutdown()


@pytest.mark.parametrize("fail_at", [0, 3], ids=["all-accepted", "third-refused"])
def test_pipelined_batches_are_stored_in_order_exactly_once(store: DefaultMessageStore, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, fail_at: int) -> None:
    monkeypatch.setattr(timer_service, "DELIVER_BATCH", 100)  # a dozen batches
    due0 = int(time.time() * 1000) - 5000  # all due already: delivered as fast as the batches go
    recs = []
    for i in range(N):
        d = due0 + i  # distinct deliver times, sent out of order
        props = {mc.REAL_TOPIC: "Pipe", mc.REAL_QID: str(i % QUEUES), mc.UNIQ_KEY: f"U{i}", mc.TIMER_OUT_MS: str(d)}
        recs.append(encode_record(topic=TIMER_TOPIC, queue_id=0, body=str(d).encode(), properties=props,
                                  born_timestamp=1, born_port=1, store_port=10911))
    recs = recs[1::2] + recs[0::2]
    assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
    broker = BrokerSide(store, fail_at)
    svc = TimerMessageService(store, tmp_path / "store", precision_ms=10, pipeline=broker, pipeline_depth=3)
    svc.load()
    svc.start()
    try:
        wait_for(lambda: sum(store.queue_range("Pipe", q).max_offset for q in range(QUEUES)) >= N, 30,
                 what="every message delivered")
        time.sleep(0.2)  # a duplicate would come right behind
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
    assert svc.stats.snapshot()["delivered"] == N
