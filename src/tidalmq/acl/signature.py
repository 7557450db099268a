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
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidalmq.remoting.command import _all_str, _str_fields

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# MixAll.UNIQUE_MSG_QUERY_FLAG: a field the Java client may add after signing (query by unique key).
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"

_UNSIGNED = frozenset((SIGNATURE, UNIQUE_MSG_QUERY_FLAG))
_SHA1_BLOCK = 64


# extFields key sets -> a getter of their signed values in key order. Clients send a few fixed key sets
# (one per request type), so the sort happens once per set, and the values come out of the dict through
# one C call (operator.itemgetter) instead of a Python loop. Bounded; cleared when full.
_ORDERS: dict[tuple[str, ...], Callable[[dict[str, str]], tuple[str, ...]]] = {}
_ORDERS_MAX = 512


def _values_getter(keys: tuple[str, ...]) -> Callable[[dict[str, str]], tuple[str, ...]]:
    # Keys are ASCII, so Python's order is Java's TreeMap order.
    order = [k for k in sorted(keys) if k not in _UNSIGNED]
    if len(order) > 1:
        return operator.itemgetter(*order)
    if order:  # itemgetter of one key returns the value, not a 1-tuple
        only = order[0]
        return lambda ext: (ext[only],)
    return lambda ext: ()


# Number of signed keys -> the getter of the last key set seen with that many: a request whose signed
# keys number n and include all n keys of that getter has exactly its key set, so one C call checks the
# set and reads the values in order (a tuple of the keys, hashed and compared, costs more). A miss falls
# back to _ORDERS. Bounded like it. Read directly by the validator's inline check of a steady stream
# (PlainAccessValidator.judge_many), which falls back to _signed_text when it holds no getter for a count.
SIGNED_VALUES_BY_COUNT: dict[int, Callable[[dict[str, str]], tuple[str, ...]]] = {}


def _signed_text(ext_fields: dict[str, str]) -> bytes:
    n = len(ext_fields) - (SIGNATURE in ext_fields) - (UNIQUE_MSG_QUERY_FLAG in ext_fields)
    values = SIGNED_VALUES_BY_COUNT.get(n)
    if values is not None:
        try:
            return "".join(values(ext_fields)).encode("utf-8")
        except KeyError:  # another key set of that size
            pass
    keys = tuple(ext_fields)
    values = _ORDERS.get(keys)
    if values is None:
        values = _values_getter(keys)
        if len(_ORDERS) >= _ORDERS_MAX:
            _ORDERS.clear()
        _ORDERS[keys] = values
    if len(SIGNED_VALUES_BY_COUNT) >= _ORDERS_MAX:
        SIGNED_VALUES_BY_COUNT.clear()
    SIGNED_VALUES_BY_COUNT[n] = values
    return "".join(values(ext_fields)).encode("utf-8")


def signed_content(ext_fields: dict[str, str], body: bytes | memoryview | None) -> bytes:
    """What RocketMQ's server side signs: the extField values ordered by key (minus Signature and
    _UNIQUE_KEY_QUERY), then the body."""
    head = _signed_text(ext_fields)
    if body:
        return head + body
    return head


class Hmac:
    """HmacSHA1 with one secret, base64, over a request's signed content.

    HMAC (RFC 2104) is SHA-1 over (key ^ ipad) + message, then over (key ^ opad) + that digest. The two
    key blocks are hashed once, here, and their SHA-1 states copied per request: cheaper than
    ``hmac.digest``, which sets the key up again on every call (docs/benchmarks.md, "Figures behind the
    code"). The header text and the body are fed separately: no joined copy.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret_key: str) -> None:
        key = secret_key.encode("utf-8")
        if len(key) > _SHA1_BLOCK:
            key = hashlib.sha1(key).digest()
        key = key.ljust(_SHA1_BLOCK, b"\0")
        self._inner = hashlib.sha1(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha1(bytes(b ^ 0x5C for b in key))

    def digest(self, ext_fields: dict[str, str], body: bytes | memoryview | list[memoryview] | None) -> bytes:
        """The signature, base64, as ASCII bytes."""
        inner = self._inner.copy()
        inner.update(_signed_text(ext_fields))
        if type(body) is bytes:  # a request's body as decoded: the validator's steady stream, tested first
            inner.update(body)
        elif isinstance(body, list):  # a body kept as the pieces it will be written in
            for piece in body:
                inner.update(piece)
        elif body:
            inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return binascii.b2a_base64(outer.digest(), newline=False)

    def state_copiers(self) -> tuple[Callable[[], Any], Callable[[], Any]]:
        """The inner and outer keyed SHA-1 states' ``copy`` methods, for a caller that runs ``digest``'s
        steps inline over many requests (PlainAccessValidator.judge_many: three Python calls a request
        fewer)."""
        return self._inner.copy, self._outer.copy

    def sign(self, ext_fields: dict[str, str], body: bytes | memoryview | list[memoryview] | None) -> str:
        return self.digest(ext_fields, body).decode("ascii")

    def verify(self, ext_fields: dict[str, str], body: bytes | memoryview | list[memoryview] | None,
               signature: str) -> bool:
        """Whether ``signature`` is exactly the request's (as RocketMQ compares: the base64 text), in
        constant time. Text that is not ASCII, or values that cannot be utf-8 (lone surrogates a JSON
        header may carry), sign nothing."""
        try:
            return hmac.compare_digest(self.digest(ext_fields, body), signature.encode("ascii"))
        except UnicodeEncodeError:
            return False


def calc_signature(content: bytes, secret_key: str) -> str:
    """AclUtils.calSignature: base64(HmacSHA1(secret_key, content))."""
    return _hmac_sha1_base64(secret_key.encode("utf-8"), content)


def _hmac_sha1_base64(key: bytes, content: bytes) -> str:
    # One-shot hmac.digest (OpenSSL, no Python-level HMAC object) where the key is used once: no HMAC object
    # to build; joining the header text to a body costs less than a second update call.
    return binascii.b2a_base64(hmac.digest(key, content, "sha1"), newline=False).decode("ascii")


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
        ext_fields[SIGNATURE] = self._mac.sign(ext_fields, body)
