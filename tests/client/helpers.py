"""Helpers of the client integration tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from tidalmq.client import Admin, Message, Producer, SessionCredentials


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


async def create_topic(namesrv: str, topic: str, queues: int = 4, timeout: float = 15.0,
                       credentials: SessionCredentials | None = None, tls: Any = None,
                       attributes: dict[str, str] | None = None) -> None:
    """Create the topic (with ``attributes``, e.g. its message.type) and wait until the NameServer routes
    it (as ``credentials``' admin account when ACL is on)."""
    deadline = time.monotonic() + timeout
    async with Admin(namesrv, credentials=credentials, tls=tls) as admin:
        while True:
            try:
                await admin.create_topic(topic, queues, attributes=attributes)
                route = await admin.route(topic)
                if route.get("queueDatas"):
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise AssertionError(f"the NameServer never routed {topic}")
            await asyncio.sleep(0.05)


async def wait_until(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def send_sentinels(producer: Producer, topic: str, tags: str | None = None) -> set[bytes]:
    """A sentinel message in each of ``topic``'s queues, sent after what a test sent before: each queue
    delivers in order, so once a consumer has received every sentinel it has received whatever came before
    them, and a check that nothing unwanted arrived can be made then (no sleep standing in for it).
    Returns the sentinels' bodies."""
    bodies = set()
    for mq in await producer.fetch_publish_queues(topic):
        body = f"sentinel-{mq.queue_id}".encode()
        await producer.send(Message(topic, body, tags=tags), queue=mq)
        bodies.add(body)
    return bodies
