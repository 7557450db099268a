"""Consumer offsets (ConsumerOffsetManager), persisted to ``config/consumerOffset.json``."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.fileutil import persist_config, read_with_backup

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.table: dict[str, dict[int, int]] = {}  # "topic@group" -> queueId -> offset
        self._lock = threading.Lock()
        # One writer of the file at a time, each writing the table as it was when its turn came: the
        # periodic flush runs on an executor thread, and the broker's stop persists again without waiting
        # for it. Apart from _lock, which commits take on the event loop: they never wait for a disk write.
        self._write_lock = threading.Lock()
        self._dirty = False
        # Entries whose topic@group key fails the naming rules: kept as read, written back, never used.
        self.refused: dict[str, object] = {}

    def load(self) -> None:
        raw = read_with_backup(self.path)
        if not raw:
            return
        obj = fastjson.loads(raw)
        for key, queues in (obj.get("offsetTable") or {}).items():
            topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            try:
                nm.check_any_topic(topic)
                nm.check_group(group)
                self.table[key] = {int(q): int(o) for q, o in queues.items()}
            except (ValueError, AttributeError) as e:
                log.warning("%s: offsets of %r not loaded (%s); left in the file as they are", self.path, key, e)
                self.refused[key] = queues

    def persist(self, force: bool = False) -> None:
        with self._write_lock:
            with self._lock:
                if not (self._dirty or force):
                    return
                data = fastjson.dumpb({"offsetTable": {**self.refused, **{k: dict(v) for k, v in self.table.items()}}})
                self._dirty = False
            if not persist_config(self.path, data):
                self._dirty = True

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self.table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for the queue."""
        q = self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if q is None:
            return -1
        return q.get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        out = set()
        for key in list(self.table):
            t, _, g = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if t == topic:
                out.add(g)
        return out

    def topics_of_group(self, group: str) -> set[str]:
        out = set()
        for key in list(self.table):
            t, _, g = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if g == group:
                out.add(t)
        return out

    def all_groups(self) -> set[str]:
        return {k.rpartition(TOPIC_GROUP_SEPARATOR)[2] for k in list(self.table)}

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            for key in [k for k in self.table if k.rpartition(TOPIC_GROUP_SEPARATOR)[0] == topic]:
                del self.table[key]
                self._dirty = True
