"""The checks of the JSON bodies that carry names (heartbeats, lock sets, a broker's topic table,
subscription groups, batch acks): part of each request's declaration (protocol/requests.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidalmq.common import fastjson
from tidalmq.remoting.protocol.header import Kind, RequestError, check_value

_T, _G, _I, _L = Kind.TOPIC, Kind.GROUP, Kind.INT32, Kind.INT64
BodyCheck = Callable[[dict[str, Any]], None]


def json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = fastjson.loads(body or b"{}")
    except ValueError as e:
        raise RequestError(f"the request body is not JSON: {str(e)[:120]}") from None
    except RecursionError:
        raise RequestError("the request body is not JSON this broker reads: nested too deeply") from None
    if not isinstance(obj, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(obj).__name__}")
    return obj


def _objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = obj.get(key)
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise RequestError(f"<{key}> must be a list of objects")
    return items


def _field(obj: dict[str, Any], where: str, name: str, kind: Kind, required: bool = True) -> None:
    value = obj.get(name)
    if value is None:
        if required:
            raise RequestError(f"<{where}.{name}> is missing")
        return
    check_value(f"{where}.{name}", kind, value)


def heartbeat(obj: dict[str, Any]) -> None:
    for consumer in _objects(obj, "consumerDataSet"):
        _field(consumer, "consumerDataSet", "groupName", _G)
        for sub in _objects(consumer, "subscriptionDataSet"):
            _field(sub, "subscriptionDataSet", "topic", _T)
            _field(sub, "subscriptionDataSet", "subVersion", _L, required=False)
    for producer in _objects(obj, "producerDataSet"):
        _field(producer, "producerDataSet", "groupName", _G)


def lock_batch(obj: dict[str, Any]) -> None:
    _field(obj, "body", "consumerGroup", _G)
    for mq in _objects(obj, "mqSet"):
        _field(mq, "mqSet", "topic", _T)
        _field(mq, "mqSet", "brokerName", Kind.BROKER)
        _field(mq, "mqSet", "queueId", _I)


def register_broker(obj: dict[str, Any]) -> None:
    wrapper = obj.get("topicConfigSerializeWrapper", obj)
    if not isinstance(wrapper, dict):
        raise RequestError("<topicConfigSerializeWrapper> must be an object")
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise RequestError("<topicConfigTable> must be an object")
    for topic, tc in table.items():
        check_value("topicConfigTable key", _T, topic)
        if not isinstance(tc, dict):
            raise RequestError(f"<topicConfigTable.{topic}> must be an object")
        for name in ("readQueueNums", "writeQueueNums", "topicSysFlag"):
            _field(tc, f"topicConfigTable.{topic}", name, _I, required=False)
        _field(tc, f"topicConfigTable.{topic}", "perm", Kind.PERM, required=False)


def subscription_group(obj: dict[str, Any]) -> None:
    _field(obj, "body", "groupName", _G)
    for name in ("retryQueueNums", "retryMaxTimes", "whichBrokerWhenConsumeSlowly"):
        _field(obj, "body", name, _I, required=False)
    _field(obj, "body", "brokerId", _L, required=False)


def check_client_config(obj: dict[str, Any]) -> None:
    _field(obj, "body", "group", _G, required=False)
    sub = obj.get("subscriptionData")
    if isinstance(sub, dict):
        _field(sub, "subscriptionData", "topic", _T, required=False)


def batch_ack(obj: dict[str, Any]) -> None:
    _field(obj, "body", "brokerName", Kind.BROKER, required=False)
    for ack in _objects(obj, "acks"):
        _field(ack, "acks", "c", _G)
        _field(ack, "acks", "t", _T)
        for name in ("q", "rq"):
            _field(ack, "acks", name, _I, required=name == "q")
        for name in ("so", "pt", "it"):
            _field(ack, "acks", name, _L)
        _field(ack, "acks", "b", Kind.TEXT)


def any_object(obj: dict[str, Any]) -> None:
    """A DataVersion: a JSON object the NameServer compares whole."""
