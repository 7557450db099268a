"""Message ids: the offset msgId (store host + port + CommitLog offset) and the client UNIQ_KEY."""

from __future__ import annotations

import ipaddress
import os
import struct
import threading
import time

import numpy as np

_IPV4 = struct.Struct(">4siq")
_IPV6 = struct.Struct(">16siq")


def encode_offset_msg_id(host: bytes, port: int, commit_offset: int) -> str:
    """``host`` is the 4- or 16-byte address; the id is upper-case hex as RocketMQ prints it."""
    packer = _IPV4 if len(host) == 4 else _IPV6
    return packer.pack(host, port, commit_offset).hex().upper()


_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def joined_offset_msg_ids(prefix: str, offsets: np.ndarray) -> str:
    """``prefix`` (the hex of store host and port) and each CommitLog offset as 16 hex digits, joined
    by commas: a batch's msgIds as RocketMQ answers them. One numpy pass instead of a format per id."""
    n = len(offsets)
    if n == 0:
        return ""
    p = len(prefix)
    out = np.empty((n, p + 17), dtype=np.uint8)
    out[:, :p] = np.frombuffer(prefix.encode("ascii"), dtype=np.uint8)
    raw = offsets.astype(">u8").view(np.uint8).reshape(n, 8)
    out[:, p : p + 16 : 2] = _HEX_DIGITS[raw >> 4]
    out[:, p + 1 : p + 16 : 2] = _HEX_DIGITS[raw & 0x0F]
    out[:, p + 16] = ord(",")
    return out.tobytes()[:-1].decode("ascii")


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(host, port, CommitLog offset) from an offset msgId; ``ValueError`` if it is not one."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"not an offset msgId (length {len(msg_id)}): {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    packer = _IPV4 if len(raw) == 16 else _IPV6
    host, port, offset = packer.unpack(raw)
    return str(ipaddress.ip_address(host)), port, offset


LOOPBACK_IPV4 = ipaddress.IPv4Address("127.0.0.1").packed


def host_bytes(host: str) -> bytes:
    """4 or 16 address bytes of a textual IP (anything unparsable counts as 127.0.0.1)."""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return LOOPBACK_IPV4


class UniqIdGenerator:
    """UNIQ_KEY ids laid out as RocketMQ's MessageClientIDSetter: ip, pid, a class-loader hash,
    milliseconds since the start of the month, and a counter (32 hex characters for IPv4)."""

    def __init__(self, ip: bytes = LOOPBACK_IPV4) -> None:
        fixed = ip + struct.pack(">hi", os.getpid() & 0x7FFF, id(self) & 0x7FFFFFFF)
        self._prefix = fixed.hex().upper()
        self._lock = threading.Lock()
        self._counter = 0
        self._start_ms = 0
        self._next_start_ms = 0

    def _set_start(self, now_ms: int) -> None:
        t = time.gmtime(now_ms / 1000)
        month_start = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
        self._start_ms = month_start
        if t.tm_mon == 12:
            nxt = (t.tm_year + 1, 1)
        else:
            nxt = (t.tm_year, t.tm_mon + 1)
        self._next_start_ms = int(time.mktime((nxt[0], nxt[1], 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def next_block(self, n: int) -> tuple[str, int]:
        """``n`` ids taken at once, as their common head (prefix and time) and the counter before the first:
        id i (from 1) is the head and ``(counter + i) & 0xFFFF`` as 4 hex digits (the Spark sink builds
        them column-at-a-time from this)."""
        now = int(time.time() * 1000)
        with self._lock:
            if now >= self._next_start_ms:
                self._set_start(now)
            diff = max(0, now - self._start_ms) & 0xFFFFFFFF
            counter = self._counter
            self._counter = (counter + n) & 0xFFFF
        return f"{self._prefix}{diff:08X}", counter

    def next_id(self) -> str:
        head, counter = self.next_block(1)
        return f"{head}{(counter + 1) & 0xFFFF:04X}"

    def next_ids(self, n: int) -> list[str]:
        """``n`` ids as ``n`` calls of next_id in the same millisecond would give (a batch's: one clock
        read and one lock for all)."""
        head, counter = self.next_block(n)
        return [f"{head}{(counter + i) & 0xFFFF:04X}" for i in range(1, n + 1)]
