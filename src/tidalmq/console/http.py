"""The smallest HTTP/1.1 server the console needs, on asyncio streams (no web framework dependency).

One request per connection (``Connection: close``): the console serves a handful of pages to an operator,
so keep-alive buys nothing and a bounded, close-after-answer connection cannot be held open by a client.
Request heads and bodies are bounded; anything malformed gets a 400 and the connection is closed.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs

from tidalmq.common.log_limit import LogLimiter, short_error

log = logging.getLogger("tidalmq.console")
# a page that fails on what a request sent must not write a traceback per request (common/log_limit.py)
_limited = LogLimiter(log)

MAX_HEAD = 16 * 1024
MAX_BODY = 256 * 1024
READ_TIMEOUT_S = 10.0
# Content-Length as ASCII digits only (str.isdigit admits '²', which int() refuses), and few enough of them
# that int() never meets Python's limit on long numbers: anything longer is far above MAX_BODY anyway.
CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")
# RFC 3986: a path's characters (unreserved, sub-delims, ':', '@', '/', and %XX); the query may have any
# visible ASCII character (browsers send some of RFC 3986's gen-delims unencoded there).
PATH = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*")
VISIBLE = re.compile(r"[\x21-\x7e]+")


class HttpError(Exception):
    def __init__(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers or {}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    form: dict[str, list[str]] = field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        """A query-string or form value, stripped; the form wins for a POST."""
        values = self.form.get(name)
        if values:
            return values[0].strip()
        return self.query.get(name, default).strip()


@dataclass
class Response:
    body: str
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str], dict[str, str]]:
    try:
        text = head.decode("latin-1")
        line, *rest = text.split("\r\n")
        method, target, version = line.split(" ")
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise HttpError(505, "HTTP/1.x only")
    headers: dict[str, str] = {}
    for h in rest:
        if not h:
            continue
        name, sep, value = h.partition(":")
        if not sep:
            raise HttpError(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    # Only a path and a query (origin-form): the console is no proxy, so an absolute URL or '*' is no page.
    # Split here rather than by urlsplit, which raises on a '[' it takes for an IPv6 host ('//[').
    path, _, query_text = target.partition("?")
    if not PATH.fullmatch(path) or not VISIBLE.fullmatch(target):
        raise HttpError(400, "the request target must be a path (/...) of RFC 3986's characters")
    query = {k: v[0] for k, v in parse_qs(query_text.partition("#")[0], keep_blank_values=True).items()}
    return method.upper(), path, query, headers


async def read_request(reader: asyncio.StreamReader) -> Request:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    method, path, query, headers = _parse_head(head[:-4])
    form: dict[str, list[str]] = {}
    length = headers.get("content-length", "0")
    if not CONTENT_LENGTH.fullmatch(length):
        raise HttpError(400, "bad Content-Length: a decimal number of at most 18 digits")
    n = int(length)
    if n > MAX_BODY:
        raise HttpError(413, "request body too large")
    if n:
        body = await reader.readexactly(n)
        if headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            raise HttpError(415, "forms only (application/x-www-form-urlencoded)")
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return Request(method, path, query, headers, form)


def encode_response(resp: Response) -> bytes:
    body = resp.body.encode("utf-8")
    try:
        reason = HTTPStatus(resp.status).phrase
    except ValueError:
        reason = ""
    headers = {
        "Content-Type": resp.content_type,
        "Content-Length": str(len(body)),
        "Connection": "close",
        # The pages are the console's own: no framing by other sites (clickjacking), no inline script
        # other than ours, no sniffing message bodies into another type.
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        **resp.headers,
    }
    head = f"HTTP/1.1 {resp.status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("latin-1") + body


class HttpServer:
    """Serves ``handler`` on ``host:port`` (0: a free port, named by ``port`` once started)."""

    def __init__(self, host: str, port: int, handler: Handler) -> None:
        self.host = host
        self.port = port
        self.handler = handler
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                req = await asyncio.wait_for(read_request(reader), READ_TIMEOUT_S)
                resp = await self.handler(req)
            except HttpError as e:
                resp = Response(e.text, e.status, "text/plain; charset=utf-8", e.headers)
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            except Exception as e:  # a bug in a page must not take the console down
                _limited.warning(("page failed", type(e).__name__), "console page failed: %s", short_error(e))
                log.debug("console page failed", exc_info=True)
                resp = Response("internal error (see the broker's log)", 500, "text/plain; charset=utf-8")
            writer.write(encode_response(resp))
            await writer.drain()
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            # The loop's end cancels a request still being read. Returned from, not raised: Python 3.11's
            # start_server asks a cancelled handler task for its exception, which raises and logs a traceback.
            pass
        finally:
            writer.close()
