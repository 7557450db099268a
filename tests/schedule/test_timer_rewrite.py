"""TimerRewrite without a broker: the properties-text fast path stores what the general (dict) path
stores, and the batch rewrite parks each message of a batch at its own deliver time."""

from __future__ import annotations

import struct
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidalmq.broker.message import InnerMessage, SendError
from tidalmq.broker.schedule.hooks import TimerRewrite
from tidalmq.common import record_batch
from tidalmq.common.message import decode_properties, encode_properties
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import decode_record, dispatch_properties, properties_span
from tidalmq.common.record_batch import encode_batch_records
from tidalmq.remoting.codes import ResponseCode
from tidalmq.store.message_store import DefaultMessageStore, PutRequest, PutStatus

NOW = 1_700_000_000_000
MAX_DELAY_MS = 3_600_000


def rewrite() -> TimerRewrite:
    return TimerRewrite(MAX_DELAY_MS, 10, clock=lambda: NOW)


def message(text: str, topic: str = "T", queue_id: int = 3) -> InnerMessage:
    return InnerMessage(topic, queue_id, b"body", 0, text, 0, NOW, b"\x7f\x00\x00\x01", 1234)


def through_general_path(text: str) -> InnerMessage:
    msg = message(text)
    msg.properties  # noqa: B018 - parsed: the rewrite takes its general (dict) path
    rewrite()(msg)
    return msg


@pytest.mark.parametrize("text", [
    "TIMER_DELIVER_MS\x011700000005000\x02UNIQ_KEY\x01AB\x02",
    "UNIQ_KEY\x01AB\x02KEYS\x01k1 k2\x02TIMER_DELAY_SEC\x0130\x02",
    "TIMER_DELAY_MS\x01250",  # no trailing separator (tolerated on the wire)
    "a\x01TIMER_DELIVER_MS\x02TIMER_DELAY_MS\x019\x02",  # a value that looks like a name is a value
    # TIMER_OUT_MS is the deliver time's own text, whatever digits the client wrote
    "TIMER_DELIVER_MS\x0101700000005000\x02",
    "TIMER_DELIVER_MS\x01\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0665\u0660\u0660\u0660\x02",  # Arabic-Indic
    "TIMER_DELIVER_MS\x01 1700000005000\x02",
])
def test_fast_path_stores_what_the_general_path_stores(text: str) -> None:
    fast = message(text)
    rewrite()(fast)
    assert not fast.is_parsed, "the fast path parsed the properties"
    slow = through_general_path(text)
    assert (fast.topic, fast.queue_id) == (slow.topic, slow.queue_id) == (TIMER_TOPIC, 0)
    assert decode_properties(fast.properties_text) == slow.properties
    assert slow.properties["REAL_TOPIC"] == "T" and slow.properties["REAL_QID"] == "3"
    assert fast.timer_parked is not None and fast.timer_parked[2] == slow.properties["TIMER_OUT_MS"]


@pytest.mark.parametrize("text", [
    "TIMER_DELIVER_MS\x011000\x02",  # due already: stored at once, timer properties dropped
    "TIMER_DELAY_SEC\x011\x02TIMER_DELIVER_MS\x011700000009000\x02",  # two: RocketMQ's precedence decides
    "DELAY\x012\x02TIMER_DELAY_MS\x01500\x02",  # a delay level wins
])
def test_other_cases_take_the_general_path(text: str) -> None:
    msg = message(text)
    rewrite()(msg)
    slow = through_general_path(text)
    assert (msg.topic, msg.queue_id) == (slow.topic, slow.queue_id)
    assert decode_properties(msg.encoded_properties()) == slow.properties


@pytest.mark.parametrize("deliver", [NOW - 1000, NOW + 5000])
def test_a_timed_message_stored_again_is_left_alone(deliver: int) -> None:
    """RocketMQ's checkIfTimerMessage: a message carrying TIMER_OUT_MS (a delivered timer message the
    broker stores again, e.g. a pop retry) is no timer request, whatever its TIMER_DELIVER_MS says; a delay
    level still wins over its timer properties."""
    text = f"TIMER_DELIVER_MS\x01{deliver}\x02TIMER_OUT_MS\x01{deliver}\x02UNIQ_KEY\x01AB\x02"
    msg = message(text)
    rewrite()(msg)
    assert (msg.topic, msg.queue_id) == ("T", 3)
    assert msg.properties == decode_properties(text)
    leveled = message("DELAY\x012\x02" + text)
    rewrite()(leveled)
    assert "TIMER_DELIVER_MS" not in leveled.properties and leveled.topic == "T"


