"""What a remoting server admits, as far as file descriptors go, and how it learns that a peer it has
stopped reading from is gone.

Every accepted connection takes a descriptor from the same table as the store's files (each CommitLog,
ConsumeQueue and index file keeps one open), its persistence writes (topics.json, consumerOffset.json ...
are written to a temporary file and renamed) and the other ports of the process. A flood of idle sockets
that took the last descriptors made those opens fail. So a server admits at most
``serverMaxConnections`` connections, and none whose descriptor is numbered within
``serverReservedFileDescriptors`` of the process's limit (RLIMIT_NOFILE): the kernel hands out the
lowest free descriptor, so a high one means the table is nearly full, whoever filled it.
"""

from __future__ import annotations

import resource
import select
from collections.abc import Sequence
from dataclasses import dataclass

from tidalmq.remoting.config import RemotingServerConfig

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
