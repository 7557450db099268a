"""The enqueue round's reading of parked records: the whole-chunk path (one CommitLog view, columns, one
regex pass) reads what the record-by-record path reads, and hands back to it what it cannot check; for
ordinary timer messages it reads columns, and files them as the tuple path files them (their delete keys'
hashes left to a cancel, which finds the same)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tidalmq.common import message as mc
from tidalmq.common.message import encode_properties
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import encode_record
from tidalmq.schedule.timer_fields import FieldColumns
from tidalmq.schedule.timer_service import TimerMessageService
from tidalmq.schedule.timer_view import TopicCounts
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


Parked = tuple[TimerMessageService, np.ndarray, np.ndarray, np.ndarray]


def _parked_store(tmp_path: Path, parked: list[dict[str, str]], body_step: int = 97) -> Iterator[Parked]:
    """A store holding ``parked`` in the timer topic (record i's body 1 + ``body_step`` * i bytes): the
    service, and the records' CommitLog offsets, sizes and ConsumeQueue tags (their deliver times) as the
    enqueue round reads them."""
    cfg = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=4 << 20)
    store = DefaultMessageStore(cfg)
    assert store.load()
    store.start()
    recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"b" * (1 + body_step * i), properties=props,
                          born_timestamp=1, born_port=1, store_port=10911) for i, props in enumerate(parked)]
    assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
    assert store.wait_reput(store.max_phy_offset, 10)
    got = store.read_queue(TIMER_TOPIC, 0, 0, max(100, len(parked)))
    assert len(got) == len(parked)
    try:
        yield (TimerMessageService(store, tmp_path / "store", precision_ms=10), got.commit_log_offsets, got.sizes,
               got.tags_codes)
    finally:
        store.shutdown()


@pytest.fixture
def parked(tmp_path: Path) -> Iterator[Parked]:
    yield from _parked_store(tmp_path, PARKED)


def test_properties_holding_the_records_mark_are_read_record_by_record(tmp_path: Path) -> None:
    """The chunk path tells records apart by a mark (an empty name, a value that begins with \\x01) joined
    between their properties; a record that holds one itself is read by the record-by-record path."""
    odd = {mc.REAL_TOPIC: "T", "": "\x01x", mc.UNIQ_KEY: "U9", mc.TIMER_OUT_MS: "1700000000009"}
    for svc, phys, sizes, tags in _parked_store(tmp_path, [*PARKED[:2], odd, *PARKED[2:]]):
        assert svc.fields.chunk_fields(phys, sizes, tags) is None
        assert one_by_one(svc, phys, sizes)[2] == ("T", "U9", None, 1700000000009, 0)
        assert svc.fields.chunk_fields(phys[:2], sizes[:2], tags[:2]) == one_by_one(svc, phys[:2], sizes[:2])


def test_a_reschedules_copy_is_read_with_the_time_it_replaces(tmp_path: Path) -> None:
    """RESCHEDULED_FROM (schedule/reschedule.py) keeps a round off the column paths, which read no such field:
    the copy of a timer message comes out with the old deliver time its enqueue files a marker at."""
    moved = {mc.UNIQ_KEY: "U7", mc.RESCHEDULED_FROM: "timer:1700000000300", mc.REAL_TOPIC: "T", mc.REAL_QID: "0",
             mc.TIMER_OUT_MS: "1700000000900"}
    level = {**moved, mc.RESCHEDULED_FROM: "delay:3:4096"}  # a delay-level target: no marker in the timer
    plain = {k: v for k, v in moved.items() if k != mc.RESCHEDULED_FROM}
    ordinary = [{**plain, mc.UNIQ_KEY: "U8"}, {**plain, mc.UNIQ_KEY: "U9"}]  # read as columns, alone
    for svc, phys, sizes, tags in _parked_store(tmp_path, [*ordinary, moved, level]):
        fields = svc.fields.chunk_fields(phys, sizes, tags)
        assert isinstance(fields, list) and fields == one_by_one(svc, phys, sizes)
        assert fields[2] == ("T", "U7", None, 1700000000900, 1700000000300)
        assert fields[0] == ("T", "U8", None, 1700000000900, 0)
        assert fields[3] == ("T", "U7", None, 1700000000900, 0)
        assert isinstance(svc.fields.chunk_fields(phys[:2], sizes[:2], tags[:2]), FieldColumns)


def one_by_one(svc: TimerMessageService, phys: np.ndarray, sizes: np.ndarray) -> list[object]:
    return [svc.fields.fields_of(svc.fields.properties(int(p), int(s))) for p, s in zip(phys, sizes, strict=True)]


def test_the_chunk_reads_what_the_records_read(parked: Parked) -> None:
    svc, phys, sizes, tags = parked
    fields = svc.fields.chunk_fields(phys, sizes, tags)
    assert isinstance(fields, list), "the whole-chunk path declined records it should read"
    assert fields == one_by_one(svc, phys, sizes)
    assert fields[2] == ("Other", None, "T+U1", 1700000000000, 0)
    assert fields[3] is not None and fields[3][3] == 7
    assert fields[4] is not None and fields[4][3] == 0 and fields[5] == ("", "U5", None, 0, 0)
    assert fields[7] == ("Tü", "ü-key", None, 1700000000001, 0)
    # any part of the chunk: the same
    assert svc.fields.chunk_fields(phys[3:6], sizes[3:6], tags[3:6]) == one_by_one(svc, phys[3:6], sizes[3:6])


def test_what_the_chunk_cannot_check_goes_record_by_record(parked: Parked) -> None:
    svc, phys, sizes, tags = parked
    assert svc.fields.chunk_fields(phys[::-1], sizes[::-1], tags[::-1]) is None  # not in CommitLog order
    wrong = sizes.copy()
    wrong[1] += 1  # a size the record does not have
    assert svc.fields.chunk_fields(phys, wrong, tags) is None
    short = sizes.copy()
    short[0] = 8
    assert svc.fields.chunk_fields(phys, short, tags) is None


ORDINARY = [{mc.UNIQ_KEY: f"U{i}", "KEYS": "k", mc.REAL_TOPIC: "T" if i % 3 else "Tü", mc.REAL_QID: str(i % 4),
             mc.TIMER_OUT_MS: str(1700000000000 + 70_000 * i)} for i in range(7)]


def filed(svc: TimerMessageService, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray,
          fields: object) -> tuple[list[list[int]], dict[str, Counter[int]], int]:
    """What enqueue_chunk files from ``fields``: its entry columns, the per-topic counts (from zero), and
    how many it counts as new."""
    svc.metrics.topics = TopicCounts()
    entries: list[np.ndarray] = []
    enqueued = svc.enqueue.enqueue_chunk(phys, sizes, tags, fields, 0, 0, entries)  # type: ignore[arg-type]
    svc.enqueue.add_column_counts()  # as the round does after its chunks
    e = np.concatenate(entries)
    cols = [e[name].tolist() for name in ("deliver_ms", "offset", "size", "uhash", "flags")]
    return cols, {t: Counter(c) for t, c in svc.metrics.topics.by_topic.items()}, enqueued


def test_ordinary_timer_messages_are_read_as_columns_and_filed_alike(tmp_path: Path) -> None:
    for svc, phys, sizes, tags in _parked_store(tmp_path, ORDINARY):
        columns = svc.fields.chunk_fields(phys, sizes, tags)
        assert isinstance(columns, FieldColumns), "ordinary timer messages were not read as columns"
        assert [r.decode() for r in columns.real] == [p[mc.REAL_TOPIC] for p in ORDINARY]
        tuples = one_by_one(svc, phys, sizes)
        by_columns, by_tuples = filed(svc, phys, sizes, tags, columns), filed(svc, phys, sizes, tags, tuples)
        cols, counts, enqueued = by_columns
        # Filed alike but for the delete keys' hashes, which the columns leave to a cancel (TimerStore.key_hashes)
        # and which the store then finds as the tuple path does.
        hashes = by_tuples[0].pop(3)
        assert by_columns[0].pop(3) == [0] * len(ORDINARY) and 0 not in hashes
        assert by_columns == by_tuples
        assert svc.fields.key_hashes(phys, sizes).tolist() == hashes
        assert cols[0] == [int(p[mc.TIMER_OUT_MS]) for p in ORDINARY] and enqueued == len(ORDINARY)
        assert sum(counts["T"].values()) == 4 and sum(counts["Tü"].values()) == 3
        # a part of the round, and what is left once some were filed before a restart
        part_c, part_t = (filed(svc, phys[2:5], sizes[2:5], tags[2:5], f[2:5]) for f in (columns, tuples))
        part_t[0][3] = [0] * 3
        assert part_c == part_t
        low = int(phys[3])
        kept: list[np.ndarray] = []
        svc.enqueue.enqueue_chunk(phys, sizes, tags, columns, low, 0, kept)
        assert np.concatenate(kept)["offset"].tolist() == phys[3:].tolist()


@pytest.mark.parametrize("case", ["a second real topic", "a cancel", "a tag without a deliver time", "no real topic",
                                  "properties after the broker's", "the real topic first"])
def test_what_is_not_an_ordinary_timer_message_is_read_a_record_at_a_time(tmp_path: Path, case: str) -> None:
    """The column holds the n-th record's REAL_TOPIC in the n-th place: a record with two and another with
    none would shift every topic after them onto the wrong message (and their pending counts)."""
    parked = [dict(p) for p in ORDINARY]
    if case == "a second real topic":
        parked[1] = {"K\x01v\x02" + mc.REAL_TOPIC: "Again", **parked[1]}  # a second REAL_TOPIC in one record
        del parked[4][mc.REAL_TOPIC]
    elif case == "the real topic first":
        parked[3] = {mc.REAL_TOPIC: parked[3].pop(mc.REAL_TOPIC), **parked[3]}
    elif case == "a cancel":
        parked[2] = {**parked[2], mc.TIMER_DEL_UNIQKEY: "T+U0"}
    elif case == "a tag without a deliver time":
        del parked[5][mc.TIMER_OUT_MS]
    elif case == "no real topic":
        del parked[3][mc.REAL_TOPIC]
    else:  # not as the broker parks a message: its tail (REAL_TOPIC, REAL_QID, TIMER_OUT_MS) ends the properties
        parked[6] = {k: v for k, v in parked[6].items() if k != mc.UNIQ_KEY} | {mc.UNIQ_KEY: "U6"}
    for svc, phys, sizes, tags in _parked_store(tmp_path, parked):
        fields = svc.fields.chunk_fields(phys, sizes, tags)
        assert not isinstance(fields, FieldColumns)
        if fields is not None:
            assert fields == one_by_one(svc, phys, sizes)


def _tail_case(case: str) -> list[dict[str, str]]:
    parked = [{mc.UNIQ_KEY: f"U{i}", mc.REAL_TOPIC: f"T{i % 3}", mc.REAL_QID: str(10 ** (i % 4)),
               mc.TIMER_OUT_MS: str(1700000000000 + 70_000 * i)} for i in range(12)]
    if case == "one topic":
        for p in parked:
            p[mc.REAL_TOPIC] = "T0"
    elif case == "nine real topics":
        for i, p in enumerate(parked):
            p[mc.REAL_TOPIC] = f"T{i}"
    elif case == "a five-digit queue":
        parked[4][mc.REAL_QID] = "12345"
    elif case == "a cancel's name in a body":
        parked[0] = {"A": mc.TIMER_DEL_UNIQKEY + "\x01", **parked[0]}  # in a value: no cancel, still the regex pass
    elif case == "a deliver time written otherwise":
        parked[5][mc.TIMER_OUT_MS] = "0" + parked[5][mc.TIMER_OUT_MS]
    elif case == "the real topic first":
        # first, so no separator before its name; a properties length whose low byte is \x02 stands there
        first = {mc.REAL_TOPIC: parked[7].pop(mc.REAL_TOPIC), **parked[7]}
        pad = next(k for k in range(256) if len(encode_properties({**first, "F": "x" * k}).encode()) % 256 == 2)
        parked[7] = {**first, "F": "x" * pad}
        for name in (mc.REAL_QID, mc.TIMER_OUT_MS):  # the tail's last two where the broker puts them
            parked[7][name] = parked[7].pop(name)
    return parked


@pytest.mark.parametrize(("case", "in_place"), [
    ("three topics, queues of 1 to 4 digits", True), ("one topic", True), ("nine real topics", False), ("a five-digit queue", False),
    ("a cancel's name in a body", False), ("a deliver time written otherwise", False),
    ("the real topic first", False)])
def test_the_tails_read_in_place_name_each_records_real_topic(tmp_path: Path, case: str, in_place: bool) -> None:
    """An ordinary round's real topics are read from the tails the broker appends (tail_columns: numpy
    windows at each record's end, no search of its properties): the same topics as reading each record;
    what the windows cannot vouch for is left to the regex pass, which reads the same or declines."""
    from tidalmq.schedule.timer_fields import tail_columns

    parked = _tail_case(case)
    for svc, phys, sizes, tags in _parked_store(tmp_path, parked):
        first = int(phys[0])
        span_len = int(phys[-1] + sizes[-1]) - first
        span = svc.store.select_one_message_by_offset(first, span_len)
        assert span is not None
        starts = (phys - first).astype(np.int64)
        got = tail_columns(span, np.frombuffer(span, dtype=np.uint8), starts, starts + sizes, tags)
        assert (got is not None) == in_place
        fields = svc.fields.chunk_fields(phys, sizes, tags)
        reference = [f[0] for f in one_by_one(svc, phys, sizes)]  # type: ignore[index]
        if got is not None:
            assert [t.decode() for t in got.real] == reference == [p[mc.REAL_TOPIC] for p in parked]
            assert fields == got
            # filed and counted per topic as reading each record files them (the hashes aside: see above)
            by_columns = filed(svc, phys, sizes, tags, got)
            by_tuples = filed(svc, phys, sizes, tags, one_by_one(svc, phys, sizes))
            by_columns[0].pop(3), by_tuples[0].pop(3)
            assert by_columns == by_tuples
        elif isinstance(fields, FieldColumns):
            assert [t.decode() for t in fields.real] == reference
        elif fields is not None:
            assert fields == one_by_one(svc, phys, sizes)



@pytest.mark.parametrize("counted_before", [0, 100], ids=["all-new", "some-counted-before"])
def test_a_large_round_of_one_topic_is_counted_a_minute_at_a_time_alike(tmp_path: Path, counted_before: int) -> None:
    """A round of one real topic large enough to be counted with np.unique (_COUNT_UNIQUE_MIN) files and
    counts what reading each record files and counts; records already in the persisted counts (below the
    metrics mark) are left out either way."""
    from tidalmq.schedule import timer_enqueue

    n = timer_enqueue.COUNT_UNIQUE_MIN + 88
    parked = [{mc.UNIQ_KEY: f"L{i}", mc.REAL_TOPIC: "Big", mc.REAL_QID: str(i % 4),
               mc.TIMER_OUT_MS: str(1700000000000 + 7_919 * i * i % 5_400_000)} for i in range(n)]
    for svc, phys, sizes, tags in _parked_store(tmp_path, parked, body_step=3):
        svc.metrics.mark = int(phys[counted_before])
        columns = svc.fields.chunk_fields(phys, sizes, tags)
        assert isinstance(columns, FieldColumns)
        by_columns = filed(svc, phys, sizes, tags, columns)
        by_tuples = filed(svc, phys, sizes, tags, one_by_one(svc, phys, sizes))
        by_columns[0].pop(3), by_tuples[0].pop(3)  # the delete keys' hashes: see above
        assert by_columns == by_tuples
        minutes = Counter(int(p[mc.TIMER_OUT_MS]) // 60_000 for p in parked[counted_before:])
        assert by_columns[1] == {"Big": minutes}
