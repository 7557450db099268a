"""A batch whose messages share one property layout is read as columns (``record_batch.batch_layout``): what
the checks, the dispatch and the timer rewrite read from it must be what reading each record finds."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from tidalmq.common.record import dispatch_properties, properties_span
from tidalmq.common.record_batch import RecordBatch, encode_batch_records

_NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "__LITE_TOPIC", "DELAY", "TIMER_OUT_MS", "WAIT", "A", "TIMER_DELIVER_MS"]
_VALUES = st.sampled_from(["", "v", "tag a", "C0A8", "x\x01y", "\x01", "é", "12"])
_CHANGES = st.sampled_from(["none", "swap", "drop", "extra", "unended", "mark", "twice"])


def _batch(records: list[list[tuple[str, str]]], unended_last: bool = False) -> RecordBatch:
    parts = []
    for i, fields in enumerate(records):
        pb = "".join(f"{k}\x01{v}\x02" for k, v in fields).encode()
        if unended_last and i == len(records) - 1 and pb:
            pb = pb[:-1]
        parts.append(struct.pack(">iiiii", 20 + 1 + 2 + len(pb), 0, 0, 0, 1) + b"b" + struct.pack(">h", len(pb)) + pb)
    return encode_batch_records(b"".join(parts), topic="TB", queue_id=3, sysflag=0, born_timestamp=5,
                                born_host=bytes(4), born_port=7, store_host=bytes(4), store_port=10911)


@st.composite
def _layout_batches(draw: st.DrawFn) -> tuple[list[list[tuple[str, str]]], str, int]:
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=5, unique=True))
    n = draw(st.integers(1, 6))
    records = [[(k, draw(_VALUES)) for k in names] for _ in range(n)]
    change = draw(_CHANGES)
    at = draw(st.integers(0, n - 1))
    fields = records[at]
    if change == "swap" and len(fields) > 1:
        fields[0], fields[1] = fields[1], fields[0]
    elif change == "drop":
        fields.pop()
    elif change == "extra":
        fields.append(("EXTRA", "e"))
    elif change == "mark":
        fields.insert(len(fields) // 2, ("", "\x01"))  # an empty name: the mark's own bytes in the properties
    elif change == "twice":
        fields.append(fields[0])
    return records, change, at


@given(_layout_batches())
def test_a_batch_read_as_columns_finds_what_its_records_hold(case: tuple[list[list[tuple[str, str]]], str, int]) -> None:
    records, change, _ = case
    recs = _batch(records, unended_last=change == "unended")
    stored = recs.records()
    expected = []
    for raw in stored:
        at, n = properties_span(raw)
        expected.append(dispatch_properties(raw, at, at + n))
    assert recs.dispatch_properties == expected
    for names in (("DELAY",), ("TIMER_OUT_MS", "__LITE_TOPIC"), ("EXTRA",), ("A", "KEYS"), ("NONE",)):
        first = next((k for fields in records for k, _ in fields if k in names), None)
        assert recs.first_carried(names) == first
    layout = [k for k, _ in records[0]]
    uniform = (change != "unended" and all([k for k, _ in fields] == layout for fields in records)
               and len(set(layout)) == len(layout) and bool(layout) and all(layout)
               and not any("\x01" in v for fields in records for _, v in fields))
    assert (recs.layout is not None) == uniform  # the columns are read exactly when they can be
    if recs.layout is not None:
        for i, name in enumerate(recs.layout.names):
            assert recs.layout.columns[i] == tuple(dict(fields)[name.decode()].encode() for fields in records)


@given(_layout_batches(), st.lists(st.integers(0, 5), max_size=6))
def test_a_selection_of_a_batch_keeps_what_its_records_hold(case: tuple[list[list[tuple[str, str]]], str, int],
                                                            picks: list[int]) -> None:
    records, change, _ = case
    recs = _batch(records, unended_last=change == "unended")
    keep = sorted({p % len(records) for p in picks}) or [0]
    part = recs.select(keep)
    assert part.dispatch_properties == [recs.dispatch_properties[i] for i in keep]
    assert part.first_carried(("KEYS", "TAGS")) == next(
        (k for i in keep for k, _ in records[i] if k in ("KEYS", "TAGS")), None)


def test_a_batch_whose_properties_move_keeps_its_dispatch_properties_and_stops_answering_from_its_layout() -> None:
    recs = _batch([[("UNIQ_KEY", "U1"), ("TAGS", "t")], [("UNIQ_KEY", "U2"), ("TAGS", "t")]])
    assert recs.layout is not None and recs.found is None
    before = recs.dispatch_properties
    recs.found = None  # as the encoder leaves it: made from the layout when asked
    moved = [bytes(p) + b"REAL_TOPIC\x01TB\x02" for p in recs.item_properties()]
    recs.redirect("TT", 0, [struct.pack(">H", len(m)) + m for m in moved], None)
    assert recs.dispatch_properties == before  # the client's, which redirect was told to keep
    assert recs.carries(("REAL_TOPIC",))  # read from the new properties, not from the layout
