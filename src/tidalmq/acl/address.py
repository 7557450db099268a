"""Remote address patterns of plain_acl.yml (RocketMQ's RemoteAddressStrategyFactory), pure.

    (blank)                      matches nothing
    *   *.*.*.*   *:*:*:*:*:*:*:*  matches every address
    192.168.0.1   ::1            one address (IPv6 in any spelling)
    192.168.0.1,10.0.0.2         a list
    192.168.0.{1,2,3}   1050::600:{1,2}   a list by its last part
    192.168.1.*   192.168.1.1-5   192.168.*.*   an octet as '*' or a range 'a-b'
    2001:db8::1-ff:*   1050::600:*        IPv6 groups likewise (hex)

RocketMQ insists on all four IPv4 parts; ``192.168.*`` is read here as ``192.168.*.*``. An IPv4
address that reaches the server as IPv4-mapped IPv6 (``::ffff:10.0.0.1``) is matched as IPv4.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressPatternError(ValueError):
    """A whiteRemoteAddress / globalWhiteRemoteAddresses entry that is not a pattern."""


def parse_host(host: str) -> IP | None:
    """The peer's address as the server sees it (``conn.remote[0]``), IPv4-mapped IPv6 unmapped."""
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@dataclass(frozen=True)
class AddressPattern:
    text: str
    everything: bool = False
    addresses: frozenset[IP] = frozenset()
    # Per part (4 octets or 8 IPv6 groups) the inclusive range it may take; None when unused.
    ranges: tuple[tuple[int, int], ...] | None = None
    version: int = 4

    def matches(self, ip: IP | None) -> bool:
        if self.everything:
            return True
        if ip is None:
            return False
        if self.addresses:
            return ip in self.addresses
        if self.ranges is None or ip.version != self.version:
            return False
        p = ip.packed
        parts = p if ip.version == 4 else [(p[i] << 8) | p[i + 1] for i in range(0, 16, 2)]
        return all(lo <= v <= hi for v, (lo, hi) in zip(parts, self.ranges, strict=True))


NOTHING = AddressPattern("")
EVERYTHING = AddressPattern("*", everything=True)


def _one(text: str) -> IP:
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        raise AddressPatternError(f"Netaddress examine Exception netaddress is {text}") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _part_range(part: str, text: str, *, hexa: bool) -> tuple[int, int]:
    top, base = (0xFFFF, 16) if hexa else (255, 10)
    part = part.strip()
    try:
        if part == "*":
            return 0, top
        if "-" in part:
            lo_s, _, hi_s = part.partition("-")
            lo, hi = int(lo_s, base), int(hi_s, base)
        else:
            lo = hi = int(part, base)
    except ValueError:
        raise AddressPatternError(f"Netaddress examine scope Exception netaddress is {text}") from None
    if not (0 <= lo <= hi <= top):
        raise AddressPatternError(f"Netaddress examine scope Exception netaddress is {text}")
    return lo, hi


def _ranges(text: str) -> AddressPattern:
    if ":" in text:
        parts = text.split(":")
        if "" in parts:  # '::' stands for as many zero groups as are missing
            i = parts.index("")
            filled = [p for p in parts if p != ""]
            if len(filled) > 7:
                raise AddressPatternError(f"Netaddress examine scope Exception netaddress is {text}")
            head = [p for p in parts[:i] if p != ""]
            tail = [p for p in parts[i:] if p != ""]
            parts = head + ["0"] * (8 - len(head) - len(tail)) + tail
        if len(parts) != 8:
            raise AddressPatternError(f"Netaddress examine scope Exception netaddress is {text}")
        return AddressPattern(text, ranges=tuple(_part_range(p, text, hexa=True) for p in parts), version=6)
    parts = text.split(".")
    if not 2 <= len(parts) <= 4:
        raise AddressPatternError(f"Netaddress examine scope Exception netaddress is {text}")
    parts += ["*"] * (4 - len(parts))
    return AddressPattern(text, ranges=tuple(_part_range(p, text, hexa=False) for p in parts), version=4)


def parse_pattern(text: str | None) -> AddressPattern:
    """One pattern, as RemoteAddressStrategyFactory reads it; AddressPatternError if it is not one."""
    if text is None or not str(text).strip():
        return NOTHING
    text = str(text).strip()
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return EVERYTHING
    if text.endswith("}"):
        head, brace, tail = text.partition("{")
        sep = ":" if ":" in text else "."
        if not brace or not head.endswith(sep) or "}" in tail[:-1]:
            raise AddressPatternError(f"MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress {text}")
        return AddressPattern(text, addresses=frozenset(_one(head + p) for p in tail[:-1].split(",")))
    if "," in text:
        return AddressPattern(text, addresses=frozenset(_one(p) for p in text.split(",")))
    if "*" in text or "-" in text:
        return _ranges(text)
    return AddressPattern(text, addresses=frozenset((_one(text),)))
