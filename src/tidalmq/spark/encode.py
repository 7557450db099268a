"""Column-at-a-time encoding of the sink's plain rows (no schedule, no sharding key) into a
``SEND_BATCH_MESSAGE`` body: pyarrow batch in, bytes out, no Python object per row.

The per-row loop (a property string, a header ``struct.pack`` and a UNIQ_KEY f-string a row) was most of
the sink's Python time; here every step is a pyarrow kernel or a numpy array operation over the batch.
The layout is ``MessageDecoder.encodeMessages``'s, the one ``Producer.send_batch`` writes: per message
``totalsize, magic, bodycrc, flag, bodylen`` (big-endian int32), the body, a big-endian int16 properties
length and the properties text (encoded name/value pairs, common/message.py's codec, ending with UNIQ_KEY).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidalmq.common import message as mc

_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_MAX_PROPERTIES = 0x7FFF  # the properties length is a signed short on the wire


def hex_ids(prefix: str, counters: np.ndarray, width: int) -> np.ndarray:
    """UNIQ_KEYs ``prefix`` + the counter as ``width`` upper-case hex digits (wrapping), as an (n, len) uint8
    array: the sink's deterministic keys (``message_keys`` + row number) and the producer's ids (``UniqIdGenerator.next_block``)."""
    n = len(counters)
    out = np.empty((n, len(prefix) + width), dtype=np.uint8)
    out[:, :len(prefix)] = np.frombuffer(prefix.encode(), dtype=np.uint8)
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64) * 4
    out[:, len(prefix):] = _HEX[(counters.astype(np.uint64)[:, None] >> shifts) & 0xF]
    return out


def _fixed(rows: np.ndarray) -> pa.Array:
    """An (n, w) uint8 array as a binary column of n w-byte values."""
    rows = np.ascontiguousarray(rows)
    n, w = rows.shape
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(w), n, [None, pa.py_buffer(rows.tobytes())]) \
        .cast(pa.binary())


def _part(name: bytes, col: pa.Array | None) -> pa.Array | None:
    """An encoded property (``mc.encode_property``) a row, null where the value is null or empty (the property is left out)."""
    if col is None:
        return None
    col = col.cast(pa.binary())
    text = pc.binary_join_element_wise(name + mc.NAME_VALUE_SEPARATOR_BYTES, col, mc.PROPERTY_SEPARATOR_BYTES, b"")
    return pc.if_else(pc.greater(pc.binary_length(col), 0), text, pa.scalar(None, pa.binary()))


def keys_text(col: pa.Array) -> pa.Array:
    """The KEYS value: a string column as is, an array<string> joined by spaces (nulls and empties left out,
    as ``Message`` does)."""
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        return pa.array([None if k is None else " ".join(x for x in k if x) for k in col.to_pylist()],
                        pa.string())
    return col


def properties_text(col: pa.Array) -> pa.Array:
    """A map<string,string> column as encoded properties text a row (null values left out)."""
    return pa.array(["".join(mc.encode_property(k, v) for k, v in m if v is not None) if m else None
                     for m in col.to_pylist()], pa.string())


def encode_messages(bodies: pa.Array, ids: np.ndarray, tags: pa.Array | None = None, keys: pa.Array | None = None,
                    props: pa.Array | None = None) -> pa.Array:
    """One encoded message a row (a binary column whose values buffer is the batch body, contiguous).
    ``bodies`` binary, not null; ``ids`` from ``hex_ids``; ``props`` already text (``properties_text``).
    Raises ValueError when a row's properties are over the protocol's 32767 bytes."""
    parts = [p for p in (_part(b"TAGS", tags), _part(b"KEYS", keys), None if props is None else props.cast(pa.binary()))
             if p is not None]
    uniq = pc.binary_join_element_wise(mc.property_key(mc.UNIQ_KEY).encode(), _fixed(ids), mc.PROPERTY_SEPARATOR_BYTES, b"")
    text = pc.binary_join_element_wise(*parts, uniq, b"", null_handling="replace", null_replacement=b"")
    plen = pc.binary_length(text).to_numpy(zero_copy_only=False).astype(np.int64)
    if len(plen) and int(plen.max()) > _MAX_PROPERTIES:
        row = int(np.argmax(plen > _MAX_PROPERTIES))
        raise ValueError(f"row {row}: its properties are {int(plen[row])} bytes encoded, over {_MAX_PROPERTIES}")
    blen = pc.binary_length(bodies).to_numpy(zero_copy_only=False).astype(np.int64)
    head = np.zeros((len(blen), 5), dtype=">i4")
    head[:, 0] = 20 + blen + 2 + plen
    head[:, 4] = blen
    plen16 = plen.astype(">i2")
    return pc.binary_join_element_wise(_fixed(head.view(np.uint8).reshape(-1, 20)), bodies.cast(pa.binary()),
                                       _fixed(plen16.view(np.uint8).reshape(-1, 2)), text, b"")


def chunks(encoded: pa.Array, ids: np.ndarray, size: int, max_bytes: int = 1 << 20) -> Iterator[tuple[bytes, str]]:
    """(batch body, comma-joined UNIQ_KEYs) of at most ``size`` messages and about ``max_bytes`` (the broker's
    limit is 4 MiB a request), sliced from the encoded column's contiguous values buffer."""
    encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
    offsets = np.frombuffer(encoded.buffers()[1], dtype=np.int32)[encoded.offset:encoded.offset + len(encoded) + 1]
    data = encoded.buffers()[2]
    start, n = 0, len(encoded)
    while start < n:
        # the first row past the byte budget (at least one row a chunk), capped at `size` rows
        stop = int(np.searchsorted(offsets, offsets[start] + max_bytes, side="right")) - 1
        stop = min(max(stop, start + 1), start + size, n)
        body = data[int(offsets[start]):int(offsets[stop])].to_pybytes()
        uniq = np.concatenate([ids[start:stop], np.full((stop - start, 1), ord(","), np.uint8)], axis=1)
        yield body, uniq.tobytes()[:-1].decode()
        start = stop


def column(rb: Any, name: str | None) -> pa.Array | None:
    return None if name is None else rb.column(rb.schema.get_field_index(name))
