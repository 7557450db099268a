"""The pure rules of RocketMQ 5 message types: attribute modifications (AttributeParser / AttributeUtil),
a message's type from its properties, which topic accepts which message, and the recall handle."""

from __future__ import annotations

import base64

import pytest

from tidalmq.acl.permission import PUB
from tidalmq.acl.resources import request_resources
from tidalmq.common.attribute.topic_message_type import (
    GROUP_ATTRIBUTES,
    TopicAttributeError,
    TopicMessageType,
    alter_attributes,
    check_message_type,
    check_messages,
    message_type_of,
    parse_modification,
    priority_factor,
    priority_of,
    priority_queue,
    topic_message_type,
)
from tidalmq.common.recall_handle import RecallHandle, RecallHandleError, decode_recall_handle
from tidalmq.mqadmin.topic import attribute_modification
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand

T = TopicMessageType


def test_modification_syntax() -> None:
    assert parse_modification("+message.type=DELAY") == {"+message.type": "DELAY"}
    assert parse_modification("+message.type=FIFO,-reserve.time") == {"+message.type": "FIFO", "-reserve.time": ""}
    assert parse_modification("") == {} and parse_modification(None) == {}
    for bad, why in (("message.type=DELAY", "add/alter attribute format is wrong"),
                     ("message.type", "delete attribute format is wrong"),
                     ("+message.type=", "format is wrong"),
                     ("+message.type=A,+message.type=B", "key duplication")):
        with pytest.raises(TopicAttributeError, match=why):
            parse_modification(bad)


def alter(create: bool, current: dict[str, str], text: str) -> dict[str, str]:
    return alter_attributes(create, current, parse_modification(text))


def test_alter_rules() -> None:
    assert alter(True, {}, "+message.type=FIFO") == {"message.type": "FIFO"}
    assert alter(False, {"message.type": "FIFO"}, "+message.type=DELAY") == {"message.type": "DELAY"}
    assert alter(False, {"message.type": "FIFO"}, "-message.type") == {}
    assert alter(False, {"message.type": "FIFO"}, "") == {"message.type": "FIFO"}  # an update without attributes keeps them
    assert alter(True, {}, "+queue.type=SimpleCQ") == {"queue.type": "SimpleCQ"}
    refusals = [
        (True, {}, "-message.type", "only add attribute is supported while creating topic"),
        (False, {}, "-message.type", "attempt to delete a nonexistent key: message.type"),
        (True, {}, "+colour=red", "unsupported key: colour"),
        (True, {}, "+message.type=URGENT", "value is not in set"),
        (False, {"queue.type": "SimpleCQ"}, "+queue.type=SimpleCQ", "attempt to update an unchangeable attribute"),
        (True, {}, "+queue.type=BatchCQ", "not supported by TidalMQ"),
        (True, {}, "+cleanup.policy=COMPACTION", "not supported by TidalMQ"),
        (True, {}, "+reserve.time=abc", "not a number"),
        (True, {}, "+reserve.time=-2", "not in range"),
    ]
    for create, current, text, why in refusals:
        with pytest.raises(TopicAttributeError, match=why):
            alter(create, current, text)


def test_topic_type_defaults_to_normal() -> None:
    assert topic_message_type({}) == T.NORMAL and topic_message_type(None) == T.NORMAL
    assert topic_message_type({"message.type": "FIFO"}) == T.FIFO
    assert topic_message_type({"message.type": "garbage"}) == T.UNSPECIFIED


def test_message_type_from_properties() -> None:
    assert message_type_of({}) == T.NORMAL
    assert message_type_of({"TRAN_MSG": "true", "DELAY": "3"}) == T.TRANSACTION  # RocketMQ's precedence
    assert message_type_of({"TRAN_MSG": "false"}) == T.NORMAL
    for name in ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"):
        assert message_type_of({name: "5", "__SHARDINGKEY": "g"}) == T.DELAY
    assert message_type_of({"__SHARDINGKEY": "g"}) == T.FIFO
    # RocketMQ 5.4's priority comes after the other kinds: a delayed, FIFO or transactional message with a
    # priority keeps its own type; any value makes the message PRIORITY, as the property's presence does there
    assert message_type_of({"_SYS_MSG_PRIORITY_": "3"}) == T.PRIORITY
    assert message_type_of({"_SYS_MSG_PRIORITY_": "x"}) == T.PRIORITY
    assert message_type_of({"_SYS_MSG_PRIORITY_": "3", "__SHARDINGKEY": "g"}) == T.FIFO
    assert message_type_of({"_SYS_MSG_PRIORITY_": "3", "TIMER_DELAY_SEC": "5"}) == T.DELAY
    assert message_type_of({"_SYS_MSG_PRIORITY_": "3", "TRAN_MSG": "true"}) == T.TRANSACTION