def test_fast_path_refuses_what_the_general_path_refuses() -> None:
    for text, words in (("TIMER_DELAY_SEC\x01-3\x02", "must not be negative"),
                        (f"TIMER_DELIVER_MS\x01{NOW + MAX_DELAY_MS + 1}\x02", "beyond the max delay")):
        with pytest.raises(SendError, match=words) as e:
            rewrite()(message(text))
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL


def batch_item(body: bytes, props: dict[str, str]) -> bytes:
    pb = encode_properties(props).encode()
    return struct.pack(">iiiii", 20 + len(body) + 2 + len(pb), 0, 0, 0, len(body)) + body + struct.pack(">h", len(pb)) + pb


def encode(body: bytes):
    return encode_batch_records(body, topic="T", queue_id=3, sysflag=0, born_timestamp=NOW,
                                born_host=b"\x7f\x00\x00\x01", born_port=1, store_host=b"\x7f\x00\x00\x01",
                                store_port=2)


def test_batch_parks_each_message_at_its_own_time() -> None:
    asks = [{"TIMER_DELIVER_MS": str(NOW + 5000)}, {"TIMER_DELAY_MS": "700"}, {"TIMER_DELAY_SEC": "2"},
            {"TIMER_DELAY_MS": "0"}]
    records = encode(b"".join(batch_item(f"m{i}".encode(), {**a, "UNIQ_KEY": f"U{i}"}) for i, a in enumerate(asks)))
    parked, due, due_at = rewrite().park_batch(records, "T", 3)
    assert parked is records and due is None and due_at == []
    stored = [decode_record(r) for r in records.records()]
    assert [m.topic for m in stored] == [TIMER_TOPIC] * 4 and [m.queue_id for m in stored] == [0] * 4
    assert [m.body for m in stored] == [b"m0", b"m1", b"m2", b"m3"]
    # a relative delay of 0 is due at once, and parked: the timer delivers it at once
    assert [int(m.properties["TIMER_OUT_MS"]) for m in stored] == [NOW + 5000, NOW + 700, NOW + 2000, NOW]
    assert all(m.properties["REAL_TOPIC"] == "T" and m.properties["REAL_QID"] == "3" for m in stored)
    assert [m.properties["UNIQ_KEY"] for m in stored] == ["U0", "U1", "U2", "U3"]
    # what the dispatch reads without reading the records back: the timer topic's tag is the deliver time
    assert records.tag_codes == [NOW + 5000, NOW + 700, NOW + 2000, NOW]
    assert records.nbytes == sum(len(r) for r in records.records()) == sum(m.store_size for m in stored)
    # ... and the rest is exactly what a read of the parked properties finds (TIMER_OUT_MS, which the tag
    # codes stand for, aside)
    assert records.dispatch_properties == [
        [(k, v) for k, v in dispatch_properties(r, at, at + n) if k != b"TIMER_OUT_MS"]
        for r in records.records() for at, n in [properties_span(r)]]


