"""A small asyncio client for etcd's v3 HTTP/JSON gateway (etcd 3.4/3.5 serve it on the client URL).

Why not a gRPC client: controller mode needs five calls (range, txn, lease grant, lease keepalive, lease
revoke), each one request and one answer; the gateway serves them as JSON POSTs, so no grpcio/protobuf
stack (and no pin to keep in step with the project's own gRPC dependency) is needed. Keys and values are
base64 in the JSON, int64s are strings (proto3 JSON mapping).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

REQUEST_TIMEOUT_S = 2.0
MAX_RESPONSE = 16 * 1024 * 1024


class EtcdError(Exception):
    """etcd could not be reached or refused a request (every endpoint was tried)."""


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    lease: int


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def _kv(d: dict[str, Any]) -> KeyValue:
    return KeyValue(base64.b64decode(d["key"]).decode(), base64.b64decode(d.get("value", "")),
                    int(d.get("mod_revision", 0)), int(d.get("lease", 0)))


def prefix_end(prefix: str) -> str:
    """The range_end that selects every key starting with ``prefix`` (etcd's rule: last byte + 1)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return raw.decode()


def put_op(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
    req: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        req["lease"] = str(lease)
    return {"request_put": req}


def mod_revision_is(key: str, revision: int) -> dict[str, Any]:
    """A txn compare: ``key`` was last written at ``revision`` (0: the key does not exist)."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


class EtcdClient:
    def __init__(self, endpoints: str) -> None:
        """``endpoints``: ``;`` or ``,`` separated, ``http://host:port`` or ``host:port``."""
        self.endpoints: list[tuple[str, int]] = []
        for ep in endpoints.replace(",", ";").split(";"):
            ep = ep.strip()
            if not ep:
                continue
            parts = urlsplit(ep if "://" in ep else f"http://{ep}")
            if parts.scheme != "http" or not parts.hostname or not parts.port:
                raise ValueError(f"etcd endpoint {ep!r}: expected http://host:port")
            self.endpoints.append((parts.hostname, parts.port))
        if not self.endpoints:
            raise ValueError("no etcd endpoint given (controllerEtcdEndpoints)")
        self._preferred = 0

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` of the first endpoint that answers."""
        errors = []
        n = len(self.endpoints)
        for i in range(n):
            idx = (self._preferred + i) % n
            host, port = self.endpoints[idx]
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    answer = await _post(host, port, f"/v3/{path}", json.dumps(body).encode())
            except (OSError, TimeoutError, ValueError) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            self._preferred = idx
            return answer
        raise EtcdError(f"etcd {path}: " + "; ".join(errors))

    async def get(self, key: str) -> KeyValue | None:
        answer = await self.call("kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> list[KeyValue]:
        answer = await self.call("kv/range", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})
        return [_kv(d) for d in answer.get("kvs") or []]

    async def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]]) -> bool:
        """True when every compare held and ``success`` was applied, atomically."""
        answer = await self.call("kv/txn", {"compare": compare, "success": success})
        return bool(answer.get("succeeded"))

    async def put(self, key: str, value: bytes, lease: int = 0) -> None:
        await self.call("kv/put", put_op(key, value, lease)["request_put"])

    async def lease_grant(self, ttl_s: int) -> int:
        answer = await self.call("lease/grant", {"TTL": str(ttl_s)})
        if answer.get("error"):
            raise EtcdError(f"lease grant refused: {answer['error']}")
        return int(answer["ID"])

    async def lease_keepalive(self, lease: int) -> bool:
        """Renew ``lease``; False when etcd no longer has it (expired: its keys are gone)."""
        answer = await self.call("lease/keepalive", {"ID": str(lease)})
        return int((answer.get("result") or {}).get("TTL", 0)) > 0

    async def lease_revoke(self, lease: int) -> None:
        await self.call("lease/revoke", {"ID": str(lease)})


async def _post(host: str, port: int, path: str, body: bytes) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head + body)
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
        length = -1
        chunked = False
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if chunked:
            data = await _read_chunked(reader)
        elif length >= 0:
            data = await reader.readexactly(min(length, MAX_RESPONSE))
        else:
            data = await reader.read(MAX_RESPONSE)
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()
    answer = json.loads(data) if data else {}
    if int(parts[1]) != 200:
        raise ValueError(f"HTTP {int(parts[1])}: {answer.get('message') or answer.get('error') or data[:200]!r}")
    # lease/keepalive is a stream in gRPC: the gateway wraps its one answer in "result".
    return answer if isinstance(answer, dict) else {}


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readline()
        if len(out) > MAX_RESPONSE:
            raise ValueError("answer too large")
