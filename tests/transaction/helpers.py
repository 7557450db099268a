"""Shared pieces of the transaction tests: a recording listener, a collecting consumer, raw requests."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from tests.client.helpers import wait_until
from tidalmq.client import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer, TransactionState
from tidalmq.common import fastjson
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

# Small timings so every path runs in about a second (docs/transactions.md has the defaults).
FAST = {
    "transactionTimeOut": "300",
    "transactionCheckInterval": "100",
    "transactionCheckMax": "3",
    "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
}

COMMIT, ROLLBACK, NOT_TYPE = 8, 12, 0


@dataclass
class Listener:
    """execute_local_transaction answers ``execute`` (or the send's arg); check answers ``check``."""

    execute: TransactionState | None = None
    check: TransactionState = TransactionState.COMMIT
    checks: list[tuple[float, MessageExt]] = field(default_factory=list)

    def execute_local_transaction(self, msg: Any, arg: Any) -> TransactionState:
        return self.execute if self.execute is not None else TransactionState(arg)

    def check_local_transaction(self, msg: MessageExt) -> TransactionState:
        self.checks.append((time.monotonic(), msg))
        return self.check


class Collector:
    def __init__(self) -> None:
        self.msgs: list[MessageExt] = []
        self.at: list[float] = []

    async def __call__(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            self.msgs.append(m)
            self.at.append(time.monotonic())

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.msgs]


async def consumer(ns: str, group: str, topic: str) -> tuple[PushConsumer, Collector]:
    got = Collector()
    c = PushConsumer(group, ns, listener=got, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    c.subscribe(topic)
    await c.start()
    return c, got


async def runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await client.invoke(addr, RemotingCommand(code=RC.GET_BROKER_RUNTIME_INFO), 5)
    return fastjson.loads(resp.body_bytes())["table"]


async def end_transaction(client: RemotingClient, addr: str, *, group: str, offset_msg_id: str, queue_offset: int,
                          kind: int, from_check: bool = False, shift: int = 0, **extra: str) -> RemotingCommand:
    """END_TRANSACTION as a request (official clients send it oneway), to read the broker's answer;
    ``shift`` moves the commitLogOffset off the message's."""
    _, _, clo = decode_offset_msg_id(offset_msg_id)
    clo += shift
    ext = {"producerGroup": group, "tranStateTableOffset": str(queue_offset), "commitLogOffset": str(clo),
           "commitOrRollback": str(kind), "fromTransactionCheck": "true" if from_check else "false", **extra}
    return await client.invoke(addr, RemotingCommand(code=RC.END_TRANSACTION, ext_fields=ext), 5)


async def register(producer: Any, topic: str) -> None:
    """Heartbeat now: a producer is a check-back target once the broker has its heartbeat, and clients
    send the first one only after heartbeatBrokerInterval (30 s)."""
    await producer.instance.update_route(topic)
    await producer.instance.send_heartbeat()


async def check_round_after(client: RemotingClient, addr: str, at_ms: float, timeout: float = 10) -> None:
    """Return once the broker has completed a transaction check round that began at or after ``at_ms``
    (wall clock, the broker's ``now``): a half message due by then and still open was checked in it.

    A round runs whole on the broker's event loop, as GET_BROKER_RUNTIME_INFO does, so none is half done
    when ``transaction.check_rounds`` is read; a round counted after a read made at ``at_ms`` began later."""
    deadline = time.monotonic() + timeout
    while (left := at_ms / 1000 - time.time()) > 0:
        await asyncio.sleep(left)  # the moment itself is the condition
    before = int((await runtime_info(client, addr))["transaction.check_rounds"])
    while int((await runtime_info(client, addr))["transaction.check_rounds"]) <= before:
        assert time.monotonic() < deadline, f"no transaction check round within {timeout}s"
        await asyncio.sleep(0.02)


async def checks_received(producer: Any) -> None:
    """A heartbeat round trip on the connection a check-back travels on: a CHECK_TRANSACTION_STATE the broker
    sent before answering it has been read, and its listener called, when this returns."""
    await producer.instance.send_heartbeat()


async def markers(producer: Producer, topic: str, got: Collector, timeout: float = 10) -> list[bytes]:
    """A plain message to every queue of ``topic``, sent by ``producer`` after the requests under test (on
    the same connection, so the broker stores it after what they stored), and waited for at ``got``. Once
    all have arrived, anything stored before them has been delivered too: a message that should not exist
    would be in ``got`` now. Returns the markers' bodies."""
    queues = await producer.fetch_publish_queues(topic)
    bodies = [f"marker-{q.queue_id}-{time.monotonic_ns()}".encode() for q in queues]
    for q, b in zip(queues, bodies, strict=True):
        await producer.send(Message(topic, b), queue=q)
    await wait_until(lambda: set(bodies) <= set(got.bodies), timeout, "the markers")
    return bodies
