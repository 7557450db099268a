"""A batch whose items are all as long, with bodies all as long, is encoded as one matrix of records
(``RecordBatch.packed``) instead of five pieces a record: the records, and everything read from them, must
be the same bytes either way, through every change the broker makes to a batch (select, redirect, the
CommitLog's patches)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidalmq.common import record_batch
from tidalmq.common.record import RecordError, decode_record
from tidalmq.common.record_batch import RecordBatch, encode_batch_records

_KW = {"topic": "TP", "queue_id": 3, "sysflag": 0, "born_timestamp": 5, "born_host": bytes([10, 0, 0, 7]),
       "born_port": 7, "store_host": bytes([127, 0, 0, 1]), "store_port": 10911}


@contextmanager
def _packing(on: bool) -> Iterator[None]:
    with patch.object(record_batch, "_PACKED_MIN", 1 if on else 1 << 30):
        yield


def _encode(body: bytes, on: bool) -> RecordBatch:
    with _packing(on):
        return encode_batch_records(body, **_KW)  # type: ignore[arg-type]


def _item(body: bytes, props: bytes, flag: int = 0, prop_len: int | None = None) -> bytes:
    n = len(props) if prop_len is None else prop_len
    return struct.pack(">iiiii", 20 + len(body) + 2 + len(props), 0, 0, flag, len(body)) + body + \
        struct.pack(">h", n) + props


@st.composite
def _bodies(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A batch body, and whether every item is as long with bodies as long (what may be packed). Properties
    as a client writes them (name, value, separators), of one length or, after a change, not."""
    n = draw(st.integers(1, 7))
    body_len = draw(st.integers(0, 12))
    names = draw(st.lists(st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "A", "TIMER_DELIVER_MS"]),
                          min_size=0, max_size=3, unique=True))
    widths = [draw(st.integers(0, 5)) for _ in names]
    items: list[list[Any]] = []
    for i in range(n):
        props = "".join(f"{k}\x01{draw(st.text('0123ab ', min_size=w, max_size=w))}\x02"
                        for k, w in zip(names, widths, strict=True)).encode()
        items.append([draw(st.binary(min_size=body_len, max_size=body_len)), props, i])
    change = draw(st.sampled_from(["none", "none", "longer body", "longer props", "body for props"]))
    at = draw(st.integers(0, n - 1))
    if change == "longer body":
        items[at][0] += b"x"
    elif change == "longer props":
        items[at][1] += b"Z\x01z\x02"
    elif change == "body for props" and items[at][1]:  # as long an item, but its body longer
        items[at][0] += items[at][1][:1]
        items[at][1] = items[at][1][1:]
    uniform = len({(len(b), len(p)) for b, p, _ in items}) == 1
    return b"".join(_item(b, p, f) for b, p, f in items), uniform


def _same(a: RecordBatch, b: RecordBatch) -> None:
    assert a.records() == b.records()
    assert b"".join(map(bytes, a.pieces)) == b"".join(map(bytes, b.pieces))
    assert np.array_equal(a.sizes, b.sizes) and a.heads.tobytes() == b.heads.tobytes() and a.sysflag == b.sysflag
    assert [bytes(p) for p in a.item_properties()] == [bytes(p) for p in b.item_properties()]
    assert a.joined_properties() == b.joined_properties()
    assert a.dispatch_properties == b.dispatch_properties
    assert a.tag_codes == b.tag_codes
    assert a.first_carried(("TAGS", "KEYS", "Z")) == b.first_carried(("TAGS", "KEYS", "Z"))
    for rec in a.records():
        decode_record(rec, check_crc=True)


