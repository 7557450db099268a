"""Which topics and groups a request touches, and how (PlainAccessResource.parse), pure.

Groups appear as their retry topic (``%RETRY%group``), as RocketMQ keys them. Requests of other
codes touch no resource: any known account may make them, unless the code needs an admin.
"""

from __future__ import annotations

from typing import Any

from tidalmq.acl.permission import PUB, SUB
from tidalmq.common import fastjson
from tidalmq.common.naming import RETRY_GROUP_TOPIC_PREFIX, retry_topic
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand

_SEND = int(RC.SEND_MESSAGE)
_SEND_V2 = int(RC.SEND_MESSAGE_V2)
_SEND_BATCH = int(RC.SEND_BATCH_MESSAGE)
_PULL = int(RC.PULL_MESSAGE)
# Pop consumption reads a topic for a group as a pull does (RocketMQ's @RocketMQAction SUB on both).
_POP = frozenset(int(c) for c in (RC.POP_MESSAGE, RC.ACK_MESSAGE, RC.CHANGE_MESSAGE_INVISIBLETIME, RC.NOTIFICATION))


class ResourceError(ValueError):
    """A request whose resources cannot be read (a heartbeat body that is not JSON ...)."""


def _group(ext: dict[str, str], key: str) -> dict[str, int]:
    group = ext.get(key)
    return {retry_topic(group): SUB} if group else {}


def _send(topic: str | None) -> dict[str, int]:
    # Writing into a group's retry topic is the consumer's send-back: it needs SUB on that group.
    # (RocketMQ reads the group from the producer-group field here, which names no consumer group.)
    if topic is None:
        return {}
    return {topic: SUB if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else PUB}


def _heartbeat(body: Any) -> dict[str, int]:
    try:
        data = fastjson.loads(bytes(body)) if body else {}
        out: dict[str, int] = {}
        for consumer in data.get("consumerDataSet") or []:
            group = consumer.get("groupName")
            if group:
                out[retry_topic(group)] = SUB
            for sub in consumer.get("subscriptionDataSet") or []:
                if sub.get("topic"):
                    out[sub["topic"]] = SUB
        return out
    except (ValueError, AttributeError, TypeError) as e:
        raise ResourceError(f"the heartbeat body cannot be read: {e}") from None


def _batch_ack(body: Any) -> dict[str, int]:
    try:
        data = fastjson.loads(bytes(body)) if body else {}
        out: dict[str, int] = {}
        for ack in data.get("acks") or []:
            if ack.get("c"):
                out[retry_topic(ack["c"])] = SUB
            if ack.get("t"):
                out[ack["t"]] = SUB
        return out
    except (ValueError, AttributeError, TypeError) as e:
        raise ResourceError(f"the batch ack body cannot be read: {e}") from None


# The extFields each code's resources are read from (request_resources below). HEART_BEAT reads its body;
# codes not listed touch no resource. A code given resources in request_resources must be listed here
# (or in _BODY_READS), or one decision would stand for all its requests:
# tests/acl/test_units.py::test_resource_key_changes_with_every_field_the_resources_come_from.
RESOURCE_FIELDS: dict[int, tuple[str, ...]] = {
    _SEND_V2: ("b",), _SEND_BATCH: ("b",), _SEND: ("topic",), int(RC.RECALL_MESSAGE): ("topic",),
    _PULL: ("consumerGroup", "topic"),
    int(RC.CONSUMER_SEND_MSG_BACK): ("group",), int(RC.QUERY_MESSAGE): ("topic",),
    int(RC.UNREGISTER_CLIENT): ("consumerGroup",), int(RC.GET_CONSUMER_LIST_BY_GROUP): ("consumerGroup",),
    int(RC.UPDATE_CONSUMER_OFFSET): ("consumerGroup", "topic"),
    **{code: ("consumerGroup", "topic") for code in _POP},
}
# Codes whose resources are read from the body: never remembered (the body changes with every request).
_BODY_READS = frozenset((int(RC.HEART_BEAT), int(RC.BATCH_ACK_MESSAGE)))


def resource_key(cmd: RemotingCommand) -> tuple[int | str | None, ...] | None:
    """What ``request_resources(cmd)`` depends on, hashable: two requests with equal keys touch the same
    resources the same way, so a decision about one holds for the other. None for a heartbeat or a batch
    ack (their resources are in their bodies)."""
    code = cmd.code
    fields = RESOURCE_FIELDS.get(code)
    if fields is None:
        return None if code in _BODY_READS else (code,)
    ext = cmd.ext_fields
    if len(fields) == 1:
        return code, ext.get(fields[0])
    return (code, *[ext.get(f) for f in fields])


def request_resources(cmd: RemotingCommand) -> dict[str, int]:
    """Resource (topic, or %RETRY%group) -> the permission the request needs on it."""
    code = cmd.code
    ext = cmd.ext_fields
    if code == _SEND_V2 or code == _SEND_BATCH:
        return _send(ext.get("b"))
    if code == _PULL or code in _POP:
        out = _group(ext, "consumerGroup")
        topic = ext.get("topic")
        if topic:
            out[topic] = SUB
        return out
    if code == _SEND or code == RC.RECALL_MESSAGE:  # a recall takes back what was published: PUB, as RocketMQ's
        return _send(ext.get("topic"))
    if code == RC.CONSUMER_SEND_MSG_BACK:
        return _group(ext, "group")
    if code == RC.QUERY_MESSAGE:
        topic = ext.get("topic")
        return {topic: SUB} if topic else {}
    if code == RC.HEART_BEAT:
        return _heartbeat(cmd.body)
    if code == RC.BATCH_ACK_MESSAGE:
        return _batch_ack(cmd.body)
    if code in (RC.UNREGISTER_CLIENT, RC.GET_CONSUMER_LIST_BY_GROUP):
        return _group(ext, "consumerGroup")
    if code == RC.UPDATE_CONSUMER_OFFSET:
        out = _group(ext, "consumerGroup")
        topic = ext.get("topic")
        if topic:
            out[topic] = SUB
        return out
    return {}
