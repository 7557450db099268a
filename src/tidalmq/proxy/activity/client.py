"""Heartbeat, NotifyClientTermination and the Telemetry stream that carries the clients' Settings
(RocketMQ's proxy ClientActivity)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from tidalmq.client.pop_consumer import MAX_POP_NUMS
from tidalmq.proxy import auth
from tidalmq.proxy.access import AccessCheck, client_id
from tidalmq.proxy.channels import TelemetryChannels
from tidalmq.proxy.config import ProxyConfig
from tidalmq.proxy.lite import LITE_CLIENT_TYPES, MAX_LITE_TOPIC_SIZE, LiteSubscriptions
from tidalmq.proxy.metadata import ProxyMetadata
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv
from tidalmq.proxy.protocol.pool import Duration
from tidalmq.proxy.response import status

# RocketMQ's consumer retry backoff (its delay levels from the 3rd: 10s 30s 1m 2m ...), as the proxy sends it
# to push consumers; 16 retries after the first attempt (retryMaxTimes).
CONSUMER_BACKOFF_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


class ClientActivity:
    def __init__(self, config: ProxyConfig, access: AccessCheck, metadata: ProxyMetadata, lite: LiteSubscriptions,
                 channels: TelemetryChannels) -> None:
        self.config = config
        self.access = access
        self.metadata = metadata
        self.lite = lite
        self.channels = channels

    async def heartbeat(self, request: sv.HeartbeatRequest, context: grpc.aio.ServicerContext) -> sv.HeartbeatResponse:
        refused = self.access.refusal(context, auth.consume_needs("", request.group.name))
        if refused is None and request.client_type in LITE_CLIENT_TYPES:
            # Heartbeats (every 10 s) name the client type too: after a restart of the endpoint a lite
            # client is known as one before its next Settings.
            self.lite.seen(client_id(context))
        return sv.HeartbeatResponse(status=refused or status())

    async def notify_client_termination(self, request: sv.NotifyClientTerminationRequest,
                                        context: grpc.aio.ServicerContext) -> sv.NotifyClientTerminationResponse:
        # signed as any call of the group (RocketMQ's proxy checks the group): else anyone naming a
        # client id would drop that client's lite subscriptions
        if (refused := self.access.refusal(context, auth.consume_needs("", request.group.name))) is not None:
            return sv.NotifyClientTerminationResponse(status=refused)
        self.lite.drop_client(client_id(context))
        return sv.NotifyClientTerminationResponse(status=status())

    def settings(self, client: pb.Settings, fifo: bool = False) -> pb.Settings:
        """The server's answer to a client's Settings (RocketMQ's proxy: its own limits and policies)."""
        out = pb.Settings()
        out.CopyFrom(client)
        if client.client_type == pb.ClientType.PRODUCER:
            out.backoff_policy.max_attempts = 3
            exp = out.backoff_policy.exponential_backoff
            exp.initial.FromMilliseconds(10)
            exp.max.FromMilliseconds(1000)
            exp.multiplier = 2.0
            out.publishing.max_body_size = self.config.max_message_size
            out.publishing.validate_message_type = self.config.enable_topic_message_type_check
        else:
            out.backoff_policy.max_attempts = len(CONSUMER_BACKOFF_S) + 1
            out.backoff_policy.customized_backoff.next.extend(Duration(seconds=s) for s in CONSUMER_BACKOFF_S)
            out.subscription.receive_batch_size = MAX_POP_NUMS
            out.subscription.fifo = fifo
            if client.client_type in LITE_CLIENT_TYPES:  # the lite clients read both, and refuse to subscribe without
                out.subscription.lite_subscription_quota = self.lite.quota
                out.subscription.max_lite_topic_size = MAX_LITE_TOPIC_SIZE
            out.subscription.long_polling_timeout.FromMilliseconds(
                self.config.grpc_client_consumer_max_long_polling_timeout_millis)
        out.metric.on = False
        return out

    async def telemetry(self, request_iterator: AsyncIterator[sv.TelemetryCommand],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[sv.TelemetryCommand]:
        """Answers each Settings with the server's; a producer's stream also carries the transaction
        checks of the topics it publishes (TransactionActivity.relay_check) for as long as it is open."""
        if (refused := self.access.refusal(context, {})) is not None:
            yield sv.TelemetryCommand(status=refused)
            return
        out: asyncio.Queue[sv.TelemetryCommand | None] = asyncio.Queue()
        topics: list[str] = []

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.HasField("settings"):
                        if cmd.settings.client_type in LITE_CLIENT_TYPES:
                            self.lite.seen(client_id(context))
                        if cmd.settings.client_type == pb.ClientType.PRODUCER:
                            self.channels.unpublish(out, topics)
                            topics[:] = [t.name for t in cmd.settings.publishing.topics]
                            self.channels.publish(out, topics)
                        fifo = False
                        if cmd.settings.client_type in (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER):
                            fifo = await self.metadata.is_fifo(cmd.settings.subscription.group.name)
                        out.put_nowait(sv.TelemetryCommand(status=status(), settings=self.settings(cmd.settings, fifo)))
                    # thread stack traces and verify-message results answer commands this proxy never sends
            finally:
                out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (cmd := await out.get()) is not None:
                yield cmd
        finally:
            self.channels.unpublish(out, topics)
            reader.cancel()
