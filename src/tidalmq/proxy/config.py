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
    # grpcClientConsumerMaxLongPollingTimeoutMillis: the longest a receive is held waiting for messages, and
    # the long polling a push consumer is told to use (Settings.subscription.long_polling_timeout), as
    # RocketMQ 5's proxy: a push consumer's shutdown waits for its polls in flight, so this bounds it too.
    grpc_client_consumer_max_long_polling_timeout_millis: int = 20_000
    # aclEnable: the clients' credentials are checked against plain_acl.yml ($ROCKETMQ_HOME/conf, or
    # aclPlainFile); in the standalone the broker's own aclEnable decides, and its ACL is shared.
    acl_enable: bool = False
    acl_plain_file: str = ""
    # enableTopicMessageTypeCheck: each message's type against its topic's message.type (refused with
    # MESSAGE_PROPERTY_CONFLICT_WITH_TYPE), and the producers told to check it too
    # (Settings.publishing.validate_message_type). On, as RocketMQ 5's ProxyConfig; the broker's key of the
    # same name (the remoting port's check) stays off, as RocketMQ's broker never checks. The standalone's
    # endpoint takes the broker's value when the key is set (docs/message-types.md).
    enable_topic_message_type_check: bool = True

    def validate(self) -> None:
        """Refuse values the endpoint cannot run with (``ConfigError`` names the key)."""
        check_fields(self, {"grpc_server_port": port_in_range(-1), "max_message_size": in_range(1, JAVA_INT_MAX),
                            "grpc_client_consumer_max_long_polling_timeout_millis": in_range(1, JAVA_INT_MAX)})
