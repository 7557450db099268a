"""The gRPC suite: the official 5.x client (rocketmq-python-client) against a real standalone, its
gRPC endpoint on a free port (never 8081). Every client made here is shut down after its test."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer

from tests.compat.harness import create_topic, uniq
from tests.support import Standalone
from tidalmq.client import Admin

# The 5.x client logs every retry and reconnect at INFO into its own file handler; keep the suite quiet.
logging.getLogger("rocketmqClient").setLevel(logging.WARNING)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with Standalone(tmp_path_factory.mktemp("grpc") / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}) as s:
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
        p.startup()
        return p

    def simple_consumer(self, group: str, topic: str, await_s: int = 2, tag: str = "*") -> SimpleConsumer:
        c = SimpleConsumer(self.config(), group, {topic: FilterExpression(tag)}, await_duration=await_s)
        self.all.append(c)
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

    asyncio.run(go())
    return topic


@pytest.fixture
def fifo_topic(broker: Standalone) -> str:
    return typed_topic(broker, "FIFO", queues=2)


@pytest.fixture
def delay_topic(broker: Standalone) -> str:
    return typed_topic(broker, "DELAY", queues=2)
