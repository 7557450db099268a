"""The Telemetry streams of connected 5.x producers, by the topics their settings publish (RocketMQ's
proxy GrpcChannelManager): what the endpoint sends a producer (a transaction check) goes into the
outgoing queue of one of these streams."""

from __future__ import annotations

import asyncio
from typing import Any

Outgoing = asyncio.Queue[Any]


class TelemetryChannels:
    def __init__(self) -> None:
        self._publishers: dict[str, list[Outgoing]] = {}  # topic -> the streams of producers publishing it
        self._turn = 0

    def publish(self, out: Outgoing, topics: list[str]) -> None:
        for t in topics:
            self._publishers.setdefault(t, []).append(out)

    def unpublish(self, out: Outgoing, topics: list[str]) -> None:
        for t in topics:
            queues = self._publishers.get(t, [])
            if out in queues:
                queues.remove(out)
            if not queues:
                self._publishers.pop(t, None)

    def has_publisher(self, topic: str) -> bool:
        return bool(self._publishers.get(topic))

    def next_publisher(self, topic: str) -> Outgoing | None:
        """The stream of a producer publishing ``topic``, round robin; None when none is connected."""
        queues = self._publishers.get(topic)
        if not queues:
            return None
        self._turn += 1
        return queues[self._turn % len(queues)]
