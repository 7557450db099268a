"""Which topics and groups a request touches, and how (PlainAccessResource.parse), pure.

Groups appear as their retry topic (``%RETRY%group``), as RocketMQ keys them. Which fields name them is
``remoting.request_check``'s declaration of each header (its *subject* fields): the ACL reads no field
name of its own. Requests of other codes touch no resource: any known account may make them, unless the
code needs an admin.
"""

from __future__ import annotations

from typing import Any

from tidalmq.acl.permission import PUB, SUB
from tidalmq.common import fastjson
from tidalmq.common.log_limit import short_error
from tidalmq.common.naming import RETRY_GROUP_TOPIC_PREFIX, retry_topic
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.request_check import HEADER_FORMS, Field, Kind, form_of


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
    except (ValueError, AttributeError, TypeError, RecursionError) as e:
        raise ResourceError(f"the heartbeat body cannot be read: {short_error(e)}") from None


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
    except (ValueError, AttributeError, TypeError, RecursionError) as e:
        raise ResourceError(f"the batch ack body cannot be read: {short_error(e)}") from None


# Codes whose subject topic is published to (PUB; a %RETRY% topic: SUB on its group). A recall takes back
# what was published: PUB, as RocketMQ's @RocketMQAction on it.
_PUBLISHING = frozenset(int(c) for c in (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE,
                                         RC.RECALL_MESSAGE))


def _subjects(fields: tuple[Field, ...]) -> tuple[tuple[str, Kind], ...]:
    return tuple((f.name, f.kind) for f in fields if f.subject)


# Per code, per spelling of its header, the fields its resources are read from: request_check's subject
# fields, the very declaration the validation reads and the send processor takes its names from
# (tests/acl/test_units.py::test_the_acl_reads_what_each_processor_reads). Codes without any touch no
# resource; HEART_BEAT and BATCH_ACK_MESSAGE read their bodies (_BODY_READS).
_SUBJECTS: dict[int, tuple[tuple[tuple[str, Kind], ...], ...]] = {
    code: tuple(_subjects(fields) for fields in forms)
    for code, forms in HEADER_FORMS.items() if any(_subjects(fields) for fields in forms)
}
# The codes of one spelling, and their fields' names: judge_many's inline path reads a one-field key
# itself. A code of two spellings is not listed: its key says which spelling it came in (resource_key).
RESOURCE_FIELDS: dict[int, tuple[str, ...]] = {
    code: tuple(name for name, _ in forms[0]) for code, forms in _SUBJECTS.items() if len(forms) == 1
}
# Codes whose resources are read from the body: never remembered (the body changes with every request).
_BODY_READS = frozenset((int(RC.HEART_BEAT), int(RC.BATCH_ACK_MESSAGE)))


def resource_key(cmd: RemotingCommand) -> tuple[int | str | None, ...] | None:
    """What ``request_resources(cmd)`` depends on, hashable: two requests with equal keys touch the same
    resources the same way, so a decision about one holds for the other. None for a heartbeat or a batch
    ack (their resources are in their bodies). A code of two spellings keys on the spelling too: its
    fields' values alone would not say which field they came from."""
    code = cmd.code
    forms = _SUBJECTS.get(code)
    if forms is None:
        return None if code in _BODY_READS else (code,)
    ext = cmd.ext_fields
    if len(forms) == 1:
        fields = forms[0]
        if len(fields) == 1:
            return code, ext.get(fields[0][0])
        return (code, *[ext.get(name) for name, _ in fields])
    form = form_of(code, ext)
    return (code, form, *[ext.get(name) for name, _ in forms[form]])


def request_resources(cmd: RemotingCommand) -> dict[str, int]:
    """Resource (topic, or %RETRY%group) -> the permission the request needs on it."""
    code = cmd.code
    forms = _SUBJECTS.get(code)
    if forms is None:
        if code == RC.HEART_BEAT:
            return _heartbeat(cmd.body)
        if code == RC.BATCH_ACK_MESSAGE:
            return _batch_ack(cmd.body)
        return {}
    ext = cmd.ext_fields
    fields = forms[form_of(code, ext)] if len(forms) > 1 else forms[0]
    out: dict[str, int] = {}
    for name, kind in fields:
        value = ext.get(name)
        if kind is Kind.GROUP:
            if value:
                out[retry_topic(value)] = SUB
        elif code in _PUBLISHING:
            out.update(_send(value))
        elif value:
            out[value] = SUB
    return out
