"""A batch whose messages share one property layout is read as columns (``record_batch.batch_layout``): what
the checks, the dispatch and the timer rewrite read from it must be what reading each record finds."""

from __future__ import annotations

import struct
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from tidalmq.common import record_batch
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
def _layout_batches(draw: st.DrawFn, fixed_width: bool = False) -> tuple[list[list[tuple[str, str]]], str, int]:
    """Records sharing a layout, one of them changed (or none). ``fixed_width``: each name's values as many
    characters long in every record (the same number of bytes unless one holds a two-byte character), as
    a client's unique keys and deliver times are: what ``batch_layout`` reads as a byte matrix."""
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=5, unique=True))
    n = draw(st.integers(1, 6))
    if fixed_width:
        widths = {k: draw(st.integers(0, 4)) for k in names}
        records = [[(k, draw(st.text("ab\x01\xe9", min_size=widths[k], max_size=widths[k]))) for k in names]
                   for _ in range(n)]
    else:
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
    _columns_are_what_records_hold(case)


@given(_layout_batches(fixed_width=True))
def test_a_batch_of_fixed_width_values_read_as_columns_finds_what_its_records_hold(
        case: tuple[list[list[tuple[str, str]]], str, int]) -> None:
    with patch.object(record_batch, "_FIXED_WIDTH_MIN", 1):  # read as a byte matrix however few they are
        _columns_are_what_records_hold(case)


def _columns_are_what_records_hold(case: tuple[list[list[tuple[str, str]]], str, int]) -> None:
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


def test_fixed_width_records_whose_names_trade_places_are_not_read_as_one_layout() -> None:
    """Records as long as each other with the names in another order in one of them: every separator is
    where the first record has one, but not every name: the batch has no one layout."""
    n = record_batch._FIXED_WIDTH_MIN
    same = [[("UNIQ_KEY", f"{i:032X}"), ("TIMER_DELIVER_MS", f"{1_800_000_000_000 + i}")] for i in range(n)]
    recs = _batch(same)
    assert recs.layout is not None
    assert recs.layout.column(b"UNIQ_KEY") == tuple(f"{i:032X}".encode() for i in range(n))
    assert recs.layout.column(b"TIMER_DELIVER_MS") == tuple(str(1_800_000_000_000 + i).encode() for i in range(n))
    swapped = [[("KEYS", "ab"), ("TAGS", "cd")], [("TAGS", "ab"), ("KEYS", "cd")]]
    with patch.object(record_batch, "_FIXED_WIDTH_MIN", 1):
        recs = _batch(swapped)
    assert recs.layout is None
    assert recs.dispatch_properties == [[(b"KEYS", b"ab"), (b"TAGS", b"cd")], [(b"TAGS", b"ab"), (b"KEYS", b"cd")]]
