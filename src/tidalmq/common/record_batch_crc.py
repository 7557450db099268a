"""The record CRC (RocketMQ 5's ``__CRC32#``, common/record.py) for a ``RecordBatch``: its trailers reserved
at the end of each record's properties before the append, and filled in after the CommitLog has patched the
fields only known then. A packed batch (a row a record) stays packed and gets its digits with numpy."""

from __future__ import annotations

import numpy as np

from tidalmq.common.message import PROPERTY_SEPARATOR_BYTE, PROPERTY_SEPARATOR_BYTES
from tidalmq.common.record import (
    CRC32_RESERVED_LEN,
    CRC_PLACEHOLDER,
    RecordError,
    _crc32,
    crc_digits,
    crc_trailer,
)
from tidalmq.common.record_batch import RecordBatch

_POW10 = 10 ** np.arange(10, dtype=np.int64)  # the record CRC's digits, least significant first


def reserve_crc(batch: RecordBatch) -> None:
    """End every record's properties with the record CRC's trailer (``record.crc_trailer``), once;
    ``seal_crc`` fills it in after the append's patches. ``item_properties`` and the layout keep
    describing the client's properties. Raises ``RecordError`` when a record's properties would exceed
    32767 bytes."""
    if batch.crc_reserved:
        return
    n = len(batch)
    rows = batch.packed
    if rows is not None:
        size, plen_at = rows.shape[1], batch.props_at
        if size == plen_at + 2 or (rows[:, size - 1] == PROPERTY_SEPARATOR_BYTE).all():
            tail = CRC_PLACEHOLDER  # every last pair ended, or no properties
        elif (rows[:, size - 1] != PROPERTY_SEPARATOR_BYTE).all():
            tail = PROPERTY_SEPARATOR_BYTES + CRC_PLACEHOLDER  # no last pair ended
        else:  # some rows' last pair has its separator, some not: the trailers differ in length
            batch.unpack()
            rows = None
    if rows is not None:
        plen = size + len(tail) - plen_at - 2
        if plen > 32767:
            raise RecordError(f"properties too long: {plen} bytes > 32767")
        out = np.empty((n, size + len(tail)), dtype=np.uint8)
        out[:, :size] = rows
        out[:, size:] = np.frombuffer(tail, dtype=np.uint8)
        out[:, plen_at] = plen >> 8
        out[:, plen_at + 1] = plen & 0xFF
        batch.pack(out, batch.topic_at, plen_at)
        batch.trailer = len(tail)
        grown = np.full(n, len(tail), dtype=np.int64)
    else:
        batch.item_properties()  # the client's, kept before the pieces change
        pieces = batch.pieces
        sealed: list[bytes | bytearray | memoryview] = []
        grown = np.empty(n, dtype=np.int64)
        for i, pm in enumerate(pieces[4::5]):
            view = memoryview(pm).cast("B")
            tail = crc_trailer(view[2:])
            if len(view) - 2 + len(tail) > 32767:
                raise RecordError(f"properties too long: {len(view) - 2 + len(tail)} bytes > 32767")
            out_b = bytearray(view)
            out_b += tail
            out_b[0:2] = (len(out_b) - 2).to_bytes(2, "big")
            sealed.append(out_b)
            grown[i] = len(tail)
        pieces[4::5] = sealed
    # Grown, not set to the new sizes: a batch whose sizes and heads disagree must still be refused.
    batch.sizes = batch.sizes + grown
    batch.heads["total"] += grown.astype(batch.heads["total"].dtype)
    batch.crc_reserved = True


def seal_crc(batch: RecordBatch) -> None:
    """Write each record's CRC into the trailer ``reserve_crc`` put there: after the CommitLog has
    patched the offsets and the store timestamp, the last fields the CRC covers."""
    if not batch.crc_reserved:
        raise ValueError("seal_crc before reserve_crc")
    crc32 = _crc32
    cut = CRC32_RESERVED_LEN
    rows = batch.packed
    if rows is not None:
        size = rows.shape[1]
        data = memoryview(batch.pieces[0])
        crcs = np.array([crc32(data[a : a + size - cut]) for a in range(0, len(data), size)],
                        dtype=np.int64) & 0x7FFFFFFF
        rows[:, size - 11 : size - 1] = (crcs[:, None] // _POW10) % 10 + 48
        return
    pieces = batch.pieces
    for i in range(0, len(pieces), 5):
        pm = pieces[i + 4]
        assert isinstance(pm, bytearray)
        crc = crc32(pieces[i + 3], crc32(pieces[i + 2], crc32(pieces[i + 1], crc32(pieces[i]))))
        crc = crc32(memoryview(pm)[: len(pm) - cut], crc) & 0x7FFFFFFF
        pm[len(pm) - 11 : len(pm) - 1] = crc_digits(crc)
