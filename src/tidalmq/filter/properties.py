"""Read message properties straight from a stored CommitLog record (the layout of common/record.py),
without decoding the rest of it: only what a filter needs, on the pull path."""

from __future__ import annotations

import struct

from tidalmq.common import sysflag as sf
from tidalmq.common.record import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BORNHOST,
    POS_MAGIC,
    POS_SYSFLAG,
)

_unpack_i = struct.Struct(">i").unpack_from
# BORNHOST (ip4+port) + STORETIMESTAMP + STOREHOST (ip4+port) + RECONSUMETIMES + PREPARED_TRANSACTION_OFFSET
_BODYLEN_POS = POS_BORNHOST + 8 + 8 + 8 + 4 + 8
_BORN_V6 = sf.BORNHOST_V6_FLAG
_STORE_V6 = sf.STOREHOSTADDRESS_V6_FLAG
_V2_LAST_BYTE = MESSAGE_MAGIC_CODE_V2 & 0xFF
assert _BORN_V6 < 256 and _STORE_V6 < 256 and (MESSAGE_MAGIC_CODE & 0xFF) != _V2_LAST_BYTE


def properties_bytes(record: bytes | bytearray | memoryview) -> bytes:
    """The raw ``name\\x01value\\x02`` properties section of one stored record."""
    # Host flags live in the low byte of SYSFLAG; the v2 magic differs from v1 in its last byte.
    flags = record[POS_SYSFLAG + 3]
    p = _BODYLEN_POS + (12 if flags & _BORN_V6 else 0) + (12 if flags & _STORE_V6 else 0)
    p += 4 + _unpack_i(record, p)[0]  # body
    if record[POS_MAGIC + 3] == _V2_LAST_BYTE:
        p += 2 + ((record[p] << 8) | record[p + 1])
    else:
        p += 1 + record[p]
    n = (record[p] << 8) | record[p + 1]
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
