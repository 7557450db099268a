"""Subscription groups (SubscriptionGroupManager), persisted to ``config/subscriptionGroup.json``."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.fileutil import persist_config, read_with_backup

log = logging.getLogger(__name__)


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # RocketMQ 5: a FIFO group (the gRPC endpoint tells its 5.x consumers so and pops in order).
    consume_message_orderly: bool = False
    # RocketMQ 5 group attributes (priority.factor ...), real keys; an update request carries signed ones
    # (+key=value, -key), applied by the admin processor (tidalmq.common.attribute.topic_message_type.GROUP_ATTRIBUTES).
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "groupName": self.group_name,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "retryQueueNums": self.retry_queue_nums,
            "retryMaxTimes": self.retry_max_times,
            "brokerId": self.broker_id,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "consumeMessageOrderly": self.consume_message_orderly,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(
            group_name=d["groupName"],
            consume_enable=bool(d.get("consumeEnable", True)),
            consume_from_min_enable=bool(d.get("consumeFromMinEnable", True)),
            consume_broadcast_enable=bool(d.get("consumeBroadcastEnable", True)),
            retry_queue_nums=int(d.get("retryQueueNums", 1)),
            retry_max_times=int(d.get("retryMaxTimes", 16)),
            broker_id=int(d.get("brokerId", 0)),
            which_broker_when_consume_slowly=int(d.get("whichBrokerWhenConsumeSlowly", 1)),
            notify_consumer_ids_changed_enable=bool(d.get("notifyConsumerIdsChangedEnable", True)),
            consume_message_orderly=bool(d.get("consumeMessageOrderly", False)),
            attributes=_attributes_of(d.get("attributes")),
        )


def _attributes_of(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ValueError(f"attributes must map strings to strings, got {raw!r}")
    return dict(raw)


class SubscriptionGroupManager:
    def __init__(self, path: str | Path, auto_create: bool = True) -> None:
        self.path = Path(path)
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self._lock = threading.Lock()
        # Entries whose names fail the naming rules: kept as read, written back, never used.
        self.refused: dict[str, Any] = {}

    def load(self) -> None:
        raw = read_with_backup(self.path)
        if raw:
            for name, d in (fastjson.loads(raw).get("subscriptionGroupTable") or {}).items():
                try:
                    nm.check_group(name)
                    cfg = SubscriptionGroupConfig.from_json(d)
                    if cfg.group_name != name:
                        raise nm.NameError_(f"its groupName is {cfg.group_name!r}")
                except (ValueError, KeyError, TypeError) as e:
                    log.warning("%s: group %r not loaded (%s); left in the file as it is", self.path, name, e)
                    self.refused[name] = d
                    continue
                self.table[name] = cfg

    def persist(self) -> None:
        with self._lock:
            table = {**self.refused, **{n: c.to_json() for n, c in self.table.items()}}
            data = fastjson.dumpb({"subscriptionGroupTable": table})
        persist_config(self.path, data)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults on first use when auto-creation is on."""
        cfg = self.table.get(group)
        if cfg is None and self.auto_create:
            with self._lock:
                cfg = self.table.setdefault(group, SubscriptionGroupConfig(group))
            self.persist()
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        with self._lock:
            self.table[cfg.group_name] = cfg
        self.persist()

    def delete(self, group: str) -> bool:
        with self._lock:
            existed = self.table.pop(group, None) is not None
        if existed:
            self.persist()
        return existed
