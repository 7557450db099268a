"""apache.rocketmq.v2.MessagingService on grpcio's asyncio server: the RocketMQ 5 clients' calls, answered
by talking RocketMQ's remoting protocol to the NameServer and brokers (RocketMQ's "cluster" proxy mode).
Sends go through TidalMQ's Producer, receives through pop (PopConsumer: POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME). Status codes and field semantics follow RocketMQ's proxy activities
(grpc/v2/*Activity); docs/grpc.md lists what is served and what is not yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc

import grpc
from tidalmq.acl import PlainAccessValidator, SessionCredentials
from tidalmq.acl.permission import PUB
from tidalmq.broker.message_type import (
    TopicMessageType,
    check_message_type,
    message_type_of,
    needs_type_check,
    topic_message_type,
)
from tidalmq.client import validators
from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus, TransactionState
from tidalmq.client.pop_consumer import MAX_POP_NUMS, POP_CK, PopConsumer
from tidalmq.client.selector import select_by_hash
from tidalmq.client.transaction_producer import TransactionProducer
from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.proxy import auth, convert
from tidalmq.proxy.config import ProxyConfig
from tidalmq.proxy.lite import (
    LITE_CLIENT_TYPES,
    MAX_LITE_TOPIC_SIZE,
    LiteError,
    LiteSubscription,
    LiteSubscriptions,
)
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.protocol.broker_headers import ConsumerSendMsgBackRequestHeader, TopicRequestHeader
from tidalmq.remoting.tls import TlsOption

log = logging.getLogger(__name__)
Code = pb.Code

# Half messages sent through the proxy carry this producer group (PGROUP): a 5.x producer has no group.
PROXY_PRODUCER_GROUP = "PROXY_TRANSACTION_PRODUCER"
DEFAULT_INVISIBLE_MS = 30_000
# RocketMQ's consumer retry backoff (its delay levels from the 3rd: 10s 30s 1m 2m ...), as the proxy sends it
# to push consumers; 16 retries after the first attempt (retryMaxTimes).
CONSUMER_BACKOFF_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
# How long a group's FIFO flag (consumeMessageOrderly) is trusted before it is read from a broker again.
GROUP_CONFIG_TTL_S = 30.0
# How long a topic's message.type is trusted (RocketMQ proxy's topicConfigCacheRefreshSeconds).
TOPIC_CONFIG_TTL_S = 20.0
# Kept back from a receive's deadline for the answer to reach the client in time.
RECEIVE_MARGIN_S = 1.0
CLIENT_ID = "x-mq-client-id"
TOPIC_TYPES_MAX = 4096  # topics whose message.type the endpoint remembers (cleared when full)


def status(code: int = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


def _error_status(e: BaseException) -> pb.Status:
    """The status of a failed call to the brokers (RocketMQ's proxy ResponseBuilder)."""
    if isinstance(e, convert.ConvertError | LiteError):
        return status(e.code, str(e))
    if isinstance(e, validators.ValidationError):
        return status(Code.BAD_REQUEST, str(e))
    if isinstance(e, MQBrokerError):
        return status(convert.grpc_code(e.code, e.remark or ""), e.remark or str(e))
    if isinstance(e, MQClientError):
        if "No route info" in str(e):
            return status(Code.TOPIC_NOT_FOUND, str(e))
        return status(Code.PROXY_TIMEOUT if isinstance(e.__cause__, TimeoutError) else Code.INTERNAL_SERVER_ERROR, str(e))
    if isinstance(e, TimeoutError):
        return status(Code.PROXY_TIMEOUT, "the broker did not answer in time")
    log.exception("gRPC call failed", exc_info=e)
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}")


def _client_id(context: grpc.aio.ServicerContext) -> str:
    return auth.metadata_dict(context.invocation_metadata()).get(CLIENT_ID, "")


