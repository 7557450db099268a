"""Asks a NameServer address server for the NameServer list (RocketMQ's TopAddressing.fetchNSAddr).

One HTTP/1.0 GET on a connection of its own, bounded in time and size; the answer is read by
``common.top_addressing.parse_answer``. Used by the clients and by the broker
(``fetchNamesrvAddrByAddressServer``).
"""

from __future__ import annotations

import asyncio

from tidalmq.common import top_addressing as ta

_HEAD_MAX = 16 * 1024


async def fetch_namesrv_addrs(url: str, timeout: float = 3.0) -> list[str]:
    """The NameServer list ``url`` answers; AddressServerError for anything but a 200 with a list."""
    host, port, path = ta.split_url(url)
    try:
        return await asyncio.wait_for(_get(host, port, path), timeout)
    except TimeoutError:
        raise ta.AddressServerError(f"{url} did not answer within {timeout:g} s") from None
    except OSError as e:
        raise ta.AddressServerError(f"{url} cannot be reached: {e.strerror or e}") from None


async def _get(host: str, port: int, path: str) -> list[str]:
    reader, writer = await asyncio.open_connection(host, port, limit=_HEAD_MAX)
    try:
        hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {hostport}\r\nConnection: close\r\n\r\n".encode("ascii"))
        await writer.drain()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise ta.AddressServerError("the address server's answer has no complete HTTP head") from None
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or parts[1] != "200":
            raise ta.AddressServerError(f"the address server answered {status_line[:80]!r}")
        body = await reader.read(ta.MAX_ANSWER_BYTES + 1)
        while len(body) <= ta.MAX_ANSWER_BYTES:
            more = await reader.read(ta.MAX_ANSWER_BYTES + 1 - len(body))
            if not more:
                break
            body += more
        return ta.parse_answer(body)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass
