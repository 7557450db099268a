"""5.x FIFO consumption: a group created with consumeMessageOrderly gets a message group's messages in
order, the next only after the previous is acked (SimpleConsumer), and a PushConsumer is told fifo."""

from __future__ import annotations

import threading

import pytest
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

from tests.compat.harness import uniq
from tests.grpc.conftest import Clients, adopt_client_loop, run_off_main
from tests.grpc.test_messaging import message
from tests.support import Standalone
from tidalmq.client import Admin

pytestmark = pytest.mark.timeout(90)


def fifo_group(broker: Standalone) -> str:
    group = uniq("g5fifo")

    async def go() -> None:
        async with Admin(broker.namesrv_addr) as admin:
            await admin.create_group(group, consume_message_orderly=True)

    run_off_main(go())
    return group


def send_group(clients: Clients, topic: str, bodies: list[bytes]) -> None:
    p = clients.producer(topic)
    for body in bodies:
        m = message(topic, body)
        m.message_group = "order-1"
        p.send(m)


def test_simple_consumer_gets_the_next_only_after_ack(broker: Standalone, clients: Clients, fifo_topic: str) -> None:
    topic = fifo_topic
    send_group(clients, topic, [b"1", b"2", b"3"])
    c = clients.simple_consumer(fifo_group(broker), topic, await_s=1)
    got = []
    for _ in range(3):
        (m,) = c.receive(1, 15)
        assert c.receive(1, 15) == []  # its successor waits for this one's ack
        got.append(m.body)
        c.ack(m)
    assert got == [b"1", b"2", b"3"]


def test_push_consumer_on_a_fifo_group_consumes_in_order(broker: Standalone, clients: Clients,
                                                          fifo_topic: str) -> None:
    topic = fifo_topic
    bodies = [str(i).encode() for i in range(8)]
    send_group(clients, topic, bodies)
    seen: list[bytes] = []
    done = threading.Event()

    class Listener(MessageListener):
        def consume(self, msg):  # noqa: ANN001, ANN201
            seen.append(msg.body)
            if len(seen) >= len(bodies):
                done.set()
            return ConsumeResult.SUCCESS

    pc = PushConsumer(clients.config(), fifo_group(broker), Listener(), {topic: FilterExpression()})
    clients.all.append(pc)
    adopt_client_loop()
    pc.startup()
    assert done.wait(30), f"consumed {len(seen)} of {len(bodies)}"
    assert seen == bodies
