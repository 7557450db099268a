"""Tag hash codes as RocketMQ stores them in ConsumeQueue entries: Java's ``String.hashCode``."""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_hash_code(tags: str | None) -> int:
    """The ConsumeQueue tag code of a message's TAGS (0 when it has none)."""
    if not tags:
        return 0
    return java_string_hash(tags)
