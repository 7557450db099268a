"""Naming rules (RocketMQ's TopicValidator and Validators): the one place that decides which topic,
group, broker, cluster and config names are legal.

Topics and groups become ConsumeQueue directory names and keys of the persisted tables, so a name that
passes these checks can never be a path: the characters are a closed set (no ``/``, ``\\``, ``.``, no
control character), every pattern is matched against the whole string (``fullmatch``: a trailing
newline does not slip through as it does with ``^...$``), and lengths are bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

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
# A lite topic's queue is an LMQ (light message queue) named %LMQ%$<parent topic>$<lite topic>
# (RocketMQ's LiteUtil): "$" is in no topic name, so the name splits back without ambiguity.
LMQ_PREFIX = "%LMQ%"
LITE_SEPARATOR = "$"
LITE_QUEUE_PREFIX = LMQ_PREFIX + LITE_SEPARATOR

# Topics a client may not send to directly (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC}
)
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC_KEY_TOPIC, SELF_TEST_TOPIC}

TOPIC_MAX_LENGTH = 127
# RocketMQ allows 255; 248 keeps "%RETRY%" + group within one file name (255 bytes), since the retry
# and dead-letter topics of a group are ConsumeQueue directories.
GROUP_MAX_LENGTH = 255 - len(RETRY_GROUP_TOPIC_PREFIX)
BROKER_NAME_MAX_LENGTH = 127
ADDR_MAX_LENGTH = 255
CONFIG_KEY_MAX_LENGTH = 255
TOPIC_PATTERN = "^[%|a-zA-Z0-9_-]+$"  # as RocketMQ words it in its remarks
_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")
# Broker and cluster names may be host names (brokerName defaults to one): dots allowed, ".." not.
_BROKER_CHARS = re.compile(r"[%|a-zA-Z0-9_.-]+")
# host:port, IPv4, host names and bracketed IPv6.
_ADDR_CHARS = re.compile(r"[a-zA-Z0-9_.:\[\]-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# RocketMQ's proxy (GrpcValidator.validateLiteTopic): letters, digits, "_" and "-", at most maxLiteTopicSize
# (64) bytes.
LITE_TOPIC_PATTERN = "^[a-zA-Z0-9_-]+$"
LITE_TOPIC_MAX_LENGTH = 64
_LITE_CHARS = re.compile(r"[a-zA-Z0-9_-]+")

PERM_MAX = 0x7  # PermName: READ 4 | WRITE 2 | INHERIT 1 (PRIORITY 8 is never stored)


class NameError_(ValueError):
    """An illegal topic or group name; the message says what is wrong."""


def _show(name: str) -> str:
    """A name as a remark shows it: escaped (no control character reaches a log line) and short."""
    shown = name if len(name) <= 64 else name[:64] + "..."
    return shown.encode("unicode_escape").decode("ascii")


def _check(what: str, name: object, chars: re.Pattern[str], max_length: int, allowing: str) -> str:
    if not isinstance(name, str):
        raise NameError_(f"the specified {what} must be a string, got {type(name).__name__}")
    if not name or not name.strip():
        raise NameError_(f"the specified {what} is blank")
    if len(name) > max_length:
        raise NameError_(f"the specified {what} is longer than {what} max length {max_length}")
    if chars.fullmatch(name) is None:
        raise NameError_(f"the specified {what}[{_show(name)}] contains illegal characters, allowing only {allowing}")
    return name


# Topic names that passed check_topic (a pure check of the name): every send checks its topic, on the
# client and again on the broker, and few names recur; a set lookup costs less than the regex.
# Bounded (cleared when full).
_LEGAL_TOPICS: set[str] = set()
LEGAL_TOPICS_MAX = 4096


def check_topic(topic: object) -> None:
    """Raise ``NameError_`` if ``topic`` is not a legal RocketMQ topic name."""
    if topic.__class__ is str and topic in _LEGAL_TOPICS:
        return
    _check("topic", topic, _TOPIC_CHARS, TOPIC_MAX_LENGTH, TOPIC_PATTERN)
    if len(_LEGAL_TOPICS) >= LEGAL_TOPICS_MAX:
        _LEGAL_TOPICS.clear()
    _LEGAL_TOPICS.add(topic)  # type: ignore[arg-type]  # _check passed: a str


def check_topic_sendable(topic: str) -> None:
    """Legal name and not a system topic reserved to the broker."""
    check_topic(topic)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise NameError_(f"Sending message to topic[{topic}] is forbidden.")


def check_group(group: object) -> None:
    _check("group", group, _TOPIC_CHARS, GROUP_MAX_LENGTH, TOPIC_PATTERN)


def check_any_topic(topic: object) -> None:
    """A topic a request may name: a legal topic, a group's retry / dead-letter topic, which is longer
    than TOPIC_MAX_LENGTH when its group is, or a lite topic's queue (``%LMQ%$<parent>$<lite>``)."""
    if isinstance(topic, str):
        if topic.startswith(LITE_QUEUE_PREFIX):
            if parse_lite_queue(topic) is None:
                raise NameError_(f"the specified topic[{_show(topic)}] is not %LMQ%$<topic>$<lite topic> "
                                 f"(lite topic {LITE_TOPIC_PATTERN}, at most {LITE_TOPIC_MAX_LENGTH})")
            return
        for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
            if topic.startswith(prefix) and len(topic) > TOPIC_MAX_LENGTH:
                try:
                    check_group(topic[len(prefix):])
                except NameError_ as e:
                    raise NameError_(f"the specified topic is not {prefix}<group>: {e}") from None
                return
    check_topic(topic)


