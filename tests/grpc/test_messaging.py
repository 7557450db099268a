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
