"""Requests checked where they enter, before any processor runs.

Each request code that carries a name or a number declares its ext fields once, with their kind, as
RocketMQ's ``CommandCustomHeader`` classes declare them (``String`` names, ``Integer``/``Long``
numbers, ``@CFNotNull``); JSON bodies that carry names (heartbeats, lock sets, a broker's topic table,
subscription groups) have a checker each. A request that fails gets SYSTEM_ERROR with a remark saying
which field and why, as RocketMQ answers a header it cannot decode or a topic TopicValidator refuses;
the processor never sees it. Names are judged by ``common.naming`` alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, NamedTuple, cast

from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import Connection, Dispatcher, RemotingServer, Reply

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


class Kind(Enum):
    TOPIC = "topic"  # a topic a request names: a legal topic or a group's %RETRY% / %DLQ% topic
    GROUP = "group"
    BROKER = "brokerName"
    CLUSTER = "clusterName"
    ADDR = "address"
    CONFIG_KEY = "config key"
    INT32 = "int"  # Java Integer / int
    INT64 = "long"  # Java Long / long
    PERM = "perm"  # PermName bits, 0..7
    TEXT = "text"  # any string, e.g. a pop receipt handle (extraInfo): only required to be present


class RequestError(ValueError):
    """A request refused before its processor: the message is the remark."""


_NAME_CHECKS: dict[Kind, Callable[[object], None]] = {
    Kind.TOPIC: nm.check_any_topic,
    Kind.GROUP: nm.check_group,
    Kind.BROKER: nm.check_broker_name,
    Kind.CLUSTER: nm.check_cluster_name,
    Kind.ADDR: nm.check_addr,
    Kind.CONFIG_KEY: nm.check_config_key,
}
_RANGES = {Kind.INT32: (INT32_MIN, INT32_MAX), Kind.INT64: (INT64_MIN, INT64_MAX), Kind.PERM: (0, nm.PERM_MAX)}


def parse_number(field: str, kind: Kind, value: object) -> int:
    """``value`` as Java's Integer.parseInt / Long.parseLong reads it, refused out of the type's range."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RequestError(f"the field <{field}> must be a number, got {type(value).__name__}")
    if isinstance(value, str):
        if len(value) > 24 or _JAVA_INTEGER.fullmatch(value) is None:
            raise RequestError(f"the field <{field}> is not a {kind.value}: {value[:32]!r}")
        value = int(value)
    lo, hi = _RANGES[kind]
    if not lo <= value <= hi:
        raise RequestError(f"the field <{field}> is out of range for a {kind.value}: {value} (allowed {lo}..{hi})")
    return value


# Fast paths, because every send passes here: a run of at most this many ASCII digits is within the
# type's range whatever it is, and a name already found legal is remembered (a broker sees few names).
_SAFE_DIGITS = {Kind.INT32: 9, Kind.INT64: 18}
_KNOWN_NAMES: dict[Kind, set[str]] = {kind: set() for kind in _NAME_CHECKS}
_KNOWN_NAMES_MAX = 8192


def check_value(field: str, kind: Kind, value: object) -> None:
    if kind is Kind.TEXT:
        if not isinstance(value, str):
            raise RequestError(f"the field <{field}> must be a string, got {type(value).__name__}")
        return
    if kind in _RANGES:
        if (isinstance(value, str) and len(value) <= _SAFE_DIGITS.get(kind, 0)
                and value.isascii() and value.isdigit()):
            return
        parse_number(field, kind, value)
        return
    known = _KNOWN_NAMES[kind]
    if isinstance(value, str) and value in known:  # JSON bodies may hold lists or objects: unhashable
        return
    try:
        _NAME_CHECKS[kind](value)
    except nm.NameError_ as e:
        raise RequestError(f"{e} (field <{field}>)") from None
    if len(known) >= _KNOWN_NAMES_MAX:
        known.clear()
    known.add(cast(str, value))  # the name check refuses anything but a str


