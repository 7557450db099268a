"""Lite topics without a server: the lite queue names (tidalmq.common.naming), the LITE message type
and its send check (tidalmq.common.attribute.topic_message_type), the conversions of a lite message
(tidalmq.proxy.convert) and the SyncLiteSubscription actions (tidalmq.proxy.lite)."""

from __future__ import annotations

import pytest

from tidalmq.client.message import MessageExt
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.attribute.topic_message_type import TopicMessageType as T
from tidalmq.common.attribute.topic_message_type import (
    alter_attributes,
    check_lite,
    message_type_of,
    topic_message_type,
)
from tidalmq.proxy import convert
from tidalmq.proxy import lite as lite_module
from tidalmq.proxy.lite import LiteError, LiteSubscriptions
from tidalmq.proxy.protocol import definition_pb2

Action = definition_pb2.LiteSubscriptionAction

Code = definition_pb2.Code


def test_lite_queue_names() -> None:
    assert nm.lite_queue("Parent_1", "child-2") == "%LMQ%$Parent_1$child-2"
    assert nm.parse_lite_queue("%LMQ%$Parent_1$child-2") == ("Parent_1", "child-2")
    for bad in ("%LMQ%$P", "%LMQ%$$c", "%LMQ%$P$", "%LMQ%$P$c$d", "%LMQ%$P$c%", "%LMQ%P$c", "P"):
        assert nm.parse_lite_queue(bad) is None, bad
        if bad.startswith(nm.LITE_QUEUE_PREFIX):
            with pytest.raises(nm.NameError_):
                nm.check_any_topic(bad)
    nm.check_any_topic("%LMQ%$" + "P" * nm.TOPIC_MAX_LENGTH + "$" + "c" * nm.LITE_TOPIC_MAX_LENGTH)
    for bad in ("", " ", "a$b", "a%b", "a|b", "../x", "a.b", "x" * 65, "é"):
        with pytest.raises(nm.NameError_):
            nm.check_lite_topic(bad)
        with pytest.raises(nm.NameError_):
            nm.lite_queue("P", bad)


def test_message_type_lite_is_a_topic_attribute() -> None:
    """updateTopic's ``+message.type=LITE`` (mqadmin -a, Admin.create_topic attributes) is accepted."""
    assert alter_attributes(True, {}, {"+message.type": "LITE"}) == {"message.type": "LITE"}
    assert topic_message_type({"message.type": "LITE"}) == T.LITE


def test_lite_message_type_and_send_check() -> None:
    assert message_type_of({mc.LITE_TOPIC: "c"}) == T.LITE
    assert message_type_of({mc.LITE_TOPIC: "c", mc.SHARDING_KEY: "g"}) == T.FIFO  # RocketMQ's precedence
    lite = "UNIQ_KEY\x01A\x02__LITE_TOPIC\x01child\x02"
    assert check_lite("P", T.LITE, [lite]) is None
    assert check_lite("P", T.MIXED, [lite]) is None
    assert check_lite("P", T.NORMAL, ["UNIQ_KEY\x01A\x02"]) is None  # not a lite message: not this check's
    assert (check_lite("P", T.NORMAL, [lite]) or "").startswith(
        "TopicMessageType validate failed, the expected type is NORMAL, but actual type is LITE")
    assert "illegal lite topic" in (check_lite("P", T.LITE, ["__LITE_TOPIC\x01a/b\x02"]) or "")


