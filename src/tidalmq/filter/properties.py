"""Read message properties straight from a stored CommitLog record (the layout of common/record.py),
without decoding the rest of it: only what a filter needs, on the pull path."""

from __future__ import annotations

from tidalmq.common.record import properties_span


def properties_bytes(record: bytes | bytearray | memoryview) -> bytes:
    """The raw properties section of one stored record (common/message.py decodes it)."""
    at, n = properties_span(record)
    return bytes(record[at : at + n])
