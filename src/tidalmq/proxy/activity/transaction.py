"""EndTransaction, and the broker's checks of half messages relayed to a 5.x producer (RocketMQ's proxy
TransactionActivity and its transaction-check relay over the producer's Telemetry stream)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus, TransactionState
from tidalmq.client.transaction_producer import TransactionProducer
from tidalmq.proxy import auth, convert
from tidalmq.proxy.access import AccessCheck
from tidalmq.proxy.channels import TelemetryChannels
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv
from tidalmq.proxy.response import error_status, status

log = logging.getLogger(__name__)
Code = pb.Code


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


class RelayCheck:
    """The broker's checks of half messages sent through the endpoint (their producer group is the
    endpoint's): handed to ``relay`` (TransactionActivity.relay_check, set once it exists). The 5.x
    producer's checker answers with an EndTransaction of its own; the broker gets UNKNOWN from here
    (which changes nothing) meanwhile."""

    def __init__(self) -> None:
        self.relay: Callable[[MessageExt], bool] = lambda msg: False

    def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionState:
        return TransactionState.UNKNOWN  # half messages are sent with plain sends: never called

    async def check_local_transaction(self, msg: MessageExt) -> TransactionState:
        self.relay(msg)
        return TransactionState.UNKNOWN


class ProducerRegistration:
    """The broker checks a half message by asking a producer of its group: the endpoint's producer must
    be registered (HEART_BEAT) with every broker it may send half messages to, before the first periodic
    heartbeat (30 s) would do it."""

    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance
        self._heartbeat_to: frozenset[str] = frozenset()  # brokers the producer is registered with

    async def ensure(self) -> None:
        addrs = frozenset(self.instance.all_broker_addrs())
        if not addrs <= self._heartbeat_to:
            await self.instance.send_heartbeat()
            self._heartbeat_to |= addrs


class TransactionActivity:
    def __init__(self, producer: TransactionProducer, channels: TelemetryChannels, access: AccessCheck) -> None:
        self.producer = producer
        self.channels = channels
        self.access = access

    async def end_transaction(self, request: sv.EndTransactionRequest, context: grpc.aio.ServicerContext
                              ) -> sv.EndTransactionResponse:
        if (refused := self.access.refusal(context, auth.topic_needs(request.topic.name))) is not None:
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
            return sv.EndTransactionResponse(status=error_status(e))
        return sv.EndTransactionResponse(status=status())

    def relay_check(self, msg: MessageExt) -> bool:
        """Hand the broker's check of a half message to a producer publishing its topic (round robin);
        False when none is connected (the broker checks again later, up to its check limit)."""
        if not self.channels.has_publisher(msg.topic):
            log.info("no 5.x producer of %s connected to answer a transaction check", msg.topic)
            return False
        broker = self._broker_of(msg)
        if broker is None:
            return False
        out = self.channels.next_publisher(msg.topic)
        assert out is not None
        mq = MessageQueue(msg.topic, broker, msg.queue_id)
        tid = transaction_id(SendResult(SendStatus.SEND_OK, msg.msg_id, msg.offset_msg_id, mq, msg.queue_offset))
        out.put_nowait(sv.TelemetryCommand(recover_orphaned_transaction_command=sv.RecoverOrphanedTransactionCommand(
            message=convert.to_grpc(msg, msg.topic), transaction_id=tid)))
        return True

    def _broker_of(self, msg: MessageExt) -> str | None:
        """The broker that stored ``msg``: the one whose master address is its store host."""
        if msg.broker_name:
            return msg.broker_name
        host, port = msg.store_host
        instance = self.producer.instance
        for name in instance.broker_addrs:
            addr = instance.master_addr(name)
            if addr is not None and addr.rsplit(":", 1) == [host, str(port)]:
                return name
        log.warning("a transaction check from an unknown broker %s:%s", host, port)
        return None