def test_batch_messages_whose_deliver_time_passed_are_stored_at_once_as_they_were_sent() -> None:
    """RocketMQ's rule for one message (HookUtils.transformTimerMessage) applied per message of a batch:
    a TIMER_DELIVER_MS at or before now is stored in its own topic and queue, its properties as sent; the
    others of the batch are parked as ever."""
    asks = [NOW - 1, NOW + 5000, NOW, NOW + 1, NOW - 60_000]
    texts = [f"UNIQ_KEY\x01U{i}\x02TIMER_DELIVER_MS\x01{d}\x02" for i, d in enumerate(asks)]
    texts[2] = texts[2].rstrip("\x02")  # no trailing separator: parked or not, stored as the single path stores it
    body = b"".join(struct.pack(">iiiii", 20 + 2 + 2 + len(t), 0, 0, 0, 2) + f"m{i}".encode()
                    + struct.pack(">h", len(t)) + t.encode() for i, t in enumerate(texts))
    records = encode(body)
    originals = [decode_record(r) for r in records.records()]
    parked, due, due_at = rewrite().park_batch(records, "T", 3)
    assert parked is not None and due is not None
    assert due_at == [0, 2, 4]
    now_due = [decode_record(r) for r in due.records()]
    assert [(m.topic, m.queue_id, m.body) for m in now_due] == [("T", 3, b"m0"), ("T", 3, b"m2"), ("T", 3, b"m4")]
    assert [m.properties for m in now_due] == [originals[i].properties for i in due_at]
    assert due.dispatch_properties == [dispatch_properties(r, at, at + n)
                                       for r in due.records() for at, n in [properties_span(r)]]
    later = [decode_record(r) for r in parked.records()]
    assert [m.body for m in later] == [b"m1", b"m3"]
    for m, text in zip(later, (texts[1], texts[3]), strict=True):
        single = message(text)
        rewrite()(single)
        assert (m.topic, m.queue_id) == (single.topic, single.queue_id) == (TIMER_TOPIC, 0)
        assert m.properties == decode_properties(single.properties_text)
    assert parked.dispatch_properties == [[(k, v) for k, v in dispatch_properties(r, at, at + n) if k != b"TIMER_OUT_MS"]
                                          for r in parked.records() for at, n in [properties_span(r)]]
    assert parked.tag_codes == [int(m.properties["TIMER_OUT_MS"]) for m in later]  # what the dispatch files
    assert parked.nbytes == sum(map(len, parked.records())) and due.nbytes == sum(map(len, due.records()))
    # a batch due as a whole is stored as it came
    records = encode(b"".join(batch_item(b"x", {"TIMER_DELIVER_MS": str(NOW - k)}) for k in range(3)))
    before = records.records()
    parked, due, due_at = rewrite().park_batch(records, "T", 3)
    assert parked is None and due is records and due_at == [0, 1, 2] and records.records() == before


def test_parked_batch_is_dispatched_from_the_append_as_from_a_read_back(tmp_path) -> None:  # noqa: ANN001
    """The ConsumeQueue entries of a parked batch (tag = deliver time, UNIQ_KEY and KEYS for the index)
    come from what the append knows, without reading the records back: the same as a scan of them."""
    from tests.store.conftest import FakeIndex, small_config

    store = DefaultMessageStore(small_config(str(tmp_path / "store")), index_service=FakeIndex())
    assert store.load()
    try:
        asks = [{"TIMER_DELIVER_MS": str(NOW + 5000), "KEYS": "k1 k2"}, {"TIMER_DELAY_MS": "700", "TAGS": "t"},
                {"TIMER_DELAY_SEC": "2"}]
        records = encode(b"".join(batch_item(f"m{i}".encode(), {**a, "UNIQ_KEY": f"U{i}"})
                                  for i, a in enumerate(asks)))
        rewrite().park_batch(records, "T", 3)
        assert store.put_messages([PutRequest(TIMER_TOPIC, 0, records)])[0].status == PutStatus.PUT_OK
        cl = store.commit_log
        assert len(cl.scan._preread) == 1
        from_append, end, stalled = cl.read_dispatch_requests(0, 1 << 30)
        assert not cl.scan._preread and not stalled and end == store.max_phy_offset
        read_back, _, _ = cl.read_dispatch_requests(0, 1 << 30)
        assert from_append.rows() == read_back.rows()
        assert [r.tags_code for r in read_back.rows()] == [NOW + 5000, NOW + 700, NOW + 2000]
        assert [r.uniq_key for r in read_back.rows()] == ["U0", "U1", "U2"]
    finally:
        store.shutdown()


@pytest.mark.parametrize(("props", "words"), [
    ({}, "cannot share a batch"),
    ({"TIMER_DELAY_SEC": "1", "TIMER_DELAY_MS": "5"}, "more than one"),
    ({"TIMER_DELAY_MS": "soon"}, "whole number"),
    ({"TIMER_DELAY_SEC": str(MAX_DELAY_MS)}, "beyond the max delay"),
])
def test_batch_refusals_name_the_reason(props: dict[str, str], words: str) -> None:
    records = encode(batch_item(b"a", {"TIMER_DELAY_MS": "500"}) + batch_item(b"b", props))
    with pytest.raises(SendError, match=words) as e:
        rewrite().park_batch(records, "T", 3)
    assert e.value.code == ResponseCode.MESSAGE_ILLEGAL


