"""The NameServer address server: the static HTTP endpoint RocketMQ's clients poll for the NameServer list.

``GET /rocketmq/{subgroup}`` answers ``host:port;host:port`` (RocketMQ's clients also append
``-{unitName}?nofix=1``, answered the same). The list is ``addressServerNamesrvAddr``, or the lines of
``addressServerNamesrvAddrFile`` re-read when the file changes (so an operator moves a NameServer
cluster by editing one file, and clients follow within their two-minute poll), or else this
NameServer's own address. Nothing else is served; every request is one short GET, bounded in size and
time. docs/cluster.md, "Finding the NameServers".
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tidalmq.common import top_addressing as ta
from tidalmq.common.config import ConfigError, check_fields, in_range
from tidalmq.common.log_limit import LogLimiter

log = logging.getLogger(__name__)
_REQUEST_MAX = 8 * 1024
_READ_TIMEOUT_S = 5.0


@dataclass
class AddressServerConfig:
    """RocketMQ's clients read ``rocketmq.namesrv.domain`` / ``.subgroup``; these keys are the server's."""

    address_server_port: int = -1  # -1: not served
    address_server_sub_group: str = ta.DEFAULT_SUBGROUP
    address_server_namesrv_addr: str = ""  # ';'-separated; empty: the file below, else this NameServer
    address_server_namesrv_addr_file: str = ""

    def validate(self) -> None:
        check_fields(self, {"address_server_port": in_range(-1, 65535)})
        try:
            ta.ws_addr("h", self.address_server_sub_group)
            if self.address_server_namesrv_addr:
                ta.parse_answer(self.address_server_namesrv_addr.encode())
        except ta.AddressServerError as e:
            raise ConfigError(f"addressServer: {e}") from None


class NamesrvAddressList:
    """What the server answers: the configured list, the file's, or the fallback."""

    def __init__(self, config: AddressServerConfig, fallback: list[str]) -> None:
        self._static = ta.parse_answer(config.address_server_namesrv_addr.encode()) \
            if config.address_server_namesrv_addr else None
        self._file = Path(config.address_server_namesrv_addr_file) if config.address_server_namesrv_addr_file else None
        self._fallback = fallback
        self._file_seen: tuple[int, int] | None = None
        self._file_list: list[str] | None = None
        self._bad_file = LogLimiter(log, 60.0)

    def current(self) -> list[str]:
        if self._static is not None:
            return self._static
        if self._file is not None:
            return self._from_file(self._file)
        return self._fallback

    def _from_file(self, path: Path) -> list[str]:
        try:
            st = os.stat(path)
            seen = (st.st_mtime_ns, st.st_size)
            if seen != self._file_seen:
                text = path.read_bytes()[: ta.MAX_ANSWER_BYTES + 1]
                # one address a line, or RocketMQ's own ';'-separated answer
                self._file_list = ta.parse_answer(b";".join(text.split()))
                self._file_seen = seen
        except (OSError, ta.AddressServerError) as e:
            self._bad_file.warning("file", "address server list %s unusable, keeping the last list: %s", path, e)
        return self._file_list or self._fallback


class AddressServer:
    def __init__(self, host: str, config: AddressServerConfig, addrs: NamesrvAddressList) -> None:
        self.host = host
        self.config = config
        self.addrs = addrs
        self._path = ta.PATH_PREFIX + config.address_server_sub_group
        self._server: asyncio.Server | None = None
        self._bad_request = LogLimiter(log, 10.0)

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.config.address_server_port,
                                                  limit=_REQUEST_MAX)
        log.info("NameServer address server on http://%s:%d%s", self.host, self.port, self._path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _answer(self, target: str) -> tuple[int, bytes]:
        path = target.split("?", 1)[0]
        if path == self._path or path.startswith(self._path + "-"):
            return 200, ta.answer(self.addrs.current())
        return 404, b"not found"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
                method, target, version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
                if not version.startswith("HTTP/1."):
                    raise ValueError(version)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
                self._bad_request.warning("head", "address server: a malformed request from %s refused",
                                          writer.get_extra_info("peername"))
                status, body = 400, b"bad request"
            else:
                status, body = self._answer(target) if method in ("GET", "HEAD") else (405, b"method not allowed")
                if method == "HEAD":
                    body = b""
            reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}[status]
            writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii") + body)
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
