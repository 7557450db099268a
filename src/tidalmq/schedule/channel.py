"""The frames between the broker and its schedule process (docs/multicore.md): a pure codec, bytes in,
values out; the sockets are the business of broker/schedule/timer_process.py and schedule/timer_host.py.

A frame is a 4-byte big-endian payload length, a 1-byte kind, the payload. Control payloads are JSON;
the two hot ones are binary: a batch of deliveries (PUT, records already encoded by ``restore_record``)
and the records a QUERY found.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Sequence
from typing import Any

from tidalmq.store.results import PutRequest, PutStatus

_HEAD = struct.Struct(">IB")
_U32 = struct.Struct(">I")
_REQ = struct.Struct(">HiI")  # topic length, queue id, record count

MAX_FRAME = 1 << 30  # a delivery batch is at most DELIVER_BATCH records of at most maxMessageSize each


class Kind(enum.IntEnum):
    # child -> broker
    PUT = 1  # a delivery batch: append these ahead of client sends, answer PUT_RESULT
    QUERY = 2  # query_message by key (the post-crash duplicate check), answer RECORDS
    WAIT_REPUT = 3  # wait until reput dispatched what the CommitLog holds, answer STATE then REPUT_DONE
    VIEW = 4  # the timer's snapshot and pending counts per topic (runtime info, GET_TIMER_METRICS)
    RESUME = 5  # after a PUT failed the broker refuses the following PUTs (nothing stored) until this
    # broker -> child
    PUT_RESULT = 11
    RECORDS = 12
    REPUT_DONE = 13
    STATE = 14  # how far the child may read: the timer queue's range, CommitLog offsets, index on/off
    VIEW_WANTED = 15  # a reader wants a fresh VIEW
    STOP = 16  # commit and exit


_STATUSES = list(PutStatus)


class ChannelError(ValueError):
    """A frame that does not decode (a bug or a stray writer, never expected)."""


def frame(kind: Kind, payload: bytes | bytearray = b"") -> bytes:
    return _HEAD.pack(len(payload), kind) + payload


def json_frame(kind: Kind, value: Any) -> bytes:
    return frame(kind, json.dumps(value, separators=(",", ":")).encode())


class FrameReader:
    """Cuts a byte stream into (kind, payload) frames, whatever the chunks it arrives in."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[Kind, bytes]]:
        self._buf += data
        out: list[tuple[Kind, bytes]] = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= _HEAD.size:
            n, kind = _HEAD.unpack_from(buf, pos)
            if n > MAX_FRAME:
                raise ChannelError(f"frame of {n} bytes")
            end = pos + _HEAD.size + n
            if end > len(buf):
                break
            try:
                k = Kind(kind)
            except ValueError:
                raise ChannelError(f"unknown frame kind {kind}") from None
            out.append((k, bytes(buf[pos + _HEAD.size : end])))
            pos = end
        del buf[:pos]
        return out


def encode_puts(requests: Sequence[PutRequest]) -> bytes:
    parts: list[bytes | bytearray] = [_U32.pack(len(requests))]
    for r in requests:
        topic = r.topic.encode()
        records = r.records
        if not isinstance(records, list):
            raise TypeError("a delivery batch holds encoded records, not a RecordBatch")
        parts.append(_REQ.pack(len(topic), r.queue_id, len(records)))
        parts.append(topic)
        for rec in records:
            parts.append(_U32.pack(len(rec)))
            parts.append(rec)
    return b"".join(parts)


def decode_puts(payload: bytes) -> list[PutRequest]:
    try:
        (n,), pos = _U32.unpack_from(payload, 0), _U32.size
        out: list[PutRequest] = []
        for _ in range(n):
            tlen, qid, nrec = _REQ.unpack_from(payload, pos)
            pos += _REQ.size
            topic = payload[pos : pos + tlen].decode()
            pos += tlen
            records: list[bytearray] = []
            for _ in range(nrec):
                (size,) = _U32.unpack_from(payload, pos)
                pos += _U32.size
                records.append(bytearray(payload[pos : pos + size]))
                pos += size
            out.append(PutRequest(topic, qid, records))
    except (struct.error, UnicodeDecodeError) as e:
        raise ChannelError(f"bad PUT frame: {e}") from None
    if pos != len(payload):
        raise ChannelError("bad PUT frame: trailing bytes")
    return out


def encode_statuses(statuses: Sequence[PutStatus]) -> bytes:
    return bytes(_STATUSES.index(s) for s in statuses)


def decode_statuses(payload: bytes) -> list[PutStatus]:
    try:
        return [_STATUSES[b] for b in payload]
    except IndexError:
        raise ChannelError("bad PUT_RESULT frame") from None


def encode_records(records: Sequence[bytes | memoryview]) -> bytes:
    parts: list[bytes | memoryview] = [_U32.pack(len(records))]
    for r in records:
        parts.append(_U32.pack(len(r)))
        parts.append(r)
    return b"".join(parts)


def decode_records(payload: bytes) -> list[bytes]:
    try:
        (n,), pos = _U32.unpack_from(payload, 0), _U32.size
        out: list[bytes] = []
        for _ in range(n):
            (size,) = _U32.unpack_from(payload, pos)
            pos += _U32.size
            out.append(payload[pos : pos + size])
            pos += size
    except struct.error as e:
        raise ChannelError(f"bad RECORDS frame: {e}") from None
    if pos != len(payload):
        raise ChannelError("bad RECORDS frame: trailing bytes")
    return out


def decode_json(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError as e:
        raise ChannelError(f"bad JSON frame: {e}") from None