def test_batch_refusal_names_the_message_even_when_the_count_adds_up() -> None:
    """Two deliver times in one message and none in the next make as many as messages: still refused,
    naming the message that asks for two; a batch with a property that is not UTF-8 names that message."""
    records = encode(batch_item(b"a", {"TIMER_DELAY_MS": "5", "TIMER_DELAY_SEC": "1"}) + batch_item(b"b", {"KEYS": "k"}))
    with pytest.raises(SendError, match="message 0 asks for no deliver time or for more than one"):
        rewrite().park_batch(records, "T", 3)
    bad = b"TIMER_DELAY_MS\x015\x02KEYS\x01\xff\x02"
    item = struct.pack(">iiiii", 20 + 1 + 2 + len(bad), 0, 0, 0, 1) + b"c" + struct.pack(">h", len(bad)) + bad
    with pytest.raises(SendError, match="message 1's properties are not UTF-8"):
        rewrite().park_batch(encode(batch_item(b"a", {"TIMER_DELAY_MS": "5"}) + item), "T", 3)


def test_batch_reads_values_as_the_single_path_does() -> None:
    """Values with spaces, a value that looks like a property name, a property without a trailing
    separator: each parked message holds what the single-message rewrite stores for it."""
    texts = ["KEYS\x01TIMER_DELAY_MS\x02TIMER_DELIVER_MS\x01 1700000004000 \x02",
             "TIMER_DELAY_SEC\x013\x02UNIQ_KEY\x01X\x02", "UNIQ_KEY\x01Y\x02TIMER_DELAY_MS\x0142"]
    body = b"".join(struct.pack(">iiiii", 20 + 1 + 2 + len(t), 0, 0, 0, 1) + b"m" + struct.pack(">h", len(t)) + t.encode()
                    for t in texts)
    records = encode(body)
    rewrite().park_batch(records, "T", 3)
    for text, stored in zip(texts, (decode_record(r) for r in records.records()), strict=True):
        single = message(text)
        rewrite()(single)
        assert (stored.topic, stored.queue_id) == (single.topic, single.queue_id) == (TIMER_TOPIC, 0)
        assert stored.properties == decode_properties(single.properties_text)


@pytest.mark.parametrize("texts", [
    # each TIMER_DELIVER_MS as its deliver time is written (the batch's one pass and its values as they are)
    ["TIMER_DELIVER_MS\x011700000004000\x02UNIQ_KEY\x01A\x02", "UNIQ_KEY\x01B\x02TIMER_DELIVER_MS\x011700000009000\x02"],
    # a leading zero: the deliver time is the number, TIMER_OUT_MS written without it
    ["TIMER_DELIVER_MS\x0101700000004000\x02", "TIMER_DELIVER_MS\x011700000009000\x02"],
    # properties that hold the batch pass's own mark (an empty name, an empty value): taken one by one
    ["UNIQ_KEY\x01A\x02\x01\x01\x02TIMER_DELIVER_MS\x011700000004000\x02", "TIMER_DELIVER_MS\x011700000009000"],
    ["TIMER_DELIVER_MS\x011700000004000\x02\x01\x01", "KEYS\x01k\x02TIMER_DELAY_MS\x019\x02"],
])
def test_batch_parks_what_the_single_path_parks(texts: list[str]) -> None:
    body = b"".join(struct.pack(">iiiii", 20 + 1 + 2 + len(t), 0, 0, 0, 1) + b"m" + struct.pack(">h", len(t)) + t.encode()
                    for t in texts)
    records = encode(body)
    rewrite().park_batch(records, "T", 3)
    assert records.tag_codes is not None
    for text, raw, found, code in zip(texts, records.records(), records.dispatch_properties, records.tag_codes,
                                      strict=True):
        single = message(text)
        rewrite()(single)
        stored = decode_record(raw)
        assert (stored.topic, stored.queue_id) == (TIMER_TOPIC, 0)
        assert stored.properties == decode_properties(single.properties_text)
        at, n = properties_span(raw)
        read = dispatch_properties(raw, at, at + n)  # the tag code stands for TIMER_OUT_MS
        assert found == [(k, v) for k, v in read if k != b"TIMER_OUT_MS"] and code == int(dict(read)[b"TIMER_OUT_MS"])
    assert records.nbytes == sum(len(r) for r in records.records())


