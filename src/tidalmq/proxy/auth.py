"""The RocketMQ 5 clients' credentials on the gRPC endpoint, pure (metadata in, values out).

Each call carries ``x-mq-date-time`` (``%Y%m%dT%H%M%SZ``) and ``authorization``:
``MQv2-HMAC-SHA1 Credential=<AccessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>``, the signature
being HmacSHA1(secretKey, the date-time text) in lower-case hex (the clients' Signature class, the proxy's
AuthenticationHeader). ACL 1.0 has no replay window, and RocketMQ's proxy checks none: neither does this.

What a call touches (``needed``) mirrors PlainAccessResource.parse of the proxy's gRPC messages: groups
as their retry topic, as the remoting checks key them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from tidalmq.acl.permission import ANY, PUB, SUB
from tidalmq.common.naming import retry_topic

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"


@dataclass(frozen=True)
class Authorization:
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> Authorization | None:
    """The parts of an ``authorization`` value; None when it is not MQv2-HMAC-SHA1 or lacks one."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        return None
    parts: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, val = item.strip().partition("=")
        if eq:
            parts[key] = val.strip()
    ak, sig = parts.get("Credential"), parts.get("Signature")
    if not ak or not sig:
        return None
    return Authorization(ak, tuple(h for h in parts.get("SignedHeaders", "").split(";") if h), sig)


def sign(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).hexdigest()


def verify(auth: Authorization, secret_key: str, date_time: str | None) -> bool:
    """Whether ``auth`` signs ``date_time`` with ``secret_key`` (constant time; case of the hex ignored)."""
    if date_time is None:
        return False
    return hmac.compare_digest(sign(secret_key, date_time), auth.signature.lower())


def metadata_dict(metadata: Sequence[tuple[str, str | bytes]] | None) -> dict[str, str]:
    """gRPC invocation metadata as a dict of its text values (keys arrive lower-case)."""
    out: dict[str, str] = {}
    for key, value in metadata or ():
        if isinstance(value, str):
            out[key.lower()] = value
    return out


def peer_host(peer: str) -> str:
    """The address part of grpcio's ``context.peer()`` (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    _, _, rest = peer.partition(":")
    if rest.startswith("["):
        return rest[1:rest.find("]")]
    return rest.rpartition(":")[0] or rest


def topic_needs(topic: str, perm: int = PUB) -> dict[str, int]:
    return {topic: perm} if topic else {}


def consume_needs(topic: str, group: str) -> dict[str, int]:
    """Receiving, acking, changing invisibility, forwarding to the DLQ: SUB on the topic and the group."""
    out = {topic: SUB} if topic else {}
    if group:
        out[retry_topic(group)] = SUB
    return out


def route_needs(topic: str) -> dict[str, int]:
    """QueryRoute asks for either permission on the topic (ANY), as RocketMQ's proxy does."""
    return {topic: ANY} if topic else {}

