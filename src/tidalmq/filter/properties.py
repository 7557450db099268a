"""Read message properties straight from a stored CommitLog record (the layout of common/record.py),
without decoding the rest of it: only what a filter needs, on the pull path."""

from __future__ import annotations

from tidalmq.common.record import properties_span


def properties_bytes(record: bytes | bytearray | memoryview) -> bytes:
    """The raw ``name\\x01value\\x02`` properties section of one stored record."""
    at, n = properties_span(record)
    return bytes(record[at : at + n])


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
