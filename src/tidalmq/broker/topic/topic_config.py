"""Topic configuration (TopicConfigManager) persisted to ``config/topics.json`` as RocketMQ writes it."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.attribute.topic_message_type import TopicMessageType, topic_message_type
from tidalmq.common.fileutil import persist_config, read_with_backup

log = logging.getLogger(__name__)

PERM_PRIORITY = 0x1 << 3
PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1
PERM_INHERIT = 0x1 << 0
PERM_RW = PERM_READ | PERM_WRITE


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    # RocketMQ 5 topic attributes (message.type ...), real keys without the +/- of a modification
    # (tidalmq.common.attribute.topic_message_type); persisted in topics.json and answered by GET_TOPIC_CONFIG as RocketMQ's.
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=d["topicName"],
            read_queue_nums=int(d.get("readQueueNums", 16)),
            write_queue_nums=int(d.get("writeQueueNums", 16)),
            perm=int(d.get("perm", PERM_RW)),
            topic_filter_type=d.get("topicFilterType", "SINGLE_TAG"),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),
            order=bool(d.get("order", False)),
            attributes=_attributes_of(d.get("attributes")),
        )

    @property
    def message_type(self) -> TopicMessageType:
        return topic_message_type(self.attributes)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def _attributes_of(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise TypeError(f"attributes must map strings to strings, got {raw!r}")
    return dict(raw)


class DataVersion:
    def __init__(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter = 0

    def next(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, Any]:
        return {"stateVersion": 0, "timestamp": self.timestamp, "counter": self.counter}


class TopicConfigManager:
    def __init__(self, path: str | Path, broker_name: str, cluster_name: str, default_queue_nums: int,
                 auto_create: bool) -> None:
        self.path = Path(path)
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self._lock = threading.RLock()
        # Entries of topics.json whose names fail the naming rules: kept as read, written back, never used.
        self.refused: dict[str, Any] = {}
        self.default_queue_nums = default_queue_nums
        self.auto_create = auto_create
        self._system_topics(broker_name, cluster_name)

    def _system_topics(self, broker_name: str, cluster_name: str) -> None:
        def add(name: str, r: int, w: int, perm: int = PERM_RW) -> None:
            self.table[name] = TopicConfig(name, r, w, perm)

        add(nm.SELF_TEST_TOPIC, 1, 1)
        if self.auto_create:
            add(nm.AUTO_CREATE_TOPIC_KEY_TOPIC, self.default_queue_nums, self.default_queue_nums,
                PERM_RW | PERM_INHERIT)
        # The cluster and broker names are topics too (RocketMQ's), when they are legal topic names (a host
        # name with dots is a legal broker name, not a topic).
        for name, n in ((cluster_name, 16), (broker_name, 1)):
            if nm.is_legal(nm.check_topic, name):
                add(name, n, n, PERM_RW | PERM_INHERIT)
        add(nm.SCHEDULE_TOPIC, 18, 18)
        add(nm.TIMER_TOPIC, 1, 1)
        add(nm.TRANS_HALF_TOPIC, 1, 1)
        add(nm.TRANS_OP_HALF_TOPIC, 1, 1)
        add(nm.TRANS_CHECK_MAX_TIME_TOPIC, 1, 1)

    def load(self) -> None:
        raw = read_with_backup(self.path)
        if not raw:
            return
        obj = fastjson.loads(raw)
        for name, d in (obj.get("topicConfigTable") or {}).items():
            try:
                nm.check_any_topic(name)
                tc = TopicConfig.from_json(d)
                if tc.topic_name != name:
                    raise nm.NameError_(f"its topicName is {tc.topic_name!r}")
                nm.check_perm(tc.perm)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("%s: topic %r not loaded (%s); left in the file as it is", self.path, name, e)
                self.refused[name] = d
                continue
            self.table[name] = tc
        dv = obj.get("dataVersion") or {}
        self.data_version.counter = int(dv.get("counter", 0))

    def persist(self) -> None:
        with self._lock:
            wrapper = self.wrapper()
            wrapper["topicConfigTable"] = {**self.refused, **wrapper["topicConfigTable"]}
            data = fastjson.dumpb(wrapper)
        persist_config(self.path, data)

    def wrapper(self) -> dict[str, Any]:
        with self._lock:
            return {
                "topicConfigTable": {n: tc.to_json() for n, tc in self.table.items()},
                "dataVersion": self.data_version.to_json(),
            }

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def update(self, tc: TopicConfig) -> None:
        with self._lock:
            self.table[tc.topic_name] = tc
            self.data_version.next()
        self.persist()

    def delete(self, topic: str) -> bool:
        with self._lock:
            existed = self.table.pop(topic, None) is not None
            if existed:
                self.data_version.next()
        if existed:
            self.persist()
        return existed

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int, sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` (TBW102) as RocketMQ's createTopicInSendMessageMethod."""
        with self._lock:
            tc = self.table.get(topic)
            if tc is not None:
                return tc
            default = self.table.get(default_topic)
            if default is None or not (default.perm & PERM_INHERIT):
                return None
            if default_topic == nm.AUTO_CREATE_TOPIC_KEY_TOPIC and not self.auto_create:
                return None
            n = max(1, min(queue_nums, default.write_queue_nums))
            tc = TopicConfig(topic, n, n, default.perm & ~PERM_INHERIT, topic_sys_flag=sys_flag)
            self.table[topic] = tc
            self.data_version.next()
        self.persist()
        return tc

    def create_system_like(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """Create a broker-owned topic (retry, DLQ ...) if absent."""
        with self._lock:
            tc = self.table.get(topic)
            if tc is not None:
                return tc
            tc = TopicConfig(topic, queue_nums, queue_nums, perm)
            self.table[topic] = tc
            self.data_version.next()
        self.persist()
        return tc
