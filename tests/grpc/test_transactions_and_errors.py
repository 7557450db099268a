"""Transactions, push consumption, dead letters and bad input through the gRPC endpoint."""

from __future__ import annotations

import threading
import time

import pytest
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer, TransactionChecker
from rocketmq.grpc_protocol import Code, TransactionResolution, definition_pb2, service_pb2
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

import grpc
from tests.compat.harness import uniq
from tests.grpc.conftest import Clients, adopt_client_loop, run_off_main, typed_topic
from tests.grpc.test_messaging import message, receive_all
from tests.support import Standalone

pytestmark = pytest.mark.timeout(60)


class Undecided(TransactionChecker):
    def check(self, message):  # noqa: ANN001, ANN201
        return TransactionResolution.ROLLBACK


def test_transaction_commit_and_rollback(broker: Standalone, clients: Clients) -> None:
    """A committed half message is delivered, a rolled-back one never is."""
    topic = typed_topic(broker, "TRANSACTION")
    p = clients.producer(topic, checker=Undecided())
    kept = p.begin_transaction()
    kept_id = p.send(message(topic, b"commit me"), kept).message_id
    dropped = p.begin_transaction()
    p.send(message(topic, b"roll me back"), dropped)
    c = clients.simple_consumer(uniq("g5group"), topic, await_s=1)
    assert c.receive(32, 15) == []  # half messages are invisible
    kept.commit()
    dropped.rollback()
    got = receive_all(c, 1, deadline_s=10)
    assert [(m.message_id, m.body) for m in got] == [(kept_id, b"commit me")]
    assert c.receive(32, 15) == []


def test_push_consumer_consumes(clients: Clients, topic: str) -> None:
    p = clients.producer(topic)
    ids = {p.send(message(topic, f"push {i}".encode())).message_id for i in range(4)}
    seen: set[str] = set()
    done = threading.Event()

    class Listener(MessageListener):
        def consume(self, msg):  # noqa: ANN001, ANN201
            seen.add(msg.message_id)
            if seen >= ids:
                done.set()
            return ConsumeResult.SUCCESS

    pc = PushConsumer(clients.config(), uniq("g5push"), Listener(), {topic: FilterExpression()})
    clients.all.append(pc)
    adopt_client_loop()
    pc.startup()
    assert done.wait(30), f"consumed {len(seen)} of {len(ids)}"


@pytest.fixture
def stub(broker: Standalone):  # noqa: ANN201
    channel = grpc.insecure_channel(broker.grpc_endpoint)
    try:
        yield MessagingServiceStub(channel)
    finally:
        channel.close()


def test_unknown_topic(clients: Clients, stub: MessagingServiceStub) -> None:
    """A topic the NameServer does not know: TOPIC_NOT_FOUND; the 5.x producer's send fails (its route
    manager turns the status into a plain Exception naming the topic's route)."""
    name = uniq("nosuch")
    resp = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=name)), timeout=10)
    assert resp.status.code == Code.TOPIC_NOT_FOUND
    p = clients.producer()
    with pytest.raises(Exception, match=f"failed to fetch topic:{name} route"):
        p.send(message(name, b"x"))


def _raw_message(topic: str, body: bytes) -> definition_pb2.Message:
    m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=body)
    m.system_properties.message_id = uniq("id")
    m.system_properties.message_type = definition_pb2.MessageType.NORMAL
    m.system_properties.body_encoding = definition_pb2.Encoding.IDENTITY
    return m


def test_oversized_body_and_reserved_property(stub: MessagingServiceStub, topic: str) -> None:
    big = _raw_message(topic, b"x" * (4 * 1024 * 1024 + 1))
    resp = stub.SendMessage(service_pb2.SendMessageRequest(messages=[big]), timeout=10)
    assert resp.status.code == Code.MESSAGE_BODY_TOO_LARGE
    bad = _raw_message(topic, b"x")
    bad.user_properties["UNIQ_KEY"] = "forged"
    resp = stub.SendMessage(service_pb2.SendMessageRequest(messages=[bad]), timeout=10)
    assert resp.status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_bad_receipt_handle(stub: MessagingServiceStub, topic: str) -> None:
    group = definition_pb2.Resource(name=uniq("g5group"))
    t = definition_pb2.Resource(name=topic)
    resp = stub.AckMessage(service_pb2.AckMessageRequest(group=group, topic=t, entries=[
        service_pb2.AckMessageEntry(message_id="x", receipt_handle="not a handle")]), timeout=10)
    assert resp.status.code == Code.INVALID_RECEIPT_HANDLE
    assert resp.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    # well formed, but of an offset the queue never had
    forged = f"0 {int(time.time() * 1000)} 30000 0 0 broker-x 0 999999 0"
    resp = stub.AckMessage(service_pb2.AckMessageRequest(group=group, topic=t, entries=[
        service_pb2.AckMessageEntry(message_id="x", receipt_handle=forged)]), timeout=10)
    assert resp.status.code != Code.OK
    change = stub.ChangeInvisibleDuration(service_pb2.ChangeInvisibleDurationRequest(
        group=group, topic=t, receipt_handle="garbage", message_id="x"), timeout=10)
    assert change.status.code in (Code.INVALID_RECEIPT_HANDLE, Code.ILLEGAL_INVISIBLE_TIME)


def test_forward_to_dead_letter_queue(clients: Clients, stub: MessagingServiceStub, broker: Standalone,
                                      topic: str) -> None:
    """ForwardMessageToDeadLetterQueue moves a received message into %DLQ%group, body and id intact,
    and it is not received again."""

    from tidalmq.client import Admin

    p = clients.producer(topic)
    key = uniq("dlqkey")
    mid = p.send(message(topic, b"poison", tag="bad", keys=(key,))).message_id
    group = uniq("g5dlq")
    c = clients.simple_consumer(group, topic, await_s=1)
    got = receive_all(c, 1)
    assert [m.message_id for m in got] == [mid]
    resp = stub.ForwardMessageToDeadLetterQueue(service_pb2.ForwardMessageToDeadLetterQueueRequest(
        group=definition_pb2.Resource(name=group), topic=definition_pb2.Resource(name=topic),
        receipt_handle=got[0].receipt_handle, message_id=mid, delivery_attempt=1, max_delivery_attempts=16),
        timeout=10)
    assert resp.status.code == Code.OK, resp.status.message

    async def dlq_ids() -> list[str]:
        async with Admin(broker.namesrv_addr) as admin:
            found = await admin.query_messages_by_key(f"%DLQ%{group}", key)
            return [m.msg_id for m in found if m.body == b"poison"]

    deadline = time.monotonic() + 10
    ids: list[str] = []
    while not ids and time.monotonic() < deadline:
        ids = run_off_main(dlq_ids())
    assert mid in ids
    assert c.receive(32, 15) == []
