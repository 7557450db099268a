"""What a remoting server admits, as far as file descriptors go, how it learns that a peer it has
stopped reading from is gone, and the sweep that closes idle and overdue connections.

Every accepted connection takes a descriptor from the same table as the store's files (each CommitLog,
ConsumeQueue and index file keeps one open), its persistence writes (topics.json, consumerOffset.json ...
are written to a temporary file and renamed) and the other ports of the process. A flood of idle sockets
that took the last descriptors made those opens fail. So a server admits at most
``serverMaxConnections`` connections, and none whose descriptor is numbered within
``serverReservedFileDescriptors`` of the process's limit (RLIMIT_NOFILE): the kernel hands out the
lowest free descriptor, so a high one means the table is nearly full, whoever filled it.
"""

from __future__ import annotations

import asyncio
import resource
import select
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidalmq.remoting.config import RemotingServerConfig

if TYPE_CHECKING:
    from tidalmq.remoting.transport import RemotingServer

# Descriptors kept when serverReservedFileDescriptors is 0 (derived): a quarter of the limit, at least this.
MIN_RESERVED_FDS = 64
_UNLIMITED = 1 << 20  # what RLIM_INFINITY counts as (the kernel's default nr_open)

# A peer that closed (FIN: POLLRDHUP, Linux) or reset the connection (POLLHUP / POLLERR). poll() reports
# these whether or not unread data is queued ahead of the close, which a read would have to get through first.
_GONE = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


def descriptor_limit() -> int:
    """The process's soft limit on open descriptors."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _UNLIMITED if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    fd_ceiling: int  # a connection whose descriptor is >= this is refused
    fd_limit: int

    @classmethod
    def of(cls, cfg: RemotingServerConfig, fd_limit: int | None = None) -> ConnectionLimits:
        """``cfg``'s limits under the descriptor limit (the process's, unless given): serverMaxConnections
        (0: as many as the descriptors allow) never above the limit less the reserved descriptors."""
        limit = descriptor_limit() if fd_limit is None else fd_limit
        reserved = cfg.server_reserved_file_descriptors
        if reserved <= 0:
            reserved = max(MIN_RESERVED_FDS, limit // 4)
        ceiling = max(1, limit - reserved)
        wanted = cfg.server_max_connections
        return cls(ceiling if wanted <= 0 else min(wanted, ceiling), ceiling, limit)

    def refusal(self, open_connections: int, fd: int) -> str | None:
        """Why a new connection with descriptor ``fd`` is refused (None: admitted)."""
        if open_connections >= self.max_connections:
            return f"{open_connections} connections open (serverMaxConnections {self.max_connections})"
        if fd >= self.fd_ceiling:
            return (f"descriptor {fd} of at most {self.fd_limit} (RLIMIT_NOFILE): the last "
                    f"{self.fd_limit - self.fd_ceiling} are kept for files (serverReservedFileDescriptors)")
        return None


def gone(fds: Sequence[int]) -> set[int]:
    """Those of ``fds`` whose peer has closed or reset the connection, without reading from them."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, _GONE)
    return {fd for fd, events in poller.poll(0) if events & (_GONE | select.POLLNVAL)}


async def sweep(server: RemotingServer) -> None:
    """Close idle connections and those with an overdue unfinished frame, and drop those whose peer
    went away while reading from them was paused."""
    cfg = server.config
    limits = [t for t in (cfg.server_channel_max_idle_time_seconds, cfg.server_frame_timeout_seconds) if t > 0]
    period = max(0.05, min(1.0, min(limits) / 4)) if limits else 1.0
    while True:
        await asyncio.sleep(period)
        now = time.monotonic()
        for c in list(server.connections):
            c.check_timeouts(now, cfg)
        drop_gone_peers(server)


def drop_gone_peers(server: RemotingServer) -> None:
    """A connection whose reading is paused (back-pressure: a full output buffer, or
    serverChannelMaxPendingRequests of its requests unanswered, such as held pulls) would not see its
    peer's FIN or RST until something is written to it, which for held pulls is when they time out:
    the sockets are polled for it instead, and a closed one is dropped with all it holds."""
    by_fd = {fd: c for c in server.connections if c.reading_paused and (fd := c.socket_fd()) >= 0}
    if not by_fd:
        return
    for fd in gone(list(by_fd)):
        c = by_fd[fd]
        server.log_limit.warning("gone", "dropping %s:%s: the peer closed the connection while reading from it "
                                 "was paused", *c.remote)
        if c.transport is not None:
            c.transport.abort()
