"""Interop: what a 5.x client sends over gRPC, a remoting (4.x protocol) consumer reads with tags, keys,
properties and message id intact, and the other way round."""

from __future__ import annotations

import pytest

from tests.client.helpers import wait_until
from tests.compat.harness import uniq
from tests.grpc.conftest import Clients, run_off_main
from tests.grpc.test_messaging import message, receive_all
from tests.support import Standalone
from tidalmq.client import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer

pytestmark = pytest.mark.timeout(60)


def test_5x_send_4x_protocol_consume(clients: Clients, broker: Standalone, topic: str) -> None:
    p = clients.producer(topic)
    sent = {}
    for i in range(3):
        r = p.send(message(topic, f"five {i}".encode(), tag="T5", keys=(f"key-{i}", "shared"), origin="v5"))
        sent[r.message_id] = f"five {i}".encode()

    async def consume() -> list[MessageExt]:
        got: list[MessageExt] = []

        async def on(msgs: list[MessageExt]) -> None:
            got.extend(msgs)

        c = PushConsumer(uniq("g4"), broker.namesrv_addr, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        try:
            await wait_until(lambda: len(got) >= len(sent), 30, "the remoting consumer got everything")
        finally:
            await c.shutdown()
        return got

    got = run_off_main(consume())
    assert {m.msg_id: m.body for m in got} == sent  # the 5.x message id is the UNIQ_KEY
    for m in got:
        assert m.tags == "T5"
        assert sorted(m.keys) == sorted([f"key-{m.body.decode()[-1]}", "shared"])
        assert m.properties["origin"] == "v5"


def test_4x_protocol_send_5x_receive(clients: Clients, broker: Standalone, topic: str) -> None:
    async def send() -> dict[str, bytes]:
        out = {}
        async with Producer(uniq("p4"), broker.namesrv_addr) as p:
            for i in range(3):
                r = await p.send(Message(topic, f"four {i}".encode(), tags="T4", keys=[f"k4-{i}"],
                                         properties={"origin": "v4"}))
                out[r.msg_id] = f"four {i}".encode()
        return out

    sent = run_off_main(send())
    c = clients.simple_consumer(uniq("g5group"), topic)
    got = receive_all(c, 3)
    assert {m.message_id: m.body for m in got} == sent
    for m in got:
        assert m.tag == "T4"
        assert m.keys == {f"k4-{m.body.decode()[-1]}"}
        assert m.properties["origin"] == "v4"
        c.ack(m)
