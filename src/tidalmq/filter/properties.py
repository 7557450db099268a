"""Read message properties straight from a stored CommitLog record (the layout of common/record.py),
without decoding the rest of it: only what a filter needs, on the pull path."""

from __future__ import annotations

import struct

from tidalmq.common import sysflag as sf
from tidalmq.common.record import MESSAGE_MAGIC_CODE_V2, POS_BORNHOST, POS_MAGIC, POS_SYSFLAG

_I = struct.Struct(">i")
_H = struct.Struct(">H")


def properties_bytes(record: bytes | bytearray | memoryview) -> bytes:
    """The raw ``name\\x01value\\x02`` properties section of one stored record."""
    sysflag = _I.unpack_from(record, POS_SYSFLAG)[0]
    p = POS_BORNHOST + (20 if sysflag & sf.BORNHOST_V6_FLAG else 8) + 8
    p += (20 if sysflag & sf.STOREHOSTADDRESS_V6_FLAG else 8) + 12  # store host, reconsume, prepared offset
    p += 4 + _I.unpack_from(record, p)[0]  # body
    if _I.unpack_from(record, POS_MAGIC)[0] == MESSAGE_MAGIC_CODE_V2:
        p += 2 + _H.unpack_from(record, p)[0]
    else:
        p += 1 + record[p]
    n = _H.unpack_from(record, p)[0]
    return bytes(record[p + 2 : p + 2 + n])


def lookup(raw: bytes, key: bytes) -> str | None:
    """The value of one property in a raw properties section; ``key`` is ``name + b"\\x01"``.

    Searching from the end gives the last of duplicate names, as Java's HashMap decoding does; a
    match must start the section or follow a ``\\x02`` (a longer name may end with this one). An
    empty value is no value: Java's decoder (string2messageProperties) skips it."""
    end = len(raw)
    while True:
        i = raw.rfind(key, 0, end)
        if i < 0:
            return None
        if i == 0 or raw[i - 1] == 2:
            start = i + len(key)
            j = raw.find(b"\x02", start)
            j = j if j >= 0 else len(raw)
            return raw[start:j].decode("utf-8", "replace") if j > start else None
        end = i + len(key) - 1


def decode_all(raw: bytes) -> dict[str, str]:
    """Every property (MessageDecoder.string2messageProperties): the first ``\\x01`` splits a pair."""
    out: dict[str, str] = {}
    for item in raw.decode("utf-8", "replace").split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out
