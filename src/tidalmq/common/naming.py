"""Topic and group naming rules (RocketMQ's TopicValidator and Validators)."""

from __future__ import annotations

import re

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

# Topics a client may not send to directly (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC}
)
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC_KEY_TOPIC, SELF_TEST_TOPIC}

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class NameError_(ValueError):
    """An illegal topic or group name; the message says what is wrong."""


def check_topic(topic: str | None) -> None:
    """Raise ``NameError_`` if ``topic`` is not a legal RocketMQ topic name."""
    if not topic or not topic.strip():
        raise NameError_("the specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise NameError_(f"the specified topic is longer than topic max length {TOPIC_MAX_LENGTH}")
    if not _VALID.match(topic):
        raise NameError_(f"the specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")


def check_topic_sendable(topic: str) -> None:
    """Legal name and not a system topic reserved to the broker."""
    check_topic(topic)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise NameError_(f"Sending message to topic[{topic}] is forbidden.")


def check_group(group: str | None) -> None:
    if not group or not group.strip():
        raise NameError_("the specified group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise NameError_(f"the specified group is longer than group max length {GROUP_MAX_LENGTH}")
    if not _VALID.match(group):
        raise NameError_(f"the specified group[{group}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)
