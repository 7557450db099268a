"""Rewind: INVOKE_BROKER_TO_RESET_OFFSET resets a group's offsets to a timestamp (the earliest, the
latest) and pushes the new offsets to the group's live consumers (RESET_CONSUMER_CLIENT_OFFSET), so
they replay without a restart (Broker2Client.resetOffset)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tidalmq.common import fastjson
from tidalmq.remoting.codes import LanguageCode, ResponseCode
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import TIMESTAMP_LATEST, ResetOffsetRequestHeader
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    from tidalmq.broker.client.consumer_manager import ConsumerManager
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.api import MessageStore



def reset_body_for(language: int, table: list[tuple[str, str, int, int]]) -> bytes:
    """ResetOffsetBody as each client family reads it: Java (fastjson) a map keyed by MessageQueue
    objects; the C++ client (and TidalMQ's own) a list of queue objects with their offset."""
    if language != LanguageCode.JAVA:
        items = [{"brokerName": b, "queueId": q, "topic": t, "offset": o} for t, b, q, o in table]
        return fastjson.dumpb({"offsetTable": items})
    entries = [
        "{" + f'"brokerName":{json.dumps(b)},"queueId":{q},"topic":{json.dumps(t)}' + "}:" + str(o)
        for t, b, q, o in table
    ]
    return ("{\"offsetTable\":{" + ",".join(entries) + "}}").encode("utf-8")


class OffsetResetProcessor:
    def __init__(self, *, config: BrokerConfig, topics: TopicConfigManager, consumers: ConsumerManager,
                 offsets: ConsumerOffsetManager, store: MessageStore) -> None:
        self.config, self.topics, self.consumers, self.offsets, self.store = config, topics, consumers, offsets, store

    def reset_offset(self, conn: Connection, req: RemotingCommand, h: ResetOffsetRequestHeader) -> RemotingCommand:
        group, timestamp, force, topic = h.group, h.timestamp, h.is_force, h.topic
        known_topics = self.offsets.topics_of_group(group)
        info = self.consumers.groups.get(group)
        if info is not None:
            known_topics |= set(info.subscriptions)
        if not known_topics:
            return req.make_response(ResponseCode.CONSUMER_NOT_ONLINE,
                                     f"the consumer group[{group}] has no offsets and no consumer online: nothing to reset")
        topics = [topic] if topic else sorted(t for t in known_topics if self.topics.get(t) is not None)
        table: list[tuple[str, str, int, int]] = []
        notes: list[str] = []
        for t in topics:
            tc = self.topics.get(t)
            if tc is None:
                return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"[reset-offset] topic config not exist: {t}")
            for qid in range(tc.read_queue_nums):
                current = self.offsets.query(group, t, qid)
                mn = self.store.get_min_offset_in_queue(t, qid)
                mx = self.store.get_max_offset_in_queue(t, qid)
                if timestamp == TIMESTAMP_LATEST:
                    target = mx
                else:
                    target = self.store.get_offset_in_queue_by_time(t, qid, timestamp)
                    earliest = self.store.get_earliest_message_time(t, qid)
                    if mx > mn and 0 < earliest and timestamp < earliest:
                        notes.append(f"{t}:{qid} starts at its earliest retained message (offset {mn})")
                target = min(max(target, mn), mx)
                if force or current < 0 or target < current:
                    self.offsets.commit(group, t, qid, target)
                    table.append((t, self.config.broker_name, qid, target))
        self.offsets.persist(force=True)
        self._push_to_clients(group, table, timestamp, force)
        remark = "; ".join(notes) if notes else None
        body = fastjson.dumpb({"offsetTable": [{"topic": t, "brokerName": n, "queueId": q, "offset": o}
                                               for t, n, q, o in table]})
        return req.make_response(ResponseCode.SUCCESS, remark, body=body)

    def _push_to_clients(self, group: str, table: list[tuple[str, str, int, int]], timestamp: int, force: bool) -> None:
        info = self.consumers.groups.get(group)
        if info is None or not table:
            return
        by_topic: dict[str, list[tuple[str, str, int, int]]] = {}
        for row in table:
            by_topic.setdefault(row[0], []).append(row)
        for conn, ch in list(info.channels.items()):
            for t, rows in by_topic.items():
                cmd = RemotingCommand(
                    code=RC.RESET_CONSUMER_CLIENT_OFFSET,
                    ext_fields=ResetOffsetRequestHeader(topic=t, group=group, timestamp=timestamp,
                                                        is_force=force).to_ext(),
                    body=reset_body_for(ch.language, rows),
                )
                conn.invoke_oneway(cmd)
