"""The topic's message type on the gRPC path (enableTopicMessageTypeCheck), RecallMessage and transaction
checks relayed over Telemetry, with the official 5.x client against a standalone that checks types,
accepts recalls and checks unresolved transactions within a second."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from rocketmq import TransactionChecker
from rocketmq.grpc_protocol import Code, TransactionResolution, definition_pb2, service_pb2
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

import grpc
from tests.client.helpers import uniq
from tests.compat.harness import create_topic
from tests.grpc.conftest import Clients, run_off_main, typed_topic
from tests.grpc.test_messaging import message, receive_all
from tests.support import ModuleTmp, Standalone
from tidalmq.client import Message, Producer, SendStatus

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def checked(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    settings = {"enableTopicMessageTypeCheck": "true", "recallMessageEnable": "true",
                "transactionTimeOut": "300", "transactionCheckInterval": "200"}
    with Standalone(module_tmp("grpc-types") / "data", settings) as s:
        yield s


@pytest.fixture
def clients(checked: Standalone) -> Iterator[Clients]:
    cs = Clients(checked.grpc_endpoint)
    try:
        yield cs
    finally:
        cs.close()


# What the 5.1.2 client raises when a message's type is not among those its route's queues accept.
LOCAL_REFUSAL = "current message type not match with queue accept message types"


def test_wrong_type_for_the_topic_is_refused(checked: Standalone, clients: Clients) -> None:
    """A NORMAL message to a FIFO topic: the endpoint answers MESSAGE_PROPERTY_CONFLICT_WITH_TYPE; the
    official client, told to check (enableTopicMessageTypeCheck), refuses it itself from the route, as
    with RocketMQ's proxy; with a message group: sent."""
    topic = typed_topic(checked, "FIFO")
    m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=b"x")
    m.system_properties.message_type = definition_pb2.MessageType.NORMAL
    resp = raw_send(checked, m)
    assert resp.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "TopicMessageType validate failed" in resp.status.message
    p = clients.producer(topic)
    with pytest.raises(Exception, match=LOCAL_REFUSAL):
        p.send(message(topic, b"normal"))
    fifo = message(topic, b"fifo")
    fifo.message_group = "g1"
    assert p.send(fifo).message_id


def query_route(broker: Standalone, topic: str) -> service_pb2.QueryRouteResponse:
    host, port = broker.grpc_endpoint.rsplit(":", 1)
    req = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
    req.endpoints.addresses.add(host=host, port=int(port))
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        return MessagingServiceStub(channel).QueryRoute(req, timeout=10)


def test_route_accepts_the_topics_message_type(checked: Standalone, clients: Clients) -> None:
    """QueryRoute: every queue accepts the topic's message.type only (a topic without one: NORMAL), as
    RocketMQ's RouteActivity says; so the official client refuses a FIFO or a priority message to a NORMAL
    topic before sending it, and a delay message to a FIFO topic (also with send_async)."""
    MT = definition_pb2.MessageType
    want = {"NORMAL": MT.NORMAL, "FIFO": MT.FIFO, "DELAY": MT.DELAY, "TRANSACTION": MT.TRANSACTION,
            "PRIORITY": MT.PRIORITY}
    for kind, accepted in want.items():
        topic = typed_topic(checked, kind, queues=2)
        resp = query_route(checked, topic)
        assert resp.status.code == Code.OK, resp.status
        assert [list(q.accept_message_types) for q in resp.message_queues] == [[accepted], [accepted]], kind
    untyped = uniq("g5untyped")
    create_topic(checked.namesrv_addr, untyped, queues=1)
    assert [list(q.accept_message_types) for q in query_route(checked, untyped).message_queues] == [[MT.NORMAL]]

    normal = typed_topic(checked, "NORMAL")
    p = clients.producer(normal)
    fifo = message(normal, b"fifo")
    fifo.message_group = "g1"
    with pytest.raises(Exception, match=LOCAL_REFUSAL):
        p.send(fifo)
    prio = message(normal, b"prio")
    prio.priority = 1
    with pytest.raises(Exception, match=LOCAL_REFUSAL):
        p.send(prio)
    assert p.send(message(normal, b"normal")).message_id
    fifo_topic = typed_topic(checked, "FIFO")
    q = clients.producer(fifo_topic)
    delay = message(fifo_topic, b"delay")
    delay.delivery_timestamp = int(time.time()) + 60
    with pytest.raises(Exception, match=LOCAL_REFUSAL):
        q.send_async(delay)


def raw_send(broker: Standalone, m: definition_pb2.Message) -> service_pb2.SendMessageResponse:
    """One SendMessage of ``m`` with the generated stub: what the endpoint answers, no client checks."""
    m.system_properties.message_id = m.system_properties.message_id or "0123456789ABCDEF0123456789ABCDEF"
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        return MessagingServiceStub(channel).SendMessage(service_pb2.SendMessageRequest(messages=[m]), timeout=10)