def test_convert_lite_message_both_ways() -> None:
    m = definition_pb2.Message(topic=definition_pb2.Resource(name="P"), body=b"b")
    m.system_properties.message_id = "ID"
    m.system_properties.lite_topic = "child"
    assert convert.to_remoting(m, 1024).properties[mc.LITE_TOPIC] == "child"
    m.system_properties.lite_topic = "no$pe"
    with pytest.raises(convert.ConvertError) as e:
        convert.to_remoting(m, 1024)
    assert e.value.code == Code.ILLEGAL_LITE_TOPIC
    m.system_properties.lite_topic = "child"
    m.system_properties.message_group = "g"
    with pytest.raises(convert.ConvertError) as e:
        convert.to_remoting(m, 1024)
    assert e.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    u = definition_pb2.Message(topic=definition_pb2.Resource(name="P"), body=b"b")
    u.system_properties.message_id = "ID"
    u.user_properties[mc.LITE_TOPIC] = "child"  # only through the system property
    with pytest.raises(convert.ConvertError) as e:
        convert.to_remoting(u, 1024)
    assert e.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    stored = MessageExt("P", b"b", 0, 3, 0, {mc.UNIQ_KEY: "ID", mc.LITE_TOPIC: "child"})
    out = convert.to_grpc(stored, "P")
    assert out.system_properties.lite_topic == "child"
    assert out.system_properties.message_type == definition_pb2.MessageType.LITE
    assert mc.LITE_TOPIC not in out.user_properties


def test_sync_lite_subscription_actions() -> None:
    subs = LiteSubscriptions(quota=3)
    subs.sync("g", "c1", "P", Action.PARTIAL_ADD, ["a", "b"])
    subs.sync("g", "c1", "P", Action.PARTIAL_ADD, ["c"])
    sub = subs.get("g", "c1")
    assert sub is not None and sub.lite_topics == {"a", "b", "c"}
    with pytest.raises(LiteError) as e:  # a fourth: over the quota, nothing changes
        subs.sync("g", "c1", "P", Action.PARTIAL_ADD, ["d"])
    assert e.value.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED and sub.lite_topics == {"a", "b", "c"}
    subs.sync("g", "c1", "P", Action.PARTIAL_REMOVE, ["b", "zz"])
    assert sub.lite_topics == {"a", "c"}
    changed = sub.changed
    subs.sync("g", "c1", "P", Action.COMPLETE_ADD, ["x"])
    assert sub.lite_topics == {"x"} and changed.is_set() and not sub.changed.is_set()
    assert subs.get("g", "c2") is None and subs.get("h", "c1") is None  # per group and client
    with pytest.raises(LiteError) as e:
        subs.sync("g", "c1", "P", Action.PARTIAL_ADD, ["ok", "not ok"])
    assert e.value.code == Code.ILLEGAL_LITE_TOPIC and sub.lite_topics == {"x"}
    with pytest.raises(LiteError) as e:  # bound to P while it has lite topics there
        subs.sync("g", "c1", "Q", Action.PARTIAL_ADD, ["y"])
    assert e.value.code == Code.BAD_REQUEST
    subs.sync("g", "c1", "P", Action.COMPLETE_REMOVE, [])
    assert subs.get("g", "c1") is None
    subs.sync("g", "c3", "P", Action.PARTIAL_ADD, ["a"])
    subs.drop_client("c3")
    assert subs.get("g", "c3") is None


def test_idle_lite_clients_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lite client not heard of for CLIENT_IDLE_S (no sync, receive, heartbeat or settings) loses its
    subscriptions; one that keeps speaking keeps them."""
    clock = [1000.0]
    monkeypatch.setattr(lite_module.time, "monotonic", lambda: clock[0])
    subs = LiteSubscriptions(idle_s=120)
    subs.sync("g", "gone", "P", Action.PARTIAL_ADD, ["a"])
    subs.sync("g", "alive", "P", Action.PARTIAL_ADD, ["b"])
    assert subs.is_lite_client("gone") and subs.is_lite_client("alive")
    for _ in range(15):  # 150 s of heartbeats from "alive" only (swept every 12 s)
        clock[0] += 10
        subs.seen("alive")
    assert not subs.is_lite_client("gone") and subs.get("g", "gone") is None
    assert subs.is_lite_client("alive") and subs.get("g", "alive") is not None
