"""Request signatures of RocketMQ's ACL 1.0 (AclClientRPCHook / AclUtils / AclSigner), pure.

The signed content is the values of the request's extFields, ordered by key, concatenated (utf-8), and
then the body; ``Signature`` itself and ``_UNIQUE_KEY_QUERY`` are left out. The signature is
HmacSHA1(secretKey, content), base64. The client puts ``AccessKey`` (and ``SecurityToken`` if it has
one) into the extFields *before* signing, so they are covered too. The request code is not: ACL 1.0
has no replay protection and no expiry, and neither does this.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from dataclasses import dataclass, field

from tidalmq.remoting.command import _all_str, _str_fields

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# MixAll.UNIQUE_MSG_QUERY_FLAG: a field the Java client may add after signing (query by unique key).
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"

_UNSIGNED = frozenset((SIGNATURE, UNIQUE_MSG_QUERY_FLAG))


def signed_content(ext_fields: dict[str, str], body: bytes | memoryview | None) -> bytes:
    """What RocketMQ's server side signs: the sorted extField values (minus Signature and
    _UNIQUE_KEY_QUERY) and the body. Keys are ASCII, so Python's order is Java's TreeMap order."""
    text = "".join([v for k, v in sorted(ext_fields.items()) if k not in _UNSIGNED])
    head = text.encode("utf-8")
    if body:
        return head + body
    return head


class Hmac:
    """HmacSHA1 with one secret: the keyed state is computed once and copied per message."""

    __slots__ = ("_base",)

    def __init__(self, secret_key: str) -> None:
        self._base = hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)

    def sign(self, ext_fields: dict[str, str], body: bytes | memoryview | None) -> str:
        text = "".join([v for k, v in sorted(ext_fields.items()) if k not in _UNSIGNED])
        h = self._base.copy()
        h.update(text.encode("utf-8"))
        if body:
            h.update(body)
        return binascii.b2a_base64(h.digest(), newline=False).decode("ascii")


def calc_signature(content: bytes, secret_key: str) -> str:
    """AclUtils.calSignature: base64(HmacSHA1(secret_key, content))."""
    mac = hmac.digest(secret_key.encode("utf-8"), content, "sha1")
    return binascii.b2a_base64(mac, newline=False).decode("ascii")


@dataclass(frozen=True)
class SessionCredentials:
    """An account's keys, as a client holds them (RocketMQ's SessionCredentials)."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("an access key and a secret key are both required")


class RequestSigner:
    """AclClientRPCHook: adds AccessKey (and SecurityToken) to a request's extFields and signs it.
    The extFields dict is changed in place; the body is left alone."""

    __slots__ = ("credentials", "_mac")

    def __init__(self, credentials: SessionCredentials) -> None:
        self.credentials = credentials
        self._mac = Hmac(credentials.secret_key)

    def sign(self, ext_fields: dict[str, str], body: bytes | memoryview | list[memoryview] | None) -> None:
        c = self.credentials
        if not _all_str(ext_fields):  # sign what the encoder will put on the wire
            normal = _str_fields(ext_fields)
            ext_fields.clear()
            ext_fields.update(normal)
        ext_fields[ACCESS_KEY] = c.access_key
        if c.security_token is not None:
            ext_fields[SECURITY_TOKEN] = c.security_token
        if isinstance(body, list):
            body = b"".join(body)
        ext_fields[SIGNATURE] = self._mac.sign(ext_fields, body)
