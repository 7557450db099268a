"""The gRPC suite: the official 5.x client (rocketmq-python-client) against a real standalone, its
gRPC endpoint on a free port (never 8081). Every client made here is shut down after its test."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.v5.client.connection.rpc_client import RpcClient

from tests.compat.harness import create_topic, uniq
from tests.support import ModuleTmp, Standalone
from tidalmq.client import Admin

# The 5.x client logs every retry and reconnect at INFO into its own file handler; keep the suite quiet.
logging.getLogger("rocketmqClient").setLevel(logging.WARNING)

T = TypeVar("T")


def adopt_client_loop() -> None:
    """Make the 5.x client's I/O loop the main thread's current asyncio loop. The client opens some gRPC
    calls (its Telemetry stream) from the thread that calls it, and grpc.aio takes that thread's current
    loop; the client sets it so itself only when that thread also creates the channel. An asyncio.run()
    in the main thread (a fixture, an earlier test) leaves no current loop behind, and the client then
    fails at random ("There is no current event loop in thread 'MainThread'", its route fetch failing)."""
    if RpcClient._io_loop is not None:
        asyncio.set_event_loop(RpcClient._io_loop)


def run_off_main(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` in a thread of its own, leaving the main thread's asyncio state (the 5.x
    client's loop) alone."""
    out: list[T] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            out.append(asyncio.run(coro))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)

    t = threading.Thread(target=go, name="run_off_main")
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return out[0]


@pytest.fixture(autouse=True)
def _client_loop_in_main_thread() -> None:
    adopt_client_loop()


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    with Standalone(module_tmp("grpc") / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}) as s:
        yield s


class Clients:
    """5.x clients started for one test; ``close`` shuts each down (their threads with them)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.all: list[Any] = []

    def config(self) -> ClientConfiguration:
        return ClientConfiguration(self.endpoint, Credentials(), request_timeout=5)

    def producer(self, *topics: str, checker: Any = None) -> Producer:
        p = Producer(self.config(), topics, checker)
        self.all.append(p)
        adopt_client_loop()  # the client's loop exists once a client does
        p.startup()
        return p

    def simple_consumer(self, group: str, topic: str, await_s: int = 2, tag: str = "*") -> SimpleConsumer:
        c = SimpleConsumer(self.config(), group, {topic: FilterExpression(tag)}, await_duration=await_s)
        self.all.append(c)
        adopt_client_loop()
        c.startup()
        return c

    def close(self) -> None:
        for c in reversed(self.all):
            with contextlib.suppress(Exception):
                c.shutdown()


@pytest.fixture
def clients(broker: Standalone) -> Iterator[Clients]:
    cs = Clients(broker.grpc_endpoint)
    try:
        yield cs
    finally:
        cs.close()


@pytest.fixture
def topic(broker: Standalone) -> str:
    name = uniq("g5")
    create_topic(broker.namesrv_addr, name, queues=2)
    adopt_client_loop()  # create_topic ran asyncio.run() in this thread
    return name


def typed_topic(broker: Standalone, kind: str, queues: int = 1) -> str:
    """A topic whose message.type is ``kind``, routed by the NameServer. A 5.x producer's route accepts
    only that type (RocketMQ 5: FIFO, delay, transaction and priority messages need a topic of their type)."""
    topic = uniq("g5" + kind.lower())

    async def go() -> None:
        async with Admin(broker.namesrv_addr) as admin:
            deadline = time.monotonic() + 15
            while True:
                try:
                    await admin.create_topic(topic, queues, attributes={"message.type": kind})
                    if (await admin.route(topic)).get("queueDatas"):
                        return
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.2)

    run_off_main(go())
    return topic


@pytest.fixture
def fifo_topic(broker: Standalone) -> str:
    return typed_topic(broker, "FIFO", queues=2)


@pytest.fixture
def delay_topic(broker: Standalone) -> str:
    return typed_topic(broker, "DELAY", queues=2)