def test_priority_messages_are_received_highest_priority_first(checked: Standalone, clients: Clients) -> None:
    """A PRIORITY topic of four queues: messages sent with mixed priorities while no consumer runs are
    received highest priority first (a priority is the queue min(priority, 3), so 7 ranks with 3), in
    send order within a priority, each with the priority it was sent with."""
    topic = typed_topic(checked, "PRIORITY", queues=4)
    p = clients.producer(topic)
    sent = [(0, b"p0-a"), (3, b"p3-a"), (1, b"p1-a"), (7, b"p7"), (2, b"p2"), (0, b"p0-b"), (3, b"p3-b"), (1, b"p1-b")]
    for priority, body in sent:
        m = message(topic, body)
        m.priority = priority
        assert p.send(m).message_id
    c = clients.simple_consumer(uniq("g5prio"), topic, await_s=1)
    got = receive_all(c, len(sent))
    assert [m.body for m in got] == [b"p3-a", b"p7", b"p3-b", b"p2", b"p1-a", b"p1-b", b"p0-a", b"p0-b"]
    assert [m.priority for m in got] == [3, 7, 3, 2, 1, 1, 0, 0]
    for m in got:
        c.ack(m)
    assert c.receive(32, 15) == []


def test_priority_to_a_topic_of_another_type_is_refused(checked: Standalone) -> None:
    """A priority message to a NORMAL or FIFO topic: MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as any mismatch."""
    for kind in ("NORMAL", "FIFO"):
        topic = typed_topic(checked, kind)
        m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=b"x")
        m.system_properties.message_type = definition_pb2.MessageType.PRIORITY
        m.system_properties.priority = 1
        resp = raw_send(checked, m)
        assert resp.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, resp.status
        assert "actual type is PRIORITY" in resp.status.message


def test_recall_message(checked: Standalone, clients: Clients) -> None:
    """A recalled delay message is never delivered; one due at the same time is; a second recall fails."""
    topic = typed_topic(checked, "DELAY")
    p = clients.producer(topic)
    due = int(time.time()) + 3  # seconds, whatever the 5.1.2 docstring says (test_delivery_timestamp_delays_the_message)
    recalled, control = message(topic, b"recalled"), message(topic, b"control")
    recalled.delivery_timestamp = control.delivery_timestamp = due
    receipt = p.send(recalled)
    p.send(control)
    assert receipt.recall_handle
    assert p.recall_message(topic, receipt.recall_handle) == receipt.message_id
    with pytest.raises(Exception):  # noqa: B017 (the client raises a bare Exception subclass per code)
        p.recall_message(topic, receipt.recall_handle)
    c = clients.simple_consumer(uniq("g5recall"), topic, await_s=1)
    got = receive_all(c, 1, deadline_s=20)
    assert [m.body for m in got] == [b"control"]
    assert c.receive(32, 15) == []  # the recalled one was due with the control: it would be here by now


class ByBody(TransactionChecker):
    """Commits what asks for it, rolls back the rest; remembers what it was asked about."""

    def __init__(self) -> None:
        self.asked: list[bytes] = []

    def check(self, message):  # noqa: ANN001, ANN201
        self.asked.append(message.body)
        return TransactionResolution.COMMIT if message.body == b"commit me" else TransactionResolution.ROLLBACK


def test_orphaned_transactions_are_checked_over_telemetry(checked: Standalone, clients: Clients) -> None:
    """Half messages left unresolved: the broker's check reaches the producer's checker through its
    Telemetry stream; its COMMIT delivers the message, its ROLLBACK drops the other."""
    topic = typed_topic(checked, "TRANSACTION")
    checker = ByBody()
    p = clients.producer(topic, checker=checker)
    kept_id = p.send(message(topic, b"commit me"), p.begin_transaction()).message_id
    p.send(message(topic, b"roll me back"), p.begin_transaction())  # neither is committed nor rolled back here
    c = clients.simple_consumer(uniq("g5check"), topic, await_s=1)
    got = receive_all(c, 1, deadline_s=30)
    assert [(m.message_id, m.body) for m in got] == [(kept_id, b"commit me")]
    deadline = time.monotonic() + 20
    while b"roll me back" not in checker.asked and time.monotonic() < deadline:
        c.receive(32, 15)
    assert set(checker.asked) >= {b"commit me", b"roll me back"}
    assert c.receive(32, 15) == []  # the rolled-back one is never delivered


def test_endpoint_checks_types_by_default_and_remoting_does_not(broker: Standalone) -> None:
    """With no setting, as RocketMQ 5 (ProxyConfig.enableTopicMessageTypeCheck true, the broker never
    checking): a NORMAL message to a FIFO topic is refused on the gRPC endpoint, and producers are told to
    check, while the remoting port (4.x clients) stores it."""
    topic = typed_topic(broker, "FIFO")
    m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=b"x")
    m.system_properties.message_type = definition_pb2.MessageType.NORMAL
    resp = raw_send(broker, m)
    assert resp.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, resp.status
    settings = definition_pb2.Settings(client_type=definition_pb2.ClientType.PRODUCER)
    req = service_pb2.TelemetryCommand(settings=settings)
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        answers = MessagingServiceStub(channel).Telemetry(iter([req]), timeout=10)
        first = next(answers)
    assert first.settings.publishing.validate_message_type

    async def send_remoting() -> SendStatus:
        async with Producer(uniq("p4type"), broker.namesrv_addr) as p:
            return (await p.send(Message(topic, b"4.x normal"))).status

    assert run_off_main(send_remoting()) == SendStatus.SEND_OK