_ASK_VALUES = {"TIMER_DELIVER_MS": ["1700000004000", str(NOW - 5), "01700000009000", " 1700000004000", "x", str(NOW + MAX_DELAY_MS * 2)],
               "TIMER_DELAY_MS": ["0", "250", "soon"], "TIMER_DELAY_SEC": ["3", "-1"]}


@given(st.sampled_from(sorted(_ASK_VALUES)), st.lists(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "WAIT"]), unique=True),
       st.integers(0, 3), st.data())
def test_a_batch_sharing_one_layout_parks_what_reading_it_message_by_message_parks(
        ask: str, others: list[str], at: int, data: st.DataObject) -> None:
    """A timer batch whose messages share one property layout is parked from its columns (no search of its
    properties), or, its properties all as long as each other, from their byte matrix: the same records, tag
    codes, dispatch properties and refusals as the path that searches them. Either batch may be packed (its
    items all as long: ``RecordBatch.packed``), its parked properties then built as a matrix."""
    names = others[:at] + [ask] + others[at:]
    n = data.draw(st.integers(1, 5))
    props = [{k: data.draw(st.sampled_from(_ASK_VALUES[k])) if k == ask else f"{k.lower()}{i}" for k in names}
             for i in range(n)]
    body = b"".join(batch_item(f"m{i}".encode(), p) for i, p in enumerate(props))
    packing = [1 if data.draw(st.booleans()) else 1 << 30 for _ in range(2)]
    with patch.object(record_batch, "_FIXED_WIDTH_MIN", 1 if data.draw(st.booleans()) else 1 << 30), \
            patch.object(record_batch, "_PACKED_MIN", packing[0]):
        columns = encode(body)
    with patch.object(record_batch, "_PACKED_MIN", packing[1]):
        searched = encode(body)
    assert columns.layout is not None
    searched.found = searched.dispatch_properties
    searched.layout = None  # as a batch without one layout is read

    def park(records):
        try:
            parked, due, due_at = rewrite().park_batch(records, "T", 3)
        except SendError as e:
            return e.code, e.remark
        return ([None if b is None else (b.records(), b.tag_codes, b.dispatch_properties) for b in (parked, due)], due_at)

    assert park(columns) == park(searched)


def test_a_large_fixed_width_batch_is_parked_from_its_byte_matrix_as_by_search() -> None:
    """A client's batch of fixed-length unique keys and deliver times, as many as read as a byte matrix: its
    parked records built a column at a time are those the search path builds, deliver times and all."""
    n = record_batch._FIXED_WIDTH_MIN
    body = b"".join(batch_item(f"m{i:04d}".encode(), {"TIMER_DELIVER_MS": str(NOW + 60_000 + 7 * i),
                                                      "UNIQ_KEY": f"{i:032X}"}) for i in range(n))
    by_rows, searched = encode(body), encode(body)
    assert by_rows.layout is not None and by_rows.layout.rows is not None
    searched.found = searched.dispatch_properties
    searched.layout = None
    assert by_rows.packed is not None and searched.packed is not None  # their parked properties a matrix either way
    with patch.object(record_batch, "_PACKED_MIN", 1 << 30):
        pieces = encode(body)  # five pieces a record, parked properties a list
    for records in (by_rows, searched, pieces):
        parked, due, _ = rewrite().park_batch(records, "T", 3)
        assert parked is records and due is None
    assert by_rows.packed is not None and searched.packed is not None and pieces.packed is None
    assert by_rows.records() == searched.records() == pieces.records()
    assert by_rows.tag_codes == pieces.tag_codes and by_rows.dispatch_properties == pieces.dispatch_properties
    assert by_rows.tag_codes == searched.tag_codes == [NOW + 60_000 + 7 * i for i in range(n)]
    assert by_rows.dispatch_properties == searched.dispatch_properties
    assert [decode_record(r).properties["TIMER_OUT_MS"] for r in by_rows.records()] == [
        str(NOW + 60_000 + 7 * i) for i in range(n)]
