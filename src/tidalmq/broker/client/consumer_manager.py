"""Live consumer groups: who is connected, what they subscribe (ConsumerManager)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidalmq.common.taghash import tags_hash_code

log = logging.getLogger(__name__)

SUB_ALL = "*"


@dataclass
class SubscriptionData:
    topic: str
    sub_string: str
    tags_set: set[str] = field(default_factory=set)
    code_set: set[int] = field(default_factory=set)
    sub_version: int = 0
    expression_type: str = "TAG"

    @classmethod
    def build(cls, topic: str, sub_string: str | None, sub_version: int = 0, expression_type: str = "TAG") -> SubscriptionData:
        """Parse a tag expression (``TagA || TagB`` or ``*``) as FilterAPI.buildSubscriptionData."""
        sub = (sub_string or "").strip() or SUB_ALL
        data = cls(topic, sub, sub_version=sub_version, expression_type=expression_type or "TAG")
        if data.expression_type == "TAG" and sub != SUB_ALL:
            for tag in sub.split("||"):
                tag = tag.strip()
                if tag:
                    data.tags_set.add(tag)
                    data.code_set.add(tags_hash_code(tag))
        return data

    @property
    def matches_all(self) -> bool:
        return self.expression_type == "TAG" and (self.sub_string == SUB_ALL or not self.tags_set)

    def tag_codes(self) -> set[int] | None:
        """The ConsumeQueue-level tag-hash filter; None (everything) for SQL92, filtered by the record."""
        if self.expression_type != "TAG":
            return None
        return None if self.matches_all else self.code_set

    def matches_tags(self, tags: str | None) -> bool:
        """The exact check a client does after the broker's hash filter."""
        return self.matches_all or (tags is not None and tags in self.tags_set)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "subString": self.sub_string,
            "tagsSet": sorted(self.tags_set),
            "codeSet": sorted(self.code_set),
            "subVersion": self.sub_version,
            "expressionType": self.expression_type,
            "classFilterMode": False,
        }


@dataclass
class ClientChannelInfo:
    client_id: str
    language: int
    version: int
    last_update_ms: int
    conn: Any


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Any, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted(ch.client_id for ch in self.channels.values())


def _enum_name(value: Any, names: list[str], default: str) -> str:
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        return value
    try:
        return names[int(value)]
    except (TypeError, ValueError, IndexError):
        return default


CONSUME_TYPES = ["CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP"]
MESSAGE_MODELS = ["BROADCASTING", "CLUSTERING"]
CONSUME_FROM = [
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
]


class ConsumerManager:
    def __init__(self, on_ids_changed: Callable[[str, ConsumerGroupInfo], None], clock: Callable[[], int] | None = None) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self._on_ids_changed = on_ids_changed
        self._clock = clock or (lambda: int(time.time() * 1000))

    def register(self, group: str, client_id: str, conn: Any, language: int, version: int, consumer: dict[str, Any]) -> bool:
        """Record a heartbeat; returns True (and notifies the group) when membership changed."""
        info = self.groups.get(group)
        if info is None:
            info = ConsumerGroupInfo(group)
            self.groups[group] = info
        info.consume_type = _enum_name(consumer.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY")
        info.message_model = _enum_name(consumer.get("messageModel"), MESSAGE_MODELS, "CLUSTERING")
        info.consume_from_where = _enum_name(consumer.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET")
        now = self._clock()
        changed = False
        ch = info.channels.get(conn)
        if ch is None or ch.client_id != client_id:
            info.channels[conn] = ClientChannelInfo(client_id, language, version, now, conn)
            changed = True
        else:
            ch.last_update_ms = now
        subs: dict[str, SubscriptionData] = {}
        for sd in consumer.get("subscriptionDataSet") or []:
            topic = sd.get("topic")
            if not topic:
                continue
            subs[topic] = SubscriptionData.build(
                topic, sd.get("subString"), int(sd.get("subVersion") or 0), sd.get("expressionType") or "TAG"
            )
        sub_changed = {t: s.sub_string for t, s in subs.items()} != {
            t: s.sub_string for t, s in info.subscriptions.items()
        }
        if subs or not info.subscriptions:
            info.subscriptions = subs
        if changed or sub_changed:
            self._on_ids_changed(group, info)
        return changed

    def unregister(self, group: str, conn: Any) -> None:
        info = self.groups.get(group)
        if info is None or info.channels.pop(conn, None) is None:
            return
        if not info.channels:
            del self.groups[group]
        else:
            self._on_ids_changed(group, info)

    def connection_closed(self, conn: Any) -> None:
        for group in list(self.groups):
            self.unregister(group, conn)

    def scan_not_active(self, timeout_ms: int) -> None:
        now = self._clock()
        for group, info in list(self.groups.items()):
            for conn, ch in list(info.channels.items()):
                if now - ch.last_update_ms > timeout_ms:
                    log.warning("consumer %s of %s expired", ch.client_id, group)
                    self.unregister(group, conn)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info else None

    def groups_subscribing(self, topic: str) -> list[str]:
        return sorted(g for g, info in self.groups.items() if topic in info.subscriptions)
