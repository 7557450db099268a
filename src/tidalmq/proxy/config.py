"""The gRPC endpoint's configuration, with RocketMQ proxy's key names (rmq-proxy.json)."""

from __future__ import annotations

from dataclasses import dataclass

from tidalmq.common.config import JAVA_INT_MAX, check_fields, in_range, port_in_range

DEFAULT_GRPC_PORT = 8081  # RocketMQ proxy's grpcServerPort


@dataclass
class ProxyConfig:
    # grpcServerPort: 0 picks a free port (the ready line names it); -1 serves no gRPC endpoint.
    grpc_server_port: int = DEFAULT_GRPC_PORT
    # Bodies over this are refused (MESSAGE_BODY_TOO_LARGE); the standalone passes its maxMessageSize.
    max_message_size: int = 4 * 1024 * 1024
    # The long polling a push consumer is told to use (Settings.subscription.long_polling_timeout).
    long_polling_timeout_ms: int = 30_000
    # aclEnable: the clients' credentials are checked against plain_acl.yml ($ROCKETMQ_HOME/conf, or
    # aclPlainFile); in the standalone the broker's own aclEnable decides, and its ACL is shared.
    acl_enable: bool = False
    acl_plain_file: str = ""
    # enableTopicMessageTypeCheck: the endpoint tells its producers to check each message's type against the
    # types the route's queues accept (Settings.publishing.validate_message_type). RocketMQ's proxy defaults
    # to true; TidalMQ to false, as its broker's key of the same name (which refuses a wrong type on send),
    # whose value the standalone's endpoint takes.
    enable_topic_message_type_check: bool = False

    def validate(self) -> None:
        """Refuse values the endpoint cannot run with (``ConfigError`` names the key)."""
        check_fields(self, {"grpc_server_port": port_in_range(-1), "max_message_size": in_range(1, JAVA_INT_MAX),
                            "long_polling_timeout_ms": in_range(1, JAVA_INT_MAX)})
