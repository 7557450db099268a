"""Limits of a remoting server's connections (NettyServerConfig's role), by RocketMQ's key names
where it has them.

RocketMQ closes a channel idle (nothing read and nothing written) for
``serverChannelMaxIdleTimeSeconds`` and caps frames at 16 MiB (``com.rocketmq.remoting.frameMaxLength``);
the other limits are TidalMQ's: Netty bounds a channel's memory by its thread pools and queues, an
asyncio server has to say so itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidalmq.common.config import JAVA_LONG_MAX, ConfigError, check_fields, in_range


@dataclass
class RemotingServerConfig:
    # A connection that neither reads nor writes for this long is closed (RocketMQ's default, 120 s).
    # Clients heartbeat every 30 s, so only a dead or idle peer hits it. 0 turns it off.
    server_channel_max_idle_time_seconds: float = 120.0
    # A frame whose first bytes arrived must be complete within this time (a slowloris peer trickling
    # bytes is closed). 0 turns it off.
    server_frame_timeout_seconds: float = 30.0
    # Bytes of unfinished frames buffered over all connections of the server; the connection that would
    # go past it is closed. A single frame is still bounded by the max frame size.
    server_max_buffered_bytes: int = 256 * 1024 * 1024
    # Requests of one connection whose responses are still outstanding (group commit, long polling):
    # past this the server stops reading from that connection until half of them are answered.
    server_channel_max_pending_requests: int = 4096
    # Output queued on one connection: past the high mark reading from it stops (its client does not
    # read its responses), below the low mark it starts again. Netty's names.
    write_buffer_high_water_mark: int = 4 * 1024 * 1024
    write_buffer_low_water_mark: int = 1024 * 1024
    # Connections served at once (remoting/connection_limits.py); one past it is closed as soon as it is
    # accepted. 0: as many as the descriptor limit (RLIMIT_NOFILE) less the reserved descriptors allow,
    # and never more than that whatever is set.
    server_max_connections: int = 0
    # Descriptors kept for the store's files, its persistence writes and the other ports: a connection that
    # got a descriptor numbered this close to the limit is refused. 0: a quarter of the limit, at least 64.
    server_reserved_file_descriptors: int = 0

    def validate(self) -> None:
        """Refuse limits a server cannot run with (``ConfigError`` names the key)."""
        check_fields(self, {
            "server_channel_max_idle_time_seconds": _non_negative_seconds,
            "server_frame_timeout_seconds": _non_negative_seconds,
            "server_max_buffered_bytes": in_range(1, JAVA_LONG_MAX),
            "server_channel_max_pending_requests": in_range(1, 2**31 - 1),
            "write_buffer_high_water_mark": in_range(1, JAVA_LONG_MAX),
            "write_buffer_low_water_mark": in_range(0, JAVA_LONG_MAX),
            "server_max_connections": in_range(0, 2**31 - 1),
            "server_reserved_file_descriptors": in_range(0, 2**31 - 1),
        })
        if self.write_buffer_low_water_mark > self.write_buffer_high_water_mark:
            # reading would stop at the high mark and never start again
            raise ConfigError(f"writeBufferLowWaterMark={self.write_buffer_low_water_mark}: must not be above "
                              f"writeBufferHighWaterMark={self.write_buffer_high_water_mark}")


def _non_negative_seconds(value: float) -> str | None:
    return None if 0 <= value < float("inf") else "must be 0 (off) or a positive number of seconds"
