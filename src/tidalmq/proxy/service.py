"""apache.rocketmq.v2.MessagingService on grpcio's asyncio server: the RocketMQ 5 clients' calls, answered
by talking RocketMQ's remoting protocol to the NameServer and brokers (RocketMQ's "cluster" proxy mode).
Sends go through TidalMQ's Producer, receives through pop (PopConsumer: POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME). The RPCs are answered by activities (tidalmq.proxy.activity), as RocketMQ's
proxy answers them (grpc/v2/*Activity), whose status codes and field semantics they follow; docs/grpc.md
lists what is served and what is not yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidalmq.acl import PlainAccessValidator, SessionCredentials
from tidalmq.client.transaction_producer import TransactionProducer
from tidalmq.proxy.access import AccessCheck
from tidalmq.proxy.activity.client import ClientActivity
from tidalmq.proxy.activity.consumer import (
    AckMessageActivity,
    ChangeInvisibleDurationActivity,
    ForwardMessageToDLQActivity,
    SyncLiteSubscriptionActivity,
)
from tidalmq.proxy.activity.producer import PROXY_PRODUCER_GROUP, RecallMessageActivity, SendMessageActivity
from tidalmq.proxy.activity.receive import ReceiveMessageActivity
from tidalmq.proxy.activity.route import RouteActivity
from tidalmq.proxy.activity.transaction import ProducerRegistration, RelayCheck, TransactionActivity
from tidalmq.proxy.channels import TelemetryChannels
from tidalmq.proxy.config import ProxyConfig
from tidalmq.proxy.consumers import PopConsumers
from tidalmq.proxy.lite import LiteSubscriptions
from tidalmq.proxy.metadata import ProxyMetadata
from tidalmq.remoting.tls import TlsOption


class MessagingService:
    """The endpoint's parts, and which activity answers each RPC (``rpc``). ``acl``: when set, every call
    must be signed by an account of it allowed what the call touches. ``credentials``: the identity the
    endpoint signs its own requests to the NameServer and brokers with (RocketMQ's proxy in cluster mode:
    one inner identity, tools.yml's, not each client's account). ``tls``: of those remoting connections."""

    def __init__(self, namesrv_addr: str, config: ProxyConfig, acl: PlainAccessValidator | None = None,
                 credentials: SessionCredentials | None = None, tls: TlsOption = None) -> None:
        self.config = config
        self.access = AccessCheck(acl)
        relay = RelayCheck()
        self.producer = TransactionProducer(PROXY_PRODUCER_GROUP, relay, namesrv_addr, tls=tls,
                                            max_message_size=config.max_message_size, credentials=credentials)
        instance = self.producer.instance
        self.consumers = PopConsumers(namesrv_addr, credentials, tls)
        self.metadata = ProxyMetadata(instance)
        self.lite = LiteSubscriptions()
        channels = TelemetryChannels()
        access = self.access
        self.route = RouteActivity(instance, self.metadata, access)
        self.client = ClientActivity(config, access, self.metadata, self.lite, channels)
        self.send = SendMessageActivity(config, self.producer, self.metadata, ProducerRegistration(instance), access)
        self.recall = RecallMessageActivity(self.producer, access)
        self.transaction = TransactionActivity(self.producer, channels, access)
        relay.relay = self.transaction.relay_check
        self.receive = ReceiveMessageActivity(
            self.consumers, self.metadata, self.lite, access, config.grpc_client_consumer_max_long_polling_timeout_millis)
        self.ack = AckMessageActivity(self.consumers, access)
        self.change_invisible = ChangeInvisibleDurationActivity(self.consumers, access)
        self.dead_letter = ForwardMessageToDLQActivity(self.consumers, instance, access)
        self.lite_subscription = SyncLiteSubscriptionActivity(instance, self.metadata, self.lite, access)
        self._rpcs: dict[str, Callable[..., Any]] = {
            "QueryRoute": self.route.query_route,
            "QueryAssignment": self.route.query_assignment,
            "Heartbeat": self.client.heartbeat,
            "NotifyClientTermination": self.client.notify_client_termination,
            "Telemetry": self.client.telemetry,
            "SendMessage": self.send.send_message,
            "RecallMessage": self.recall.recall_message,
            "EndTransaction": self.transaction.end_transaction,
            "ReceiveMessage": self.receive.receive_message,
            "AckMessage": self.ack.ack_message,
            "ChangeInvisibleDuration": self.change_invisible.change_invisible_duration,
            "ForwardMessageToDeadLetterQueue": self.dead_letter.forward_message_to_dead_letter_queue,
            "SyncLiteSubscription": self.lite_subscription.sync_lite_subscription,
        }

    def rpc(self, name: str) -> Callable[..., Any] | None:
        """The method answering the RPC ``name``; None for one the endpoint does not serve."""
        return self._rpcs.get(name)

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.consumers.stop()
        await self.producer.shutdown()
