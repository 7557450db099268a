"""The enqueue round's reading of parked records: the whole-chunk path (one CommitLog view, columns, one
regex pass) reads what the record-by-record path reads, and hands back to it what it cannot check."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tidalmq.common import message as mc
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import encode_record
from tidalmq.schedule.timer_service import TimerMessageService
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.message_store import DefaultMessageStore, PutRequest, PutStatus

PARKED = [
    {mc.REAL_TOPIC: "T", mc.REAL_QID: "0", mc.UNIQ_KEY: "U1", mc.TIMER_OUT_MS: "1700000000000"},
    {mc.REAL_TOPIC: "T", mc.REAL_QID: "1", mc.TIMER_OUT_MS: "1700000000500"},  # no UNIQ_KEY
    {mc.REAL_TOPIC: "Other", mc.TIMER_DEL_UNIQKEY: "T+U1", mc.TIMER_OUT_MS: "1700000000000"},  # a cancel
    {mc.REAL_TOPIC: "T", mc.UNIQ_KEY: "U3", mc.TIMER_OUT_MS: "+7"},  # not all digits: read as int() reads it
    {mc.REAL_TOPIC: "T", mc.UNIQ_KEY: "U4", mc.TIMER_OUT_MS: "soon"},  # unreadable: 0
    {mc.UNIQ_KEY: "U5", "KEYS": "a b", "TAGS": "x"},  # no REAL_TOPIC, no TIMER_OUT_MS
    {mc.REAL_TOPIC: "T", mc.UNIQ_KEY: "first", "k": "v", mc.UNIQ_KEY + "2": "x", mc.TIMER_OUT_MS: "9"},
    {mc.REAL_TOPIC: "Tü", mc.UNIQ_KEY: "ü-key", mc.TIMER_OUT_MS: "1700000000001"},  # UTF-8 beyond ASCII
]


def _parked_store(tmp_path: Path, parked: list[dict[str, str]]
                  ) -> Iterator[tuple[TimerMessageService, np.ndarray, np.ndarray]]:
    cfg = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=4 << 20)
    store = DefaultMessageStore(cfg)
    assert store.load()
    store.start()
    recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"b" * (1 + 97 * i), properties=props,
                          born_timestamp=1, born_port=1, store_port=10911) for i, props in enumerate(parked)]
    assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
    assert store.wait_reput(store.max_phy_offset, 10)
    got = store.read_queue(TIMER_TOPIC, 0, 0, 100)
    assert len(got) == len(parked)
    try:
        yield TimerMessageService(store, tmp_path / "store", precision_ms=10), got.commit_log_offsets, got.sizes
    finally:
        store.shutdown()


@pytest.fixture
def parked(tmp_path: Path) -> Iterator[tuple[TimerMessageService, np.ndarray, np.ndarray]]:
    yield from _parked_store(tmp_path, PARKED)


def test_properties_holding_the_records_mark_are_read_record_by_record(tmp_path: Path) -> None:
    """The chunk path tells records apart by a mark (an empty name, a value that begins with \\x01) joined
    between their properties; a record that holds one itself is read by the record-by-record path."""
    odd = {mc.REAL_TOPIC: "T", "": "\x01x", mc.UNIQ_KEY: "U9", mc.TIMER_OUT_MS: "1700000000009"}
    for svc, phys, sizes in _parked_store(tmp_path, [*PARKED[:2], odd, *PARKED[2:]]):
        assert svc._chunk_fields(phys, sizes) is None
        assert one_by_one(svc, phys, sizes)[2] == ("T", "U9", None, 1700000000009)
        assert svc._chunk_fields(phys[:2], sizes[:2]) == one_by_one(svc, phys[:2], sizes[:2])


def one_by_one(svc: TimerMessageService, phys: np.ndarray, sizes: np.ndarray) -> list[object]:
    return [svc._fields_of(svc._properties(int(p), int(s))) for p, s in zip(phys, sizes, strict=True)]


def test_the_chunk_reads_what_the_records_read(parked: tuple[TimerMessageService, np.ndarray, np.ndarray]) -> None:
    svc, phys, sizes = parked
    fields = svc._chunk_fields(phys, sizes)
    assert fields is not None, "the whole-chunk path declined records it should read"
    assert fields == one_by_one(svc, phys, sizes)
    assert fields[2] == ("Other", None, "T+U1", 1700000000000)
    assert fields[3][3] == 7 and fields[4][3] == 0 and fields[5] == ("", "U5", None, 0)
    assert fields[7] == ("Tü", "ü-key", None, 1700000000001)
    # any part of the chunk: the same
    assert svc._chunk_fields(phys[3:6], sizes[3:6]) == one_by_one(svc, phys[3:6], sizes[3:6])


def test_what_the_chunk_cannot_check_goes_record_by_record(
        parked: tuple[TimerMessageService, np.ndarray, np.ndarray]) -> None:
    svc, phys, sizes = parked
    assert svc._chunk_fields(phys[::-1], sizes[::-1]) is None  # not in CommitLog order
    wrong = sizes.copy()
    wrong[1] += 1  # a size the record does not have
    assert svc._chunk_fields(phys, wrong) is None
    short = sizes.copy()
    short[0] = 8
    assert svc._chunk_fields(phys, short) is None