def check_lite_topic(name: object, max_length: int = LITE_TOPIC_MAX_LENGTH) -> None:
    """A lite topic name (the child of a LITE parent topic): it becomes part of a ConsumeQueue directory
    name, so the same closed character set as topics, without "%" and "|"."""
    _check("lite topic", name, _LITE_CHARS, max_length, LITE_TOPIC_PATTERN)


def lite_queue(parent: str, lite: str) -> str:
    """LiteUtil.toLmqName: ``%LMQ%$<parent>$<lite>``, the queue (ConsumeQueue directory) of a lite topic.
    Only legal names make one."""
    check_topic(parent)
    check_lite_topic(lite)
    return LITE_QUEUE_PREFIX + parent + LITE_SEPARATOR + lite


def parse_lite_queue(name: str) -> tuple[str, str] | None:
    """(parent topic, lite topic) of a lite topic's queue name, or None when ``name`` is not one (or
    either part is not a legal name)."""
    if not isinstance(name, str) or not name.startswith(LITE_QUEUE_PREFIX):
        return None
    parent, sep, lite = name[len(LITE_QUEUE_PREFIX):].partition(LITE_SEPARATOR)
    if not sep or not is_legal(check_topic, parent) or not is_legal(check_lite_topic, lite):
        return None
    return parent, lite


def is_lite_queue(name: str) -> bool:
    return parse_lite_queue(name) is not None


def check_broker_name(name: object) -> None:
    text = _check("brokerName", name, _BROKER_CHARS, BROKER_NAME_MAX_LENGTH, "^[%|a-zA-Z0-9_.-]+$")
    if ".." in text:
        raise NameError_(f"the specified brokerName[{_show(text)}] contains '..'")


def check_cluster_name(name: object) -> None:
    text = _check("clusterName", name, _BROKER_CHARS, BROKER_NAME_MAX_LENGTH, "^[%|a-zA-Z0-9_.-]+$")
    if ".." in text:
        raise NameError_(f"the specified clusterName[{_show(text)}] contains '..'")


def check_addr(addr: object) -> None:
    """A broker or HA address as it is registered and handed to clients in routes (host:port)."""
    text = _check("address", addr, _ADDR_CHARS, ADDR_MAX_LENGTH, "host:port")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise NameError_(f"the specified address[{_show(text)}] is not host:port")


def check_config_key(name: object, what: str = "key") -> None:
    """A NameServer KV config namespace or key: free text, but bounded and free of control characters."""
    if not isinstance(name, str) or not name.strip():
        raise NameError_(f"the specified {what} is blank")
    if len(name) > CONFIG_KEY_MAX_LENGTH:
        raise NameError_(f"the specified {what} is longer than {what} max length {CONFIG_KEY_MAX_LENGTH}")
    if _CONTROL.search(name):
        raise NameError_(f"the specified {what}[{_show(name)}] contains control characters")


def check_perm(perm: int) -> None:
    if not 0 <= perm <= PERM_MAX:
        raise NameError_(f"perm {perm} is illegal: allowing only 0..{PERM_MAX} (READ 4, WRITE 2, INHERIT 1)")


def is_legal(check: Callable[[object], None], name: object) -> bool:
    try:
        check(name)
    except NameError_:
        return False
    return True


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``; only a legal group makes one (it becomes a directory name)."""
    check_group(group)
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    check_group(group)
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)