def test_priority_value_and_its_queue() -> None:
    """Message.getPriority (NumberUtils.toInt, -1 when not an int) and the queue min(priority, N - 1)."""
    assert [priority_of(v) for v in (None, "0", "7", "+7", "-1", "x", "1.5", " 3", "2147483647", "2147483648")] == [
        -1, 0, 7, 7, -1, -1, -1, -1, 2147483647, -1]
    assert [priority_queue(p, 4) for p in (0, 1, 3, 4, 100)] == [0, 1, 3, 3, 3]
    assert check_messages("Tp", T.PRIORITY, ["UNIQ_KEY\x01A\x02_SYS_MSG_PRIORITY_\x012\x02"]) is None
    assert "actual type is PRIORITY" in (check_messages("Tp", T.NORMAL, ["_SYS_MSG_PRIORITY_\x012\x02"]) or "")
    assert "actual type is NORMAL" in (check_messages("Tp", T.PRIORITY, ["UNIQ_KEY\x01A\x02"]) or "")


def test_group_attribute_priority_factor() -> None:
    """SubscriptionGroupAttributes.PRIORITY_FACTOR_ATTRIBUTE: 0..100, changeable, default 100."""
    G = GROUP_ATTRIBUTES
    assert alter_attributes(True, {}, {"+priority.factor": "50"}, G) == {"priority.factor": "50"}
    assert alter_attributes(False, {"priority.factor": "50"}, {"+priority.factor": "0"}, G) == {"priority.factor": "0"}
    assert alter_attributes(False, {"priority.factor": "50"}, {"-priority.factor": ""}, G) == {}
    for bad, why in (({"+priority.factor": "101"}, "not in range"), ({"+priority.factor": "x"}, "not a number"),
                     ({"+message.type": "FIFO"}, "unsupported key")):
        with pytest.raises(TopicAttributeError, match=why):
            alter_attributes(True, {}, bad, G)
    assert [priority_factor(a) for a in (None, {}, {"priority.factor": "0"}, {"priority.factor": "x"})] == [
        100, 100, 0, 100]


def test_every_pairing_of_topic_and_message_type() -> None:
    message_types = (T.NORMAL, T.FIFO, T.DELAY, T.TRANSACTION, T.PRIORITY)
    for topic_type in T:
        for msg_type in message_types:
            remark = check_message_type("Tp", topic_type, msg_type)
            accepted = topic_type in (msg_type, T.MIXED)
            assert (remark is None) == accepted, (topic_type, msg_type)
            if not accepted:
                assert remark == (f"TopicMessageType validate failed, the expected type is {topic_type.value}, "
                                  f"but actual type is {msg_type.value} (topic Tp)")


def test_check_messages_reads_encoded_properties_and_skips_what_rocketmq_skips() -> None:
    delay = "UNIQ_KEY\x01A\x02TIMER_DELAY_SEC\x0130\x02"
    normal = "UNIQ_KEY\x01B\x02MY_DELAY\x011\x02"  # a user property ending in DELAY is no delay
    assert check_messages("Tp", T.DELAY, [delay]) is None
    assert check_messages("Tp", T.NORMAL, [normal]) is None
    assert "actual type is DELAY" in (check_messages("Tp", T.NORMAL, [normal, delay]) or "")
    assert check_messages("%RETRY%g", T.NORMAL, [delay]) is None
    assert check_messages("Tp", T.NORMAL, [delay + "TRANSFER_FLAG\x01true\x02"]) is None
    assert check_messages("Tp", T.MIXED, [delay, normal]) is None


def test_recall_handle_round_trip() -> None:
    h = RecallHandle("TopicA", "broker-a", "1700000000123", "7F000001ABCD")
    text = h.encode()
    assert base64.urlsafe_b64decode(text) == b"v1 TopicA broker-a 1700000000123 7F000001ABCD"
    assert decode_recall_handle(text) == h and decode_recall_handle(text).deliver_ms == 1700000000123
    for bad in ("", "not base64!", base64.urlsafe_b64encode(b"v2 a b 1 c").decode(),
                base64.urlsafe_b64encode(b"v1 a b 1").decode()):
        with pytest.raises(RecallHandleError, match="recall handle is invalid"):
            decode_recall_handle(bad)


def test_recall_handle_with_a_property_separator_is_invalid() -> None:
    # its message id becomes a TIMER_DEL_UNIQKEY value: "\x02DELAY\x011" would set a delay level
    for inner in ("ID\x02DELAY\x011", "ID\x01x"):
        text = RecallHandle("T", "b", "1700000000123", inner).encode()
        with pytest.raises(RecallHandleError):
            decode_recall_handle(text)


def test_cli_attr_flags() -> None:
    assert attribute_modification("message.type=DELAY,-reserve.time") == "+message.type=DELAY,-reserve.time"
    assert attribute_modification("+message.type=FIFO") == "+message.type=FIFO"


def test_recall_needs_pub_on_its_topic_under_acl() -> None:
    cmd = RemotingCommand(code=RC.RECALL_MESSAGE, ext_fields={"topic": "T", "recallHandle": "x", "producerGroup": "pg"})
    assert request_resources(cmd) == {"T": PUB}
