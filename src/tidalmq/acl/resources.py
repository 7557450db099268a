"""Which topics and groups a request touches, and how (PlainAccessResource.parse), pure.

Groups appear as their retry topic (``%RETRY%group``), as RocketMQ keys them. Which fields name them, and
the access each needs, is each request's declaration (remoting/protocol/requests.py, its header's
*subject* fields): the ACL reads no field name of its own. Requests of other codes touch no resource: any known account may make them, unless the
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
from tidalmq.remoting.protocol.header import Access, Header, Kind
from tidalmq.remoting.protocol.requests import REQUESTS, Acl, Request, form_of
from tidalmq.remoting.protocol.requests import forms as forms_of


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


def _subjects(request: Request[Header]) -> tuple[tuple[tuple[str, Kind, Access], ...], ...]:
    """Per spelling the request may come in (requests.forms, the only one for most codes), its header's
    subject fields: (key, kind, access)."""
    return tuple(tuple((f.name, f.kind, f.subject) for f in request.header.FORMS[form] if f.subject is not None)
                 for form in forms_of(request.code))


# Per code, per spelling of its header, the fields its resources are read from: the declaration's
# subject fields (remoting/protocol/requests.py), the very declaration the validation reads and the
# processors' parsed headers come from. Codes without any touch no resource; HEART_BEAT and
# BATCH_ACK_MESSAGE read their bodies (_BODY_READS).
_SUBJECTS: dict[int, tuple[tuple[tuple[str, Kind, Access], ...], ...]] = {
    code: _subjects(r) for code, r in REQUESTS.items() if r.acl is Acl.SUBJECTS
}
# The codes of one spelling, and their fields' names: judge_many's inline path reads a one-field key
# itself. A code of two spellings is not listed: its key says which spelling it came in (resource_key).
RESOURCE_FIELDS: dict[int, tuple[str, ...]] = {
    code: tuple(name for name, _, _ in forms[0]) for code, forms in _SUBJECTS.items() if len(forms) == 1
}
# Codes whose resources are read from the body: never remembered (the body changes with every request).
_BODY_READS = frozenset(code for code, r in REQUESTS.items() if r.acl is Acl.BODY)
_HEART_BEAT, _BATCH_ACK = int(RC.HEART_BEAT), int(RC.BATCH_ACK_MESSAGE)


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
        return (code, *[ext.get(name) for name, _, _ in fields])
    form = form_of(code, ext)
    return (code, form, *[ext.get(name) for name, _, _ in forms[form]])


def request_resources(cmd: RemotingCommand) -> dict[str, int]:
    """Resource (topic, or %RETRY%group) -> the permission the request needs on it."""
    code = cmd.code
    forms = _SUBJECTS.get(code)
    if forms is None:
        if code == _HEART_BEAT:
            return _heartbeat(cmd.body)
        if code == _BATCH_ACK:
            return _batch_ack(cmd.body)
        return {}
    ext = cmd.ext_fields
    fields = forms[form_of(code, ext)] if len(forms) > 1 else forms[0]
    out: dict[str, int] = {}
    for name, kind, access in fields:
        value = ext.get(name)
        if kind is Kind.GROUP:
            if value:
                out[retry_topic(value)] = SUB
        elif access is Access.PUB:
            out.update(_send(value))
        elif value:
            out[value] = SUB
    return out
