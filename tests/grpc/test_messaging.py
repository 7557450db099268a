"""Producer and SimpleConsumer of the official 5.x client through TidalMQ's gRPC endpoint."""

from __future__ import annotations

import time

from rocketmq import Message

from tests.compat.harness import uniq
from tests.grpc.conftest import Clients

pytestmark = __import__("pytest").mark.timeout(60)


def message(topic: str, body: bytes, tag: str | None = None, keys: tuple[str, ...] = (), **props: str) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    for k in keys:
        m.keys = k
    for k, v in props.items():
        m.add_property(k, v)
    return m


def receive_all(consumer, want: int, invisible_s: int = 15, deadline_s: float = 20.0) -> list:  # noqa: ANN001
    got: list = []
    deadline = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        got += consumer.receive(32, invisible_s) or []
    return got


def test_sync_send_then_receive_and_ack(clients: Clients, topic: str) -> None:
    """What a 5.x producer sends, a 5.x simple consumer receives with tag, keys, properties and the
    producer's message id; once acked it is not received again."""
    p = clients.producer(topic)
    sent = {}
    for i in range(3):
        receipt = p.send(message(topic, f"hello {i}".encode(), tag="TagA", keys=(f"k{i}",), color="blue"))
        sent[receipt.message_id] = f"hello {i}".encode()
    c = clients.simple_consumer(uniq("g5group"), topic)
    got = receive_all(c, 3)
    assert {m.message_id: m.body for m in got} == sent
    for m in got:
        assert m.tag == "TagA"
        assert m.properties["color"] == "blue"
        assert m.keys == {f"k{m.body.decode()[-1]}"}
        assert m.delivery_attempt == 1
        c.ack(m)
    assert c.receive(32, 15) == []


def test_async_send(clients: Clients, topic: str) -> None:
    p = clients.producer(topic)
    futures = [p.send_async(message(topic, f"async {i}".encode())) for i in range(5)]
    ids = {f.result(timeout=10).message_id for f in futures}
    c = clients.simple_consumer(uniq("g5group"), topic)
    got = receive_all(c, 5)
    assert {m.message_id for m in got} == ids


def test_delivery_timestamp_delays_the_message(clients: Clients, delay_topic: str) -> None:
    """A DELAY message (delivery timestamp) is not received before its time, and is received after,
    carrying its delivery timestamp and the DELAY type (RocketMQ's proxy reads TIMER_DELIVER_MS)."""
    topic = delay_topic
    p = clients.producer(topic)
    due = int(time.time()) + 3
    m = message(topic, b"later")
    m.delivery_timestamp = due
    receipt = p.send(m)
    c = clients.simple_consumer(uniq("g5group"), topic, await_s=1)
    assert c.receive(32, 15) == []  # not yet due
    got = receive_all(c, 1, deadline_s=15)
    assert [x.message_id for x in got] == [receipt.message_id]
    assert time.time() >= due - 0.1  # the timer's precision
    # the 5.1.2 client sends whole seconds and shows the received timestamp in milliseconds
    assert got[0].delivery_timestamp == due * 1000


def test_past_delivery_timestamp_is_received_at_once_with_it(clients: Clients, delay_topic: str) -> None:
    """A delay message whose time has passed is stored at once, and received as a DELAY message with its
    delivery timestamp (RocketMQ leaves its TIMER_DELIVER_MS)."""
    topic = delay_topic
    p = clients.producer(topic)
    past = int(time.time()) - 60
    m = message(topic, b"overdue")
    m.delivery_timestamp = past
    mid = p.send(m).message_id
    c = clients.simple_consumer(uniq("g5group"), topic, await_s=1)
    got = receive_all(c, 1, deadline_s=10)
    assert [(x.message_id, x.delivery_timestamp) for x in got] == [(mid, past * 1000)]
    c.ack(got[0])


def test_redelivered_delay_message_keeps_its_delivery_timestamp(clients: Clients, delay_topic: str) -> None:
    """A delay message not acked in time comes back (through the group's retry topic, delivery attempt 2)
    with the delivery timestamp it was sent with, as RocketMQ's pop revive keeps it."""
    topic = delay_topic
    p = clients.producer(topic)
    due = int(time.time()) + 1
    m = message(topic, b"later, twice")
    m.delivery_timestamp = due
    mid = p.send(m).message_id
    c = clients.simple_consumer(uniq("g5group"), topic, await_s=1)
    first = receive_all(c, 1, invisible_s=1, deadline_s=15)
    assert [(x.message_id, x.delivery_timestamp, x.delivery_attempt) for x in first] == [(mid, due * 1000, 1)]
    again = receive_all(c, 1, invisible_s=30, deadline_s=20)
    assert [(x.message_id, x.delivery_timestamp, x.delivery_attempt) for x in again] == [(mid, due * 1000, 2)]
    c.ack(again[0])


def test_fifo_message_group_keeps_order(clients: Clients, fifo_topic: str) -> None:
    """Messages of one message group go to one queue, in send order, and carry their group."""
    topic = fifo_topic
    p = clients.producer(topic)
    ids = []
    for i in range(6):
        m = message(topic, f"step {i}".encode())
        m.message_group = "order-42"
        ids.append(p.send(m).message_id)
    c = clients.simple_consumer(uniq("g5group"), topic)
    got = receive_all(c, 6)
    assert [m.message_id for m in got] == ids
    assert {m.message_group for m in got} == {"order-42"}


def test_change_invisible_duration_and_redelivery(clients: Clients, topic: str) -> None:
    """An unacked message comes back after its invisible duration with delivery attempt 2; a changed
    invisible duration moves that moment, and the new receipt handle acks it."""
    p = clients.producer(topic)
    mid = p.send(message(topic, b"retry me")).message_id
    c = clients.simple_consumer(uniq("g5group"), topic, await_s=1)
    first = receive_all(c, 1, invisible_s=30)
    assert [m.message_id for m in first] == [mid]
    c.change_invisible_duration(first[0], 2)  # visible again in 2 s instead of 30
    start = time.monotonic()
    again = receive_all(c, 1, invisible_s=30, deadline_s=20)
    assert [m.message_id for m in again] == [mid]
    assert time.monotonic() - start >= 1.0
    assert again[0].delivery_attempt == 2
    c.ack(again[0])
    assert c.receive(32, 2) == []
