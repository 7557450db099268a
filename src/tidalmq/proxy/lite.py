"""Lite subscriptions of the gRPC endpoint (SyncLiteSubscription): per consumer group and client, the
parent topic it is bound to and the set of lite topics it receives. Pure state, no I/O; the service
(proxy/activity/receive.py) reads it at each ReceiveMessage of a lite consumer (docs/grpc.md, "Lite topics").

Actions as apache.rocketmq.v2.LiteSubscriptionAction and RocketMQ's LiteSubscriptionRegistry apply them:
PARTIAL_ADD adds topics, PARTIAL_REMOVE removes them, COMPLETE_ADD replaces the whole set (the clients'
periodic sync sends it), COMPLETE_REMOVE drops the client's subscription.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from tidalmq.common import naming as nm
from tidalmq.proxy.protocol import definition_pb2 as pb

Code = pb.Code
Action = pb.LiteSubscriptionAction
# The clients' own defaults (LitePushConsumerSettings), which the endpoint answers in Settings.
LITE_SUBSCRIPTION_QUOTA = 1200
MAX_LITE_TOPIC_SIZE = nm.LITE_TOPIC_MAX_LENGTH
LITE_CLIENT_TYPES = frozenset({pb.ClientType.LITE_PUSH_CONSUMER, pb.ClientType.LITE_SIMPLE_CONSUMER})
# A client not heard of (sync, receive, heartbeat, settings) for this long is gone: its subscriptions go
# (RocketMQ's broker drops a consumer's channel after 120 s without heartbeat). The clients heartbeat every
# 10 s and sync their set every 30 s.
CLIENT_IDLE_S = 120.0


class LiteError(ValueError):
    """A sync the endpoint refuses: ``code`` is the gRPC status code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_lite_topic(name: str) -> None:
    """ILLEGAL_LITE_TOPIC unless ``name`` is a legal lite topic (letters, digits, ``_``, ``-``, at most 64)."""
    try:
        nm.check_lite_topic(name)
    except nm.NameError_ as e:
        raise LiteError(Code.ILLEGAL_LITE_TOPIC, str(e)) from None


@dataclass
class LiteSubscription:
    topic: str
    lite_topics: set[str] = field(default_factory=set)
    # Set (and replaced) on every change: a long-polling receive waits on it to see the new set.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    seen: float = field(default_factory=time.monotonic)


class LiteSubscriptions:
    def __init__(self, quota: int = LITE_SUBSCRIPTION_QUOTA, idle_s: float = CLIENT_IDLE_S) -> None:
        self.quota = quota
        self.idle_s = idle_s
        self._table: dict[tuple[str, str], LiteSubscription] = {}
        self._clients: dict[str, float] = {}  # lite client id -> last heard of (monotonic)
        self._swept = time.monotonic()

    def seen(self, client_id: str) -> None:
        """A lite client spoke (its Settings or Heartbeat name a lite client type, or it synced)."""
        if client_id:
            now = time.monotonic()
            self._clients[client_id] = now
            self._sweep(now)

    def is_lite_client(self, client_id: str) -> bool:
        return client_id in self._clients

    def _sweep(self, now: float) -> None:
        """Forget clients idle for ``idle_s`` and their subscriptions (at most once per tenth of it)."""
        if now - self._swept < self.idle_s / 10:
            return
        self._swept = now
        gone = {c for c, t in self._clients.items() if now - t > self.idle_s}
        for c in gone:
            del self._clients[c]
        for key in [k for k, sub in self._table.items() if k[1] in gone or now - sub.seen > self.idle_s
                    and k[1] not in self._clients]:
            self._table.pop(key).changed.set()

    def get(self, group: str, client_id: str) -> LiteSubscription | None:
        return self._table.get((group, client_id))

    def watch(self, group: str, client_id: str, topic: str) -> LiteSubscription:
        """The client's subscription, an empty one bound to ``topic`` when it has none yet (a receive
        before any sync waits on its ``changed``)."""
        key = (group, client_id)
        sub = self._table.get(key)
        if sub is None:
            sub = self._table[key] = LiteSubscription(topic)
        sub.seen = time.monotonic()
        return sub

    def sync(self, group: str, client_id: str, topic: str, action: int, lite_topics: list[str]) -> None:
        """Apply one SyncLiteSubscription; LiteError (nothing changed) when a name is illegal, the set
        would pass the quota, or the client is bound to another parent topic."""
        if not client_id:
            raise LiteError(Code.UNRECOGNIZED_CLIENT_TYPE, "the request has no client id (x-mq-client-id)")
        self.seen(client_id)
        for name in lite_topics:
            check_lite_topic(name)
        key = (group, client_id)
        sub = self._table.get(key)
        if action == Action.COMPLETE_REMOVE:
            if sub is not None and sub.topic == topic:
                del self._table[key]
                sub.changed.set()
            return
        if sub is not None and sub.topic != topic:
            if action in (Action.COMPLETE_ADD, Action.PARTIAL_ADD) and not sub.lite_topics:
                sub.topic = topic  # nothing subscribed yet under the old binding
            else:
                raise LiteError(Code.BAD_REQUEST, f"the client is bound to topic {sub.topic}, not {topic}")
        if action == Action.PARTIAL_ADD:
            new = (sub.lite_topics if sub is not None else set()) | set(lite_topics)
        elif action == Action.COMPLETE_ADD:
            new = set(lite_topics)
        elif action == Action.PARTIAL_REMOVE:
            new = (sub.lite_topics if sub is not None else set()) - set(lite_topics)
        else:
            raise LiteError(Code.BAD_REQUEST, f"unknown lite subscription action {action}")
        if len(new) > self.quota:
            raise LiteError(Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                            f"lite subscription quota exceeded: {len(new)} > {self.quota}")
        if sub is None:
            sub = self._table[key] = LiteSubscription(topic)
        sub.seen = time.monotonic()
        if new != sub.lite_topics:
            sub.lite_topics = new
            old, sub.changed = sub.changed, asyncio.Event()
            old.set()

    def drop_client(self, client_id: str) -> None:
        """NotifyClientTermination: every subscription of the client goes."""
        self._clients.pop(client_id, None)
        for key in [k for k in self._table if k[1] == client_id]:
            self._table.pop(key).changed.set()