# The ext fields each request code carries: (name, kind, required, subject). Optional fields sent empty
# count as absent (the C++ client writes empty strings for fields it has no value for). A *subject* field
# names the topic or the group the request acts on: the ACL checks those and no others
# (acl/resources.py), as RocketMQ 5 marks them @RocketMQResource on its header classes. Declared here once,
# they are what the validation, the ACL and the processors of the send family all read.
class Field(NamedTuple):
    name: str
    kind: Kind
    required: bool
    subject: bool = False


_T, _G, _I, _L = Kind.TOPIC, Kind.GROUP, Kind.INT32, Kind.INT64


class SendHeaderKeys(NamedTuple):
    """The extFields names of SendMessageRequestHeader."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: str
    queue_id: str
    sys_flag: str
    born_timestamp: str
    flag: str
    properties: str
    reconsume_times: str
    unit_mode: str
    max_reconsume_times: str
    batch: str
    broker_name: str


SEND_HEADER = SendHeaderKeys("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                             "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes",
                             "batch", "brokerName")
# SEND_MESSAGE_V2 (SendMessageRequestHeaderV2) abbreviates the same fields to single letters.
SEND_HEADER_V2 = SendHeaderKeys("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n")
# The spellings each send code comes in, in the order form_of numbers them: SEND_BATCH_MESSAGE comes with
# the full names from the Java client and with the V2 letters from the C++ client.
SEND_FORMS: dict[int, tuple[SendHeaderKeys, ...]] = {
    int(RC.SEND_MESSAGE): (SEND_HEADER,),
    int(RC.SEND_MESSAGE_V2): (SEND_HEADER_V2,),
    int(RC.SEND_BATCH_MESSAGE): (SEND_HEADER, SEND_HEADER_V2),
}
_SEND_BATCH = int(RC.SEND_BATCH_MESSAGE)


def form_of(code: int, ext: Mapping[str, str]) -> int:
    """Which of its header's spellings (HEADER_FORMS[code]) a request uses: 1 for a batch that carries the
    V2 letters' topic field, else 0. The one place that says so: the validation, the ACL and the send
    processor all ask here."""
    return 1 if code == _SEND_BATCH and SEND_HEADER_V2.topic in ext else 0


def send_header_keys(code: int, ext: Mapping[str, str]) -> SendHeaderKeys:
    """The names a send request of ``code`` uses for its fields."""
    return SEND_FORMS[code][form_of(code, ext)]


def _send_fields(k: SendHeaderKeys) -> tuple[Field, ...]:
    return (Field(k.producer_group, _G, False), Field(k.topic, _T, True, True), Field(k.default_topic, _T, False),
            Field(k.default_topic_queue_nums, _I, False), Field(k.queue_id, _I, False), Field(k.sys_flag, _I, False),
            Field(k.born_timestamp, _L, False), Field(k.flag, _I, False), Field(k.reconsume_times, _I, False),
            Field(k.max_reconsume_times, _I, False))


_TOPIC_QUEUE = (("topic", _T, True), ("queueId", _I, True))
# The subjects of a consumer's request on a queue: its group and the topic.
_GROUP_TOPIC_QUEUE = (("consumerGroup", _G, True, True), ("topic", _T, True, True), ("queueId", _I, True))
_BROKER = (("brokerName", Kind.BROKER, True), ("brokerAddr", Kind.ADDR, True), ("clusterName", Kind.CLUSTER, True))
# UnRegisterBroker / QueryDataVersion headers: brokerId @CFNotNull, as RocketMQ declares it (a registration
# without one registers brokerId 0, as before).
_BROKER_ID = (*_BROKER, ("brokerId", _L, True))

_DECLARED: dict[int, tuple[tuple[Any, ...], ...]] = {
    RC.PULL_MESSAGE: (*_GROUP_TOPIC_QUEUE, ("queueOffset", _L, True),
                      ("maxMsgNums", _I, False), ("sysFlag", _I, False), ("commitOffset", _L, False),
                      ("suspendTimeoutMillis", _L, False), ("subVersion", _L, False), ("maxMsgBytes", _I, False)),
    RC.CONSUMER_SEND_MSG_BACK: (("group", _G, True, True), ("offset", _L, True), ("delayLevel", _I, False),
                                ("originTopic", _T, False), ("maxReconsumeTimes", _I, False)),
    RC.QUERY_CONSUMER_OFFSET: (("consumerGroup", _G, True), *_TOPIC_QUEUE),
    RC.UPDATE_CONSUMER_OFFSET: (*_GROUP_TOPIC_QUEUE, ("commitOffset", _L, True)),
    RC.GET_MAX_OFFSET: _TOPIC_QUEUE,
    RC.GET_MIN_OFFSET: _TOPIC_QUEUE,
    RC.GET_EARLIEST_MSG_STORETIME: _TOPIC_QUEUE,
    RC.SEARCH_OFFSET_BY_TIMESTAMP: (*_TOPIC_QUEUE, ("timestamp", _L, True)),
    RC.VIEW_MESSAGE_BY_ID: (("offset", _L, False),),
    RC.QUERY_MESSAGE: (("topic", _T, True, True), ("maxNum", _I, True), ("beginTimestamp", _L, True),
                       ("endTimestamp", _L, True)),
    RC.GET_CONSUMER_LIST_BY_GROUP: (("consumerGroup", _G, True, True),),
    RC.UNREGISTER_CLIENT: (("producerGroup", _G, False), ("consumerGroup", _G, False, True)),
    RC.UPDATE_AND_CREATE_TOPIC: (("topic", _T, True), ("defaultTopic", _T, False), ("readQueueNums", _I, False),
                                 ("writeQueueNums", _I, False), ("perm", Kind.PERM, False),
                                 ("topicSysFlag", _I, False)),
    RC.DELETE_TOPIC_IN_BROKER: (("topic", _T, True),),
    RC.GET_TOPIC_CONFIG: (("topic", _T, True),),
    RC.DELETE_SUBSCRIPTIONGROUP: (("groupName", _G, True),),
    RC.GET_CONSUMER_CONNECTION_LIST: (("consumerGroup", _G, True),),
    RC.GET_PRODUCER_CONNECTION_LIST: (("producerGroup", _G, True),),
    RC.QUERY_TOPIC_CONSUME_BY_WHO: (("topic", _T, True),),
    RC.QUERY_TOPICS_BY_CONSUMER: (("group", _G, True),),
    RC.GET_CONSUME_STATS: (("consumerGroup", _G, True), ("topic", _T, False)),
    RC.GET_TOPIC_STATS_INFO: (("topic", _T, True),),
    RC.VIEW_BROKER_STATS_DATA: (("statsName", Kind.TEXT, True), ("statsKey", Kind.TEXT, True)),
    RC.GET_CONSUMER_RUNNING_INFO: (("consumerGroup", _G, True), ("clientId", Kind.TEXT, True)),
    RC.QUERY_CONSUME_QUEUE: (*_TOPIC_QUEUE, ("index", _L, False), ("count", _I, False),
                             ("consumerGroup", _G, False)),
    RC.INVOKE_BROKER_TO_RESET_OFFSET: (("topic", _T, False), ("group", _G, True), ("timestamp", _L, False)),
    RC.END_TRANSACTION: (("producerGroup", _G, True), ("tranStateTableOffset", _L, True),
                         ("commitLogOffset", _L, True), ("commitOrRollback", _I, True)),
    # Pop (RocketMQ 5): PopMessageRequestHeader, AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader,
    # NotificationRequestHeader. queueId -1 pops every queue.
    RC.POP_MESSAGE: (*_GROUP_TOPIC_QUEUE, ("maxMsgNums", _I, True),
                     ("invisibleTime", _L, True), ("pollTime", _L, True), ("bornTime", _L, True),
                     ("initMode", _I, True)),
    RC.ACK_MESSAGE: (*_GROUP_TOPIC_QUEUE, ("extraInfo", Kind.TEXT, True),
                     ("offset", _L, True)),
    RC.CHANGE_MESSAGE_INVISIBLETIME: (*_GROUP_TOPIC_QUEUE, ("extraInfo", Kind.TEXT, True),
                                      ("offset", _L, True), ("invisibleTime", _L, True)),
    RC.NOTIFICATION: (*_GROUP_TOPIC_QUEUE, ("pollTime", _L, True), ("bornTime", _L, True)),
    # RecallMessageRequestHeader (RocketMQ 5.3)
    RC.RECALL_MESSAGE: (("topic", _T, True, True), ("producerGroup", _G, False), ("recallHandle", Kind.TEXT, True)),
    # NameServer
    RC.REGISTER_BROKER: (*_BROKER, ("brokerId", _L, False), ("haServerAddr", Kind.ADDR, False), ("heartbeatTimeoutMillis", _L, False),
                         ("bodyCrc32", _I, False)),
    RC.UNREGISTER_BROKER: _BROKER_ID,
    RC.QUERY_DATA_VERSION: _BROKER_ID,
    RC.GET_ROUTEINFO_BY_TOPIC: (("topic", _T, True),),
    RC.GET_TOPICS_BY_CLUSTER: (("cluster", Kind.CLUSTER, True),),
    RC.DELETE_TOPIC_IN_NAMESRV: (("topic", _T, True), ("clusterName", Kind.CLUSTER, False)),
    RC.PUT_KV_CONFIG: (("namespace", Kind.CONFIG_KEY, True), ("key", Kind.CONFIG_KEY, True)),
    RC.GET_KV_CONFIG: (("namespace", Kind.CONFIG_KEY, True), ("key", Kind.CONFIG_KEY, True)),
    RC.DELETE_KV_CONFIG: (("namespace", Kind.CONFIG_KEY, True), ("key", Kind.CONFIG_KEY, True)),
    RC.GET_KVLIST_BY_NAMESPACE: (("namespace", Kind.CONFIG_KEY, True),),
}

# Every spelling of each code's header, numbered as form_of numbers them; most codes have one.
HEADER_FORMS: dict[int, tuple[tuple[Field, ...], ...]] = {
    **{code: tuple(_send_fields(k) for k in forms) for code, forms in SEND_FORMS.items()},
    **{int(code): (tuple(Field(*f) for f in fields),) for code, fields in _DECLARED.items()},
}
# Each code's first (for most codes only) spelling.
HEADERS: dict[int, tuple[Field, ...]] = {code: forms[0] for code, forms in HEADER_FORMS.items()}


def header_fields(code: int, ext: Mapping[str, str]) -> tuple[Field, ...]:
    """The fields of the spelling a request uses (empty for a code that declares none)."""
    forms = HEADER_FORMS.get(code)
    if forms is None:
        return ()
    return forms[form_of(code, ext)] if len(forms) > 1 else forms[0]


# Per request code and spelling, each field with its fast-path data resolved once: the per-request loop
# below then touches no Enum (Enum hashing runs Python code) and calls no function for a name it has seen
# or a short run of digits.
_Compiled = tuple[str, Kind, bool, int, "set[str] | None"]
_COMPILED: dict[int, tuple[tuple[_Compiled, ...], ...]] = {
    code: tuple(tuple((f.name, f.kind, f.required, _SAFE_DIGITS.get(f.kind, 0), _KNOWN_NAMES.get(f.kind))
                      for f in fields) for fields in forms)
    for code, forms in HEADER_FORMS.items()
}
_NO_FORMS: tuple[tuple[_Compiled, ...], ...] = ((),)


def check_headers(code: int, ext: dict[str, str]) -> None:
    forms = _COMPILED.get(code, _NO_FORMS)
    for name, kind, required, safe_digits, known in forms[form_of(code, ext)] if len(forms) > 1 else forms[0]:
        value = ext.get(name)
        if value is None or (value == "" and not required):
            if required:
                raise RequestError(f"the custom field <{name}> is null")
            continue
        if known is not None:
            if value in known:
                continue
        elif (safe_digits and value.__class__ is str and len(value) <= safe_digits and value.isascii()
              and value.isdigit()):
            continue
        check_value(name, kind, value)


# JSON bodies ----------------------------------------------------------------------------------------
def _json_object(body: bytes) -> dict[str, Any]:
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


def _heartbeat(obj: dict[str, Any]) -> None:
    for consumer in _objects(obj, "consumerDataSet"):
        _field(consumer, "consumerDataSet", "groupName", _G)
        for sub in _objects(consumer, "subscriptionDataSet"):
            _field(sub, "subscriptionDataSet", "topic", _T)
            _field(sub, "subscriptionDataSet", "subVersion", _L, required=False)
    for producer in _objects(obj, "producerDataSet"):
        _field(producer, "producerDataSet", "groupName", _G)


def _lock_batch(obj: dict[str, Any]) -> None:
    _field(obj, "body", "consumerGroup", _G)
    for mq in _objects(obj, "mqSet"):
        _field(mq, "mqSet", "topic", _T)
        _field(mq, "mqSet", "brokerName", Kind.BROKER)
        _field(mq, "mqSet", "queueId", _I)


def _register_broker(obj: dict[str, Any]) -> None:
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


def _subscription_group(obj: dict[str, Any]) -> None:
    _field(obj, "body", "groupName", _G)
    for name in ("retryQueueNums", "retryMaxTimes", "whichBrokerWhenConsumeSlowly"):
        _field(obj, "body", name, _I, required=False)
    _field(obj, "body", "brokerId", _L, required=False)


def _check_client_config(obj: dict[str, Any]) -> None:
    _field(obj, "body", "group", _G, required=False)
    sub = obj.get("subscriptionData")
    if isinstance(sub, dict):
        _field(sub, "subscriptionData", "topic", _T, required=False)


def _batch_ack(obj: dict[str, Any]) -> None:
    _field(obj, "body", "brokerName", Kind.BROKER, required=False)
    for ack in _objects(obj, "acks"):
        _field(ack, "acks", "c", _G)
        _field(ack, "acks", "t", _T)
        for name in ("q", "rq"):
            _field(ack, "acks", name, _I, required=name == "q")
        for name in ("so", "pt", "it"):
            _field(ack, "acks", name, _L)
        _field(ack, "acks", "b", Kind.TEXT)


BODIES: dict[int, Callable[[dict[str, Any]], None]] = {
    RC.HEART_BEAT: _heartbeat,
    RC.LOCK_BATCH_MQ: _lock_batch,
    RC.UNLOCK_BATCH_MQ: _lock_batch,
    RC.REGISTER_BROKER: _register_broker,
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _subscription_group,
    RC.CHECK_CLIENT_CONFIG: _check_client_config,
    RC.BATCH_ACK_MESSAGE: _batch_ack,
    RC.QUERY_DATA_VERSION: lambda obj: None,  # a DataVersion: a JSON object the NameServer compares whole
}


def check_request(cmd: RemotingCommand) -> str | None:
    """Why ``cmd`` is refused before its processor, or None when its names and numbers are legal."""
    try:
        check_headers(cmd.code, cmd.ext_fields)
        body_check = BODIES.get(cmd.code)
        # A compressed registration body is refused by its processor; nothing to read here.
        if body_check is not None and cmd.ext_fields.get("compressed") != "true":
            body_check(_json_object(cmd.body_bytes()))
    except RequestError as e:
        return str(e)
    return None


def guarded(processor: Dispatcher) -> Dispatcher:
    """``processor`` behind ``check_request``: a refused request is answered SYSTEM_ERROR with the reason."""

    def checked(conn: Connection, cmd: RemotingCommand) -> Reply:
        remark = check_request(cmd)
        if remark is not None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark)
        return processor(conn, cmd)

    return checked


def register_checked(server: RemotingServer, code: int, processor: Dispatcher) -> None:
    """Register ``processor`` for ``code`` behind the checks of this module (every server does)."""
    server.register(code, guarded(processor))