@settings(max_examples=200, deadline=None)
@given(_bodies(), st.lists(st.integers(0, 6), max_size=5), st.integers(0, 2**40))
def test_a_packed_batch_holds_the_records_of_five_pieces_each(case: tuple[bytes, bool], keep: list[int],
                                                             ts: int) -> None:
    body, uniform = case
    packed, pieces = _encode(body, True), _encode(body, False)
    assert (packed.packed is not None) == uniform and pieces.packed is None
    _same(packed, pieces)
    # the CommitLog's patches: offsets in the heads, the store timestamp in the shared part
    for b in (packed, pieces):
        b.heads["queue_offset"] = np.arange(len(b)) + 11
        b.heads["phys"] = b.starts + 1000
        b.patch_shared(8, struct.pack(">q", ts))
    _same(packed, pieces)
    assert {decode_record(r).store_timestamp for r in packed.records()} == {ts}
    keep = [i for i in keep if i < len(packed)]
    if keep:
        _same(packed.select(keep), pieces.select(keep))


@settings(max_examples=100, deadline=None)
@given(_bodies(), st.integers(0, 9), st.sampled_from(["matrix", "list", "ragged list"]))
def test_a_packed_batch_redirected_holds_what_a_redirected_batch_of_pieces_holds(case: tuple[bytes, bool],
                                                                                width: int, given_as: str) -> None:
    """The timer rewrite's redirect: new properties as a matrix or a list of equal lengths (a packed batch
    stays packed), or of different lengths (it turns into pieces); and a batch that stays packed takes
    further patches in every row."""
    body, uniform = case
    packed, pieces = _encode(body, True), _encode(body, False)
    n = len(packed)
    rows = np.array([[i % 250] * width for i in range(n)], dtype=np.uint8).reshape(n, width)
    rows = np.concatenate([np.tile(np.frombuffer(struct.pack(">h", width), dtype=np.uint8), (n, 1)), rows], axis=1)
    as_list = [r.tobytes() for r in rows]
    if given_as == "ragged list":
        as_list[-1] = struct.pack(">h", width + 1) + as_list[-1][2:] + b"r"
    codes = list(range(n))
    packed.redirect("rmq_sys_wheel_timer", 0, rows if given_as == "matrix" else as_list, packed.found, codes)
    pieces.redirect("rmq_sys_wheel_timer", 0, as_list, pieces.found, codes)
    assert (packed.packed is not None) == (uniform and (given_as != "ragged list" or n == 1))
    _same(packed, pieces)
    for b in (packed, pieces):
        b.patch_shared(8, struct.pack(">q", 77))
    _same(packed, pieces)
    assert {decode_record(r).topic for r in packed.records()} == {"rmq_sys_wheel_timer"}


@pytest.mark.parametrize("bad", ["properties length", "body length", "total"])
def test_a_malformed_batch_of_equal_items_is_refused_as_the_piece_encoder_refuses_it(bad: str) -> None:
    items = [_item(b"body", b"A\x01v\x02") for _ in range(4)]
    if bad == "properties length":
        items[2] = _item(b"body", b"A\x01v\x02", prop_len=3)
    elif bad == "body length":
        items[2] = items[2][:16] + struct.pack(">i", 99) + items[2][20:]
    else:
        items[2] = struct.pack(">i", 5) + items[2][4:]
    body = b"".join(items)
    errors = []
    for on in (True, False):
        with pytest.raises(RecordError) as e:
            _encode(body, on)
        errors.append(str(e.value))
    assert errors[0] == errors[1]


def test_a_large_batch_of_equal_items_is_packed_by_default() -> None:
    """The threshold in force (``_PACKED_MIN``): a client's batch of same-shaped messages is packed, a
    smaller one stays pieces."""
    n = record_batch._PACKED_MIN
    items = [_item(b"%08d" % i, b"UNIQ_KEY\x01%04d\x02" % i) for i in range(n)]
    assert encode_batch_records(b"".join(items), **_KW).packed is not None  # type: ignore[arg-type]
    assert encode_batch_records(b"".join(items[:-1]), **_KW).packed is None  # type: ignore[arg-type]
    # large bodies stay views of the request (the CommitLog writes them from there)
    large = [_item(b"%08d" % i * 512, b"UNIQ_KEY\x01%04d\x02" % i) for i in range(n)]
    assert encode_batch_records(b"".join(large), **_KW).packed is None  # type: ignore[arg-type]
