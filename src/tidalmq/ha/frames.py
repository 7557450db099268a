"""The HA wire format of RocketMQ's HAConnection / HAClient, as pure codecs (bytes in, values out).

slave -> master: the slave's CommitLog max offset, 8 bytes big-endian, sent at connect, after each
receive and every haSendHeartbeatInterval. Only the last complete report of what arrived counts.

master -> slave: frames of (8-byte physical offset, 4-byte body size, body), the body being CommitLog
bytes from that offset; an empty body is a heartbeat. The master cuts the CommitLog at
haTransferBatchSize, anywhere, so a frame may end inside a record: ``RecordAssembler`` keeps the cut
tail until the rest arrives, so that the slave's CommitLog only ever holds whole records (its reput and
its crash recovery then see what a master's would).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tidalmq.common.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    POS_SYSFLAG,
    store_timestamp_pos,
)

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size  # 12
# A frame body larger than this is not from a master (haTransferBatchSize is 32 KiB by default).
MAX_FRAME_BODY = 64 * 1024 * 1024

_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class FrameError(ValueError):
    """The peer sent something that is not the HA protocol (the connection is dropped)."""


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_hello(replica_id: int) -> bytes:
    """A controller-mode slave's first report: which replica it is (see ReportReader)."""
    if replica_id < 1:
        raise ValueError(f"a replica id is >= 1, got {replica_id}")
    return REPORT.pack(-replica_id)


def encode_header(offset: int, size: int) -> bytes:
    return HEADER.pack(offset, size)


class ReportReader:
    """The master's side: the slave's offset reports, from bytes as they arrive. In controller mode a slave
    first says which replica it is: one report of minus its brokerId (``encode_hello``), kept in
    ``replica_id``; an offset is never negative."""

    def __init__(self) -> None:
        self._buf = b""
        self._first = True  # the stream's first report is still to come (a hello may be it)
        self.replica_id: int | None = None

    def feed(self, data: bytes) -> int | None:
        """The last complete offset report in what arrived so far, or None when none completed."""
        buf = self._buf + data
        whole = len(buf) - len(buf) % REPORT.size
        self._buf = buf[whole:]
        if whole == 0:
            return None
        offset: int = REPORT.unpack_from(buf, whole - REPORT.size)[0]
        if self._first:
            self._first = False
            first: int = REPORT.unpack_from(buf, 0)[0]
            if first < 0:
                self.replica_id = -first
                if whole == REPORT.size:
                    return None
        if offset < 0:
            raise FrameError(f"negative offset report {offset}")
        return offset


class Frame(NamedTuple):
    offset: int
    body: bytes


class FrameReader:
    """The slave's side: frames from the master's byte stream."""

    def __init__(self, max_body: int = MAX_FRAME_BODY) -> None:
        self._buf = bytearray()
        self._max_body = max_body

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        buf += data
        frames = []
        pos = 0
        while len(buf) - pos >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(buf, pos)
            if offset < 0 or size < 0 or size > self._max_body:
                raise FrameError(f"bad frame header: offset {offset}, size {size}")
            if len(buf) - pos - HEADER_SIZE < size:
                break
            start = pos + HEADER_SIZE
            frames.append(Frame(offset, bytes(buf[start:start + size])))
            pos = start + size
        del buf[:pos]
        return frames


class WholeRecords(NamedTuple):
    """Bytes to append at ``offset``: whole records only; ``store_timestamp`` is the last one's (0 if
    the run ends with a file's BLANK)."""

    offset: int
    data: bytes
    store_timestamp: int


class RecordAssembler:
    """Turns the master's frames into runs of whole records at known offsets.

    ``expected`` is where the next frame must begin (the slave's CommitLog end plus what is held);
    None accepts any first frame (an empty slave: the master starts it at its last file). A frame that
    begins elsewhere is a gap: ``GapError``, and the slave reconnects from its own offset.
    """

    def __init__(self, file_size: int, expected: int | None) -> None:
        self.file_size = file_size
        self._start = expected  # CommitLog offset of _held[0]
        self._held = bytearray()

    @property
    def expected(self) -> int | None:
        return None if self._start is None else self._start + len(self._held)

    def push(self, frame: Frame) -> WholeRecords | None:
        exp = self.expected
        if exp is not None and frame.offset != exp:
            raise GapError(f"the master sent offset {frame.offset}, this slave expects {exp}")
        if exp is None:
            self._start = frame.offset
        if not frame.body:
            return None
        held = self._held
        held += frame.body
        start = self._start
        assert start is not None
        end, ts = self._whole_prefix(held, start)
        if end == 0:
            return None
        out = WholeRecords(start, bytes(held[:end]), ts)
        del held[:end]
        self._start = start + end
        return out

    def _whole_prefix(self, buf: bytearray, start: int) -> tuple[int, int]:
        """Length of the run of whole records at the head of ``buf`` and the last one's store time."""
        pos = 0
        ts = 0
        n = len(buf)
        while n - pos >= 8:
            total, magic = _II.unpack_from(buf, pos)
            if magic == BLANK_MAGIC_CODE:
                # A file's end: the BLANK runs to the file boundary (its bytes past 8 are zeros).
                rest = self.file_size - (start + pos) % self.file_size
                if total != rest:
                    raise FrameError(f"BLANK record of {total} bytes where the file has {rest} left")
                if n - pos < rest:
                    break
                pos += rest
                ts = 0
                continue
            if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or total < MIN_RECORD_SIZE:
                raise FrameError(f"no record at CommitLog offset {start + pos} (size {total}, magic {magic:#x})")
            if n - pos < total:
                break
            sysflag = _I.unpack_from(buf, pos + POS_SYSFLAG)[0]
            ts = _Q.unpack_from(buf, pos + store_timestamp_pos(sysflag))[0]
            pos += total
        return pos, ts


class GapError(FrameError):
    """A frame that does not continue where the slave's CommitLog ends."""
