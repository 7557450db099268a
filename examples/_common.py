"""Shared by the examples: the NameServer address and a topic that exists before anyone consumes it."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from tidalmq.client import Admin

NAMESRV = os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")
TIMEOUT = float(os.environ.get("EXAMPLE_TIMEOUT", "30"))


def unique(prefix: str) -> str:
    """A fresh name, so every run of an example starts from an empty topic and group."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def ensure_topic(topic: str, queues: int = 4) -> None:
    """Create the topic and wait until the NameServer routes it."""
    deadline = time.monotonic() + TIMEOUT
    async with Admin(NAMESRV) as admin:
        while True:
            try:
                await admin.create_topic(topic, queues)
                if (await admin.route(topic)).get("queueDatas"):
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.1)


def main(coro_fn) -> None:  # type: ignore[no-untyped-def]
    """Run the example with a time limit; exit 0 only if it did what it shows."""
    try:
        ok = asyncio.run(asyncio.wait_for(coro_fn(), TIMEOUT))
    except TimeoutError:
        print(f"timed out after {TIMEOUT}s")
        raise SystemExit(1) from None
    raise SystemExit(0 if ok is not False else 1)
