"""The HA wire format and the slave's reassembly of whole records, without sockets."""

from __future__ import annotations

import pytest

from tidalmq.common.record import encode_blank, encode_record, patch_for_append
from tidalmq.ha.frames import (
    HEADER_SIZE,
    Frame,
    FrameError,
    FrameReader,
    GapError,
    RecordAssembler,
    ReportReader,
    encode_header,
    encode_hello,
    encode_report,
)

FILE_SIZE = 4096


def _record(body: bytes, phys: int, ts: int) -> bytearray:
    rec = encode_record(topic="T", queue_id=0, body=body, properties="")
    patch_for_append(rec, 0, 0, phys, ts)
    return rec


def test_report_is_eight_bytes_big_endian_and_the_last_whole_one_counts() -> None:
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))
    r = ReportReader()
    stream = encode_report(100) + encode_report(200) + encode_report(300)
    assert r.feed(stream[:5]) is None
    assert r.feed(stream[5:19]) == 200  # 100 and 200 complete, 300 cut
    assert r.feed(stream[19:]) == 300
    with pytest.raises(FrameError):
        ReportReader().feed(encode_report(5) + encode_report(-1))


def test_a_controller_mode_slave_says_which_replica_it_is_first() -> None:
    with pytest.raises(ValueError):
        encode_hello(0)
    r = ReportReader()
    assert r.feed(encode_hello(2)[:3]) is None
    assert r.feed(encode_hello(2)[3:] + encode_report(700)) == 700  # hello and first report in one read
    assert r.replica_id == 2
    alone = ReportReader()
    assert alone.feed(encode_hello(3)) is None and alone.replica_id == 3
    assert alone.feed(encode_report(9)) == 9
    with pytest.raises(FrameError):
        alone.feed(encode_hello(3))  # only the stream's first report may be a hello
    static = ReportReader()
    assert static.feed(encode_report(0)) == 0 and static.replica_id is None


def test_frames_are_offset_size_body_and_survive_any_split() -> None:
    assert encode_header(5, 7) == (5).to_bytes(8, "big") + (7).to_bytes(4, "big")
    stream = encode_header(0, 3) + b"abc" + encode_header(3, 0) + encode_header(3, 2) + b"de"
    for cut in range(len(stream) + 1):
        reader = FrameReader()
        frames = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert frames == [Frame(0, b"abc"), Frame(3, b""), Frame(3, b"de")]


def test_frame_reader_refuses_what_no_master_sends() -> None:
    with pytest.raises(FrameError):
        FrameReader(max_body=10).feed(encode_header(0, 11))
    with pytest.raises(FrameError):
        FrameReader().feed(encode_header(-5, 0))
    assert HEADER_SIZE == 12


def test_assembler_appends_whole_records_only_and_holds_a_cut_tail() -> None:
    a = _record(b"first", 0, 111)
    b = _record(b"second" * 10, len(a), 222)
    data = bytes(a + b)
    asm = RecordAssembler(FILE_SIZE, expected=0)
    cut = len(a) + 10  # the master's batch ends inside the second record
    run = asm.push(Frame(0, data[:cut]))
    assert run is not None and (run.offset, run.data, run.store_timestamp) == (0, bytes(a), 111)
    assert asm.expected == cut
    assert asm.push(Frame(cut, b"")) is None  # a heartbeat at the right offset
    run = asm.push(Frame(cut, data[cut:]))
    assert run is not None and (run.offset, run.data, run.store_timestamp) == (len(a), bytes(b), 222)


def test_assembler_passes_a_files_blank_and_continues_in_the_next_file() -> None:
    a = _record(b"x" * 100, 0, 5)
    blank = encode_blank(FILE_SIZE - len(a)) + bytes(FILE_SIZE - len(a) - 8)
    c = _record(b"next file", FILE_SIZE, 6)
    asm = RecordAssembler(FILE_SIZE, expected=0)
    first = asm.push(Frame(0, bytes(a) + blank))
    assert first is not None and first.data == bytes(a) + blank and first.store_timestamp == 0
    second = asm.push(Frame(FILE_SIZE, bytes(c)))
    assert second is not None and second.offset == FILE_SIZE and second.store_timestamp == 6


def test_assembler_refuses_a_gap_and_garbage() -> None:
    a = _record(b"a", 0, 1)
    asm = RecordAssembler(FILE_SIZE, expected=len(a))
    with pytest.raises(GapError):
        asm.push(Frame(0, bytes(a)))
    with pytest.raises(FrameError):
        RecordAssembler(FILE_SIZE, expected=0).push(Frame(0, b"\x00" * 64))


def test_an_empty_slave_takes_the_first_frame_where_the_master_starts_it() -> None:
    rec = _record(b"late", 3 * FILE_SIZE, 9)
    asm = RecordAssembler(FILE_SIZE, expected=None)
    run = asm.push(Frame(3 * FILE_SIZE, bytes(rec)))
    assert run is not None and run.offset == 3 * FILE_SIZE