def _ms(d: Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


class _RelayCheck:
    """The broker's checks of half messages sent through the endpoint (their producer group is the
    endpoint's): relayed to a 5.x producer publishing the topic, over its Telemetry stream
    (RecoverOrphanedTransactionCommand), as RocketMQ's proxy does. Its checker answers with an
    EndTransaction of its own; the broker gets UNKNOWN from here (which changes nothing) meanwhile."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service

    def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionState:
        return TransactionState.UNKNOWN  # half messages are sent with plain sends: never called

    async def check_local_transaction(self, msg: MessageExt) -> TransactionState:
        self.service.relay_check(msg)
        return TransactionState.UNKNOWN


def _same_peer(peer: str) -> str:
    return peer


def transaction_id(res: SendResult) -> str:
    """What EndTransaction needs to find the half message again: broker, queue, queue offset and the
    offset message id (which holds the CommitLog offset)."""
    mq = res.message_queue
    return f"{res.offset_msg_id} {mq.broker_name} {mq.queue_id} {res.queue_offset}"


def parse_transaction_id(text: str, topic: str, msg_id: str) -> SendResult:
    parts = text.split(" ")
    if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
        raise convert.ConvertError(Code.INVALID_TRANSACTION_ID, f"bad transaction id: {text[:80]!r}")
    return SendResult(SendStatus.SEND_OK, msg_id, parts[0], MessageQueue(topic, parts[1], int(parts[2])),
                      int(parts[3]), text)


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """``acl``: when set, every call must carry the credentials of an account of that ACL, allowed what
    the call touches (UNAUTHORIZED / FORBIDDEN otherwise). ``credentials``: the identity the endpoint
    signs its own requests to the NameServer and brokers with (RocketMQ's proxy in cluster mode: one
    inner identity, tools.yml's, not each client's account)."""

    def __init__(self, namesrv_addr: str, config: ProxyConfig, acl: PlainAccessValidator | None = None,
                 credentials: SessionCredentials | None = None, tls: TlsOption = None) -> None:
        self.namesrv_addr = namesrv_addr
        self.config = config
        self.acl = acl
        self.credentials = credentials
        self.tls = tls  # of the endpoint's own remoting connections (tls.enable and tls.client.*)
        # grpcio's context.peer() -> the client's: the permissive port's splice sets it (proxy/permissive.py)
        self.peer_of: Callable[[str], str] = _same_peer
        # topic -> the outgoing queues of the Telemetry streams of producers publishing it
        self._publishers: dict[str, list[asyncio.Queue[sv.TelemetryCommand]]] = {}
        self._relayed = 0
        self._heartbeat_to: frozenset[str] = frozenset()  # brokers the producer is registered with
        self._fifo_groups: dict[str, tuple[bool, float]] = {}  # group -> (consumeMessageOrderly, read at)
        self._topic_types: dict[str, tuple[TopicMessageType, float]] = {}  # topic -> (message.type, read at)
        self.producer = TransactionProducer(PROXY_PRODUCER_GROUP, _RelayCheck(self), namesrv_addr, tls=tls,
                                            max_message_size=config.max_message_size, credentials=credentials)
        self._consumers: dict[str, PopConsumer] = {}
        self._consumer_lock = asyncio.Lock()
        self.lite = LiteSubscriptions()
        self._lite_rounds = 0

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        for c in self._consumers.values():
            await c.shutdown()
        await self.producer.shutdown()

    async def _consumer(self, group: str) -> PopConsumer:
        c = self._consumers.get(group)
        if c is None:
            async with self._consumer_lock:
                c = self._consumers.get(group)
                if c is None:
                    c = PopConsumer(group, self.namesrv_addr, credentials=self.credentials, tls=self.tls)
                    await c.start()
                    self._consumers[group] = c
        return c

    def refusal(self, context: grpc.aio.ServicerContext, needed: dict[str, int]) -> pb.Status | None:
        """Why the ACL refuses this call (None: it passes, or there is no ACL). An unknown account or a
        bad signature is UNAUTHORIZED, a known account lacking the permission FORBIDDEN (RocketMQ's
        proxy: authentication, then authorization)."""
        if self.acl is None:
            return None
        md = auth.metadata_dict(context.invocation_metadata())
        parsed = auth.parse_authorization(md.get(auth.AUTHORIZATION, ""))
        date_time = md.get(auth.DATE_TIME)
        result = self.acl.check_signed(
            auth.peer_host(self.peer_of(context.peer() or "")), parsed.access_key if parsed else None,
            lambda account: parsed is not None and auth.verify(parsed, account.secret_key, date_time), needed)
        if result is None:
            return None
        authenticated, why = result
        return status(Code.FORBIDDEN if authenticated else Code.UNAUTHORIZED, why)

    # route, heartbeat, settings ---------------------------------------------------------------------
    async def QueryRoute(self, request: sv.QueryRouteRequest, context: grpc.aio.ServicerContext
                         ) -> sv.QueryRouteResponse:
        topic = request.topic.name
        if (refused := self.refusal(context, auth.route_needs(topic))) is not None:
            return sv.QueryRouteResponse(status=refused)
        try:
            validators.check_topic(topic)
            route = await self.producer.instance.update_route(topic)
        except Exception as e:
            return sv.QueryRouteResponse(status=_error_status(e))
        if route is None or not route.queue_datas:
            return sv.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic[{topic}] not exist"))
        accepted = convert.accept_message_types(await self.topic_type(topic, route.queue_datas))
        out = sv.QueryRouteResponse(status=status())
        for qd in route.queue_datas:
            perm, reads, writes = int(qd.get("perm", 6)), int(qd["readQueueNums"]), int(qd["writeQueueNums"])
            broker = pb.Broker(name=qd["brokerName"], id=0, endpoints=request.endpoints)
            for i in range(max(reads, writes)):
                readable, writable = i < reads and bool(perm & 4), i < writes and bool(perm & 2)
                permission = (pb.Permission.READ_WRITE if readable and writable else pb.Permission.READ if readable
                              else pb.Permission.WRITE if writable else pb.Permission.NONE)
                out.message_queues.add(topic=request.topic, id=i, permission=permission, broker=broker,
                                       accept_message_types=accepted)
        return out

    async def topic_type(self, topic: str, queue_datas: list[dict[str, Any]]) -> TopicMessageType:
        """The topic's message.type, as RocketMQ's proxy reads it (ClusterMetadataService: GET_TOPIC_CONFIG
        from one broker of the route; cached TOPIC_CONFIG_TTL_S). UNSPECIFIED when no broker answers with
        the topic's config (RocketMQ's answer too; not cached)."""
        cached = self._cached_topic_type(topic)
        if cached is not None:
            return cached
        instance = self.producer.instance
        for qd in queue_datas:
            addr = instance.master_addr(qd["brokerName"])
            if addr is None:
                continue
            try:
                resp = await instance.invoke_ok(addr, RequestCode.GET_TOPIC_CONFIG, TopicRequestHeader(topic=topic))
                config = fastjson.loads(resp.body_bytes()).get("topicConfig") or {}
            except Exception as e:
                log.warning("the config of topic %s could not be read from %s: %s", topic, qd["brokerName"], e)
                continue
            kind = topic_message_type(config.get("attributes"))
            if len(self._topic_types) >= TOPIC_TYPES_MAX:  # a client naming ever new topics gains nothing
                self._topic_types.clear()
            self._topic_types[topic] = (kind, time.monotonic())
            return kind
        return TopicMessageType.UNSPECIFIED

    def _cached_topic_type(self, topic: str) -> TopicMessageType | None:
        cached = self._topic_types.get(topic)
        return cached[0] if cached is not None and time.monotonic() - cached[1] < TOPIC_CONFIG_TTL_S else None

    async def Heartbeat(self, request: sv.HeartbeatRequest, context: grpc.aio.ServicerContext) -> sv.HeartbeatResponse:
        refused = self.refusal(context, auth.consume_needs("", request.group.name))
        if refused is None and request.client_type in LITE_CLIENT_TYPES:
            # Heartbeats (every 10 s) name the client type too: after a restart of the endpoint a lite
            # client is known as one before its next Settings.
            self.lite.seen(_client_id(context))
        return sv.HeartbeatResponse(status=refused or status())

    async def NotifyClientTermination(self, request: sv.NotifyClientTerminationRequest,
                                      context: grpc.aio.ServicerContext) -> sv.NotifyClientTerminationResponse:
        # signed as any call of the group (RocketMQ's proxy checks the group): else anyone naming a
        # client id would drop that client's lite subscriptions
        if (refused := self.refusal(context, auth.consume_needs("", request.group.name))) is not None:
            return sv.NotifyClientTerminationResponse(status=refused)
        self.lite.drop_client(_client_id(context))
        return sv.NotifyClientTerminationResponse(status=status())

    async def is_fifo(self, group: str) -> bool:
        """Whether ``group`` is a FIFO group (its consumeMessageOrderly, as RocketMQ's proxy reads it from
        the group's config on the brokers; cached GROUP_CONFIG_TTL_S). A group no broker knows is not."""
        cached = self._fifo_groups.get(group)
        now = time.monotonic()
        if cached is not None and now - cached[1] < GROUP_CONFIG_TTL_S:
            return cached[0]
        instance = self.producer.instance
        fifo = False
        for name in list(instance.broker_addrs):
            addr = instance.master_addr(name)
            if addr is None:
                continue
            try:
                resp = await instance.invoke_ok(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                table = fastjson.loads(resp.body_bytes()).get("subscriptionGroupTable") or {}
            except Exception as e:
                log.warning("the subscription groups of %s could not be read: %s", name, e)
                continue
            if bool((table.get(group) or {}).get("consumeMessageOrderly", False)):
                fifo = True
                break
        self._fifo_groups[group] = (fifo, now)
        return fifo

    async def is_lite_topic(self, topic: str) -> bool:
        """Whether ``topic``'s ``message.type`` is LITE (``topic_type``, from the topic's route; unknown or
        unreadable: False)."""
        kind = self._cached_topic_type(topic)
        if kind is None:
            route = await self.producer.instance.update_route(topic)
            kind = await self.topic_type(topic, route.queue_datas if route is not None else [])
        return kind == TopicMessageType.LITE

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
            if not client.subscription.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.FromMilliseconds(self.config.long_polling_timeout_ms)
        out.metric.on = False
        return out

    async def Telemetry(self, request_iterator: AsyncIterator[sv.TelemetryCommand],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[sv.TelemetryCommand]:
        """Answers each Settings with the server's; a producer's stream also carries the transaction
        checks of the topics it publishes (relay_check) for as long as it is open."""
        if (refused := self.refusal(context, {})) is not None:
            yield sv.TelemetryCommand(status=refused)
            return
        out: asyncio.Queue[sv.TelemetryCommand | None] = asyncio.Queue()
        topics: list[str] = []

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.HasField("settings"):
                        if cmd.settings.client_type in LITE_CLIENT_TYPES:
                            self.lite.seen(_client_id(context))
                        if cmd.settings.client_type == pb.ClientType.PRODUCER:
                            self._unpublish(out, topics)
                            topics[:] = [t.name for t in cmd.settings.publishing.topics]
                            for t in topics:
                                self._publishers.setdefault(t, []).append(out)
                        fifo = False
                        if cmd.settings.client_type in (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER):
                            fifo = await self.is_fifo(cmd.settings.subscription.group.name)
                        out.put_nowait(sv.TelemetryCommand(status=status(), settings=self.settings(cmd.settings, fifo)))
                    # thread stack traces and verify-message results answer commands this proxy never sends
            finally:
                out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (cmd := await out.get()) is not None:
                yield cmd
        finally:
            self._unpublish(out, topics)
            reader.cancel()

    def _unpublish(self, out: asyncio.Queue[Any], topics: list[str]) -> None:
        for t in topics:
            queues = self._publishers.get(t, [])
            if out in queues:
                queues.remove(out)
            if not queues:
                self._publishers.pop(t, None)

    def relay_check(self, msg: MessageExt) -> bool:
        """Hand the broker's check of a half message to a producer publishing its topic (round robin);
        False when none is connected (the broker checks again later, up to its check limit)."""
        queues = self._publishers.get(msg.topic)
        if not queues:
            log.info("no 5.x producer of %s connected to answer a transaction check", msg.topic)
            return False
        broker = self._broker_of(msg)
        if broker is None:
            return False
        self._relayed += 1
        mq = MessageQueue(msg.topic, broker, msg.queue_id)
        tid = transaction_id(SendResult(SendStatus.SEND_OK, msg.msg_id, msg.offset_msg_id, mq, msg.queue_offset))
        command = sv.TelemetryCommand(recover_orphaned_transaction_command=sv.RecoverOrphanedTransactionCommand(
            message=convert.to_grpc(msg, msg.topic), transaction_id=tid))
        queues[self._relayed % len(queues)].put_nowait(command)
        return True

    def _broker_of(self, msg: MessageExt) -> str | None:
        """The broker that stored ``msg``: the one whose master address is its store host."""
        if msg.broker_name:
            return msg.broker_name
        host, port = msg.store_host
        for name in self.producer.instance.broker_addrs:
            addr = self.producer.instance.master_addr(name)
            if addr is not None and addr.rsplit(":", 1) == [host, str(port)]:
                return name
        log.warning("a transaction check from an unknown broker %s:%s", host, port)
        return None

    # send -------------------------------------------------------------------------------------------
    async def SendMessage(self, request: sv.SendMessageRequest, context: grpc.aio.ServicerContext
                          ) -> sv.SendMessageResponse:
        if not request.messages:
            return sv.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        needed = {m.topic.name: PUB for m in request.messages}
        if (refused := self.refusal(context, needed)) is not None:
            return sv.SendMessageResponse(status=refused)
        entries = [await self._send_one(m) for m in request.messages]
        if len(entries) == 1:
            return sv.SendMessageResponse(status=entries[0].status, entries=entries)
        ok = all(e.status.code == Code.OK for e in entries)
        return sv.SendMessageResponse(status=status() if ok else status(Code.MULTIPLE_RESULTS, "multiple results"),
                                      entries=entries)

    async def _send_one(self, m: pb.Message) -> sv.SendResultEntry:
        try:
            msg = convert.to_remoting(m, self.config.max_message_size)
            kind = m.system_properties.message_type
            transactional = kind == pb.MessageType.TRANSACTION
            if transactional:
                if mc.SHARDING_KEY in msg.properties or mc.TIMER_DELIVER_MS in msg.properties:
                    raise convert.ConvertError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                               "a transactional message has no message group nor delivery time")
                msg.properties[mc.TRAN_MSG] = "true"
                msg.properties[mc.PGROUP] = PROXY_PRODUCER_GROUP
                await self._register_producer()
            if self.config.enable_topic_message_type_check:
                await self._check_type(msg)
            group = msg.properties.get(mc.SHARDING_KEY)
            if group is not None:  # FIFO: one message group, one queue (RocketMQ's proxy hashes the group)
                res = await self.producer.send(msg, selector=select_by_hash, arg=group)
            else:
                res = await self.producer.send(msg)
        except Exception as e:
            return sv.SendResultEntry(status=_error_status(e))
        if res.status != SendStatus.SEND_OK:
            # stored, but not flushed or replicated as the broker was asked to: RocketMQ's proxy says so
            code = Code.MASTER_PERSISTENCE_TIMEOUT if res.status == SendStatus.FLUSH_DISK_TIMEOUT else Code.HA_NOT_AVAILABLE
            return sv.SendResultEntry(status=status(code, res.status.value), message_id=res.msg_id)
        return sv.SendResultEntry(status=status(), message_id=res.msg_id, offset=res.queue_offset,
                                  transaction_id=transaction_id(res) if transactional else "",
                                  recall_handle=res.recall_handle or "")

    async def _check_type(self, msg: Message) -> None:
        """RocketMQ's proxy with enableTopicMessageTypeCheck (ProducerProcessor): the message's type against
        its topic's message.type, before the send (retry and dead-letter topics unchecked). A topic the
        NameServer does not route is left to the send (TOPIC_NOT_FOUND)."""
        if not needs_type_check(msg.topic, msg.properties):
            return
        topic_type = self._cached_topic_type(msg.topic)
        if topic_type is None:
            route = await self.producer.instance.update_route(msg.topic)
            if route is None or not route.queue_datas:
                return
            topic_type = await self.topic_type(msg.topic, route.queue_datas)
        remark = check_message_type(msg.topic, topic_type, message_type_of(msg.properties))
        if remark is not None:
            raise convert.ConvertError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, remark)

    async def RecallMessage(self, request: sv.RecallMessageRequest, context: grpc.aio.ServicerContext
                            ) -> sv.RecallMessageResponse:
        """RECALL_MESSAGE with the handle a delay message's send answered (docs/message-types.md): the
        broker decides (recallMessageEnable, the topic's type, already delivered ...)."""
        topic = request.topic.name
        if (refused := self.refusal(context, auth.topic_needs(topic))) is not None:
            return sv.RecallMessageResponse(status=refused)
        try:
            validators.check_topic(topic)
            msg_id = await self.producer.recall(topic, request.recall_handle)
        except Exception as e:
            return sv.RecallMessageResponse(status=_error_status(e))
        return sv.RecallMessageResponse(status=status(), message_id=msg_id)

    async def _register_producer(self) -> None:
        """The broker checks a half message by asking a producer of its group: the endpoint's producer
        must be registered (HEART_BEAT) with every broker it may send half messages to, before the first
        periodic heartbeat (30 s) would do it."""
        instance = self.producer.instance
        addrs = frozenset(instance.all_broker_addrs())
        if not addrs <= self._heartbeat_to:
            await instance.send_heartbeat()
            self._heartbeat_to |= addrs

    async def EndTransaction(self, request: sv.EndTransactionRequest, context: grpc.aio.ServicerContext
                             ) -> sv.EndTransactionResponse:
        if (refused := self.refusal(context, auth.topic_needs(request.topic.name))) is not None:
            return sv.EndTransactionResponse(status=refused)
        try:
            res = parse_transaction_id(request.transaction_id, request.topic.name, request.message_id)
            if request.resolution == pb.TransactionResolution.COMMIT:
                state = TransactionState.COMMIT
            elif request.resolution == pb.TransactionResolution.ROLLBACK:
                state = TransactionState.ROLLBACK
            else:
                return sv.EndTransactionResponse(status=status(Code.BAD_REQUEST, "no transaction resolution"))
            await self.producer.end_transaction(res, state)
        except Exception as e:
            return sv.EndTransactionResponse(status=_error_status(e))
        return sv.EndTransactionResponse(status=status())

    # receive ----------------------------------------------------------------------------------------
    async def QueryAssignment(self, request: sv.QueryAssignmentRequest, context: grpc.aio.ServicerContext
                              ) -> sv.QueryAssignmentResponse:
        """Pop needs no queue balancing: each broker with readable queues is one assignment (queue id -1)."""
        topic = request.topic.name
        if (refused := self.refusal(context, auth.consume_needs(topic, request.group.name))) is not None:
            return sv.QueryAssignmentResponse(status=refused)
        try:
            route = await self.producer.instance.update_route(topic)
        except Exception as e:
            return sv.QueryAssignmentResponse(status=_error_status(e))
        if route is None or not route.queue_datas:
            return sv.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic[{topic}] not exist"))
        out = sv.QueryAssignmentResponse(status=status())
        for qd in route.queue_datas:
            if int(qd.get("perm", 6)) & 4 and int(qd["readQueueNums"]) > 0:
                broker = pb.Broker(name=qd["brokerName"], id=0, endpoints=request.endpoints)
                out.assignments.add(message_queue=pb.MessageQueue(  # no accept types: RocketMQ's has none
                    topic=request.topic, id=-1, permission=pb.Permission.READ_WRITE, broker=broker))
        return out

    async def ReceiveMessage(self, request: sv.ReceiveMessageRequest, context: grpc.aio.ServicerContext
                             ) -> AsyncIterator[sv.ReceiveMessageResponse]:
        topic = request.message_queue.topic.name
        if (refused := self.refusal(context, auth.consume_needs(topic, request.group.name))) is not None:
            yield sv.ReceiveMessageResponse(status=refused)
            return
        invisible = _ms(request.invisible_duration) if request.HasField("invisible_duration") else DEFAULT_INVISIBLE_MS
        poll = _ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
        remaining = context.time_remaining()
        if remaining is not None:  # the answer must reach the client before its deadline
            poll = max(0, min(poll, int((remaining - RECEIVE_MARGIN_S) * 1000)))
        fe = request.filter_expression
        client_id = _client_id(context)
        try:
            if invisible <= 0:
                raise convert.ConvertError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is illegal")
            consumer = await self._consumer(request.group.name)
            # A lite client, or any receive from a LITE topic: never a plain pop of the parent's queues, which
            # hold every lite topic's messages (a lite client not known as one yet, after a restart, too).
            if client_id and (self.lite.is_lite_client(client_id) or self.lite.get(request.group.name, client_id)
                              or await self.is_lite_topic(topic)):
                msgs = await self._receive_lite(
                    consumer, self.lite.watch(request.group.name, client_id, topic), topic,
                    max(1, min(request.batch_size or MAX_POP_NUMS, MAX_POP_NUMS)), invisible / 1000.0, poll / 1000.0)
                async for out in self._answer_received(msgs, topic):
                    yield out
                return
            # FIFO group: orderly pop, a queue (hence a message group) lent until its messages are acked
            fifo = await self.is_fifo(request.group.name)
            msgs = await consumer.receive(
                topic, max(1, min(request.batch_size or MAX_POP_NUMS, MAX_POP_NUMS)), invisible / 1000.0,
                expression=fe.expression or "*", expression_type="SQL92" if fe.type == pb.FilterType.SQL else "TAG",
                block_timeout=poll / 1000.0, order=fifo)
        except Exception as e:
            yield sv.ReceiveMessageResponse(status=_error_status(e))
            return
        async for out in self._answer_received(msgs, topic):
            yield out

    async def _answer_received(self, msgs: list[MessageExt], topic: str) -> AsyncIterator[sv.ReceiveMessageResponse]:
        if not msgs:
            yield sv.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield sv.ReceiveMessageResponse(status=status())
        now = time.time()
        yield sv.ReceiveMessageResponse(delivery_timestamp={"seconds": int(now), "nanos": int(now % 1 * 1e9)})
        for m in msgs:
            # The handle is the pop's extraInfo plus the CommitLog offset (as RocketMQ's ReceiptHandle ends
            # with it): the broker reads the first eight fields, a dead-letter forward the last.
            handle = f"{m.properties[POP_CK]} {m.commit_log_offset}"
            yield sv.ReceiveMessageResponse(message=convert.to_grpc(m, topic, handle))

    async def _receive_lite(self, consumer: PopConsumer, sub: LiteSubscription, topic: str, batch: int,
                            invisible_s: float, poll_s: float) -> list[MessageExt]:
        """A lite consumer's receive: pops the LMQs of its subscribed lite topics (one after another, the
        first one turning each time) up to ``batch`` messages. When none has any, waits up to ``poll_s``
        for any of them to get one (NOTIFICATION on each) or for the subscription to change."""
        if sub.topic != topic:
            raise LiteError(Code.BAD_REQUEST, f"the client is bound to topic {sub.topic}, not {topic}")
        deadline = time.monotonic() + poll_s
        while True:
            lites = sorted(sub.lite_topics)
            changed = sub.changed
            got: list[MessageExt] = []
            if lites:
                self._lite_rounds += 1
                start = self._lite_rounds % len(lites)
                for lite in lites[start:] + lites[:start]:
                    got.extend(await consumer.receive(nm.lite_queue(topic, lite), batch - len(got), invisible_s,
                                                      route_topic=topic))
                    if len(got) >= batch:
                        break
            left = deadline - time.monotonic()
            if got or left <= 0:
                return got
            waits = [asyncio.ensure_future(consumer.has_message(nm.lite_queue(topic, lite), left, route_topic=topic))
                     for lite in lites]
            waits.append(asyncio.ensure_future(changed.wait()))
            try:
                done, _ = await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            for w in done:
                if not w.cancelled() and (e := w.exception()) is not None:
                    raise e

    @staticmethod
    def _queue_of(topic: str, lite_topic: str) -> str:
        """The topic an ack or change of a received message names: a lite topic's is its LMQ."""
        if not lite_topic:
            return topic
        try:
            return nm.lite_queue(topic, lite_topic)
        except nm.NameError_ as e:
            raise convert.ConvertError(Code.ILLEGAL_LITE_TOPIC, str(e)) from None

    async def SyncLiteSubscription(self, request: sv.SyncLiteSubscriptionRequest, context: grpc.aio.ServicerContext
                                   ) -> sv.SyncLiteSubscriptionResponse:
        """The set of lite topics a lite consumer receives (proxy/lite.py), kept by the endpoint per group
        and client. The parent topic must exist."""
        topic, group = request.topic.name, request.group.name
        if (refused := self.refusal(context, auth.consume_needs(topic, group))) is not None:
            return sv.SyncLiteSubscriptionResponse(status=refused)
        try:
            validators.check_topic(topic)
            validators.check_group(group)
            route = await self.producer.instance.update_route(topic)
            if route is None or not route.queue_datas:
                return sv.SyncLiteSubscriptionResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic[{topic}] not exist"))
            if not await self.is_lite_topic(topic):
                return sv.SyncLiteSubscriptionResponse(status=status(
                    Code.BAD_REQUEST, f"topic[{topic}] is not a lite topic (message.type=LITE)"))
            self.lite.sync(group, _client_id(context), topic, request.action, list(request.lite_topic_set))
        except LiteError as e:
            return sv.SyncLiteSubscriptionResponse(status=status(e.code, str(e)))
        except Exception as e:
            return sv.SyncLiteSubscriptionResponse(status=_error_status(e))
        return sv.SyncLiteSubscriptionResponse(status=status())

    async def AckMessage(self, request: sv.AckMessageRequest, context: grpc.aio.ServicerContext
                         ) -> sv.AckMessageResponse:
        out = sv.AckMessageResponse()
        if (refused := self.refusal(context, auth.consume_needs(request.topic.name, request.group.name))) is not None:
            out.status.CopyFrom(refused)
            return out
        try:
            consumer = await self._consumer(request.group.name)
        except Exception as e:
            out.status.CopyFrom(_error_status(e))
            return out
        for entry in request.entries:
            try:
                queue = self._queue_of(request.topic.name, entry.lite_topic)
                await consumer.ack(convert.handle_message(queue, entry.receipt_handle))
                st = status()
            except MQBrokerError as e:
                st = (status(Code.INVALID_RECEIPT_HANDLE, e.remark or "") if e.code in
                      (ResponseCode.NO_MESSAGE, ResponseCode.INVALID_PARAMETER) else _error_status(e))
            except Exception as e:
                st = _error_status(e)
            out.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)
        codes = {e.status.code for e in out.entries}
        if len(out.entries) == 1:
            out.status.CopyFrom(out.entries[0].status)
        else:
            out.status.CopyFrom(status() if codes <= {Code.OK} else status(Code.MULTIPLE_RESULTS, "multiple results"))
        return out

    async def ChangeInvisibleDuration(self, request: sv.ChangeInvisibleDurationRequest,
                                      context: grpc.aio.ServicerContext) -> sv.ChangeInvisibleDurationResponse:
        if (refused := self.refusal(context, auth.consume_needs(request.topic.name, request.group.name))) is not None:
            return sv.ChangeInvisibleDurationResponse(status=refused)
        invisible = _ms(request.invisible_duration)
        try:
            if invisible <= 0:
                raise convert.ConvertError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is illegal")
            queue = self._queue_of(request.topic.name, request.lite_topic)
            msg = convert.handle_message(queue, request.receipt_handle)
            cl_offset = request.receipt_handle.rsplit(" ", 1)[-1]
            consumer = await self._consumer(request.group.name)
            new = await consumer.change_invisible(msg, invisible / 1000.0)
        except MQBrokerError as e:
            code = Code.INVALID_RECEIPT_HANDLE if e.code in (ResponseCode.NO_MESSAGE, ResponseCode.INVALID_PARAMETER) \
                else convert.grpc_code(e.code, e.remark or "")
            return sv.ChangeInvisibleDurationResponse(status=status(code, e.remark or str(e)))
        except Exception as e:
            return sv.ChangeInvisibleDurationResponse(status=_error_status(e))
        return sv.ChangeInvisibleDurationResponse(status=status(), receipt_handle=f"{new} {cl_offset}")

    async def ForwardMessageToDeadLetterQueue(self, request: sv.ForwardMessageToDeadLetterQueueRequest,
                                              context: grpc.aio.ServicerContext
                                              ) -> sv.ForwardMessageToDeadLetterQueueResponse:
        """CONSUMER_SEND_MSG_BACK with delay level -1 (straight to %DLQ%group), then the ack of the
        received copy, as RocketMQ's proxy does."""
        if (refused := self.refusal(context, auth.consume_needs(request.topic.name, request.group.name))) is not None:
            return sv.ForwardMessageToDeadLetterQueueResponse(status=refused)
        try:
            msg = convert.handle_message(self._queue_of(request.topic.name, request.lite_topic), request.receipt_handle)
            cl_offset = request.receipt_handle.rsplit(" ", 1)[-1]
            if not cl_offset.isdigit() or len(request.receipt_handle.split(" ")) < 9:
                raise convert.ConvertError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle has no CommitLog offset")
            consumer = await self._consumer(request.group.name)
            instance = self.producer.instance
            addr = instance.master_addr(msg.broker_name)
            if addr is None:
                await instance.update_route(request.topic.name)
                addr = instance.master_addr(msg.broker_name)
            if addr is None:
                raise convert.ConvertError(Code.NOT_FOUND, f"broker {msg.broker_name} not found")
            await instance.invoke_ok(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ConsumerSendMsgBackRequestHeader(
                offset=int(cl_offset), group=request.group.name, delay_level=-1, origin_msg_id=request.message_id,
                origin_topic=request.topic.name, unit_mode=False, max_reconsume_times=request.max_delivery_attempts))
            await consumer.ack(msg)
        except Exception as e:
            return sv.ForwardMessageToDeadLetterQueueResponse(status=_error_status(e))
        return sv.ForwardMessageToDeadLetterQueueResponse(status=status())
