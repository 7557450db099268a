"""Permissions of RocketMQ's ACL 1.0 (Permission.java): bit flags, their names, and the request codes
that need an admin account."""

from __future__ import annotations

from tidalmq.remoting.protocol.requests import Server, admin_codes

DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

_BY_NAME = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def parse_perm(text: str | None) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB`` (or ``SUB|PUB``), ``DENY``; anything else, or nothing, is DENY."""
    if text is None:
        return DENY
    return _BY_NAME.get(str(text).strip(), DENY)


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return "|".join(n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit) or "DENY"


def check_permission(needed: int, owned: int) -> bool:
    """Permission.checkPermission: DENY wins; ANY is satisfied by PUB or SUB."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


# RocketMQ's Permission.ADMIN_CODE, and the codes of this broker that administer it as much: they
# change or delete configuration, reset offsets, delete files, or dump every topic's, group's or
# offset's configuration: those its declaration marks admin (remoting/protocol/requests.py).
BROKER_ADMIN_CODES: frozenset[int] = admin_codes(Server.BROKER)

# The NameServer (RocketMQ's has no ACL): what changes the routes or the KV config needs an admin
# account; everything else (routes, cluster info, topic lists, KV reads) stays open to anyone.
NAMESRV_ADMIN_CODES: frozenset[int] = admin_codes(Server.NAMESRV)
