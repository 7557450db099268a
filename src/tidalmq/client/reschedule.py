"""RESCHEDULE_MESSAGE from the client side (``Producer.reschedule``, ``Admin.reschedule``): a pending scheduled
message (a timer message or a delay-level one) delivered at another time, asked of each master of its topic
until the one holding it answers (docs/scheduled-delivery.md, "Reschedule")."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tidalmq.client.codec import TopicRoute
from tidalmq.client.errors import MQBrokerError, ValidationError
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh


@dataclass(frozen=True)
class RescheduleResult:
    msg_id: str  # the message's id (UNIQ_KEY), unchanged
    broker_name: str
    deliver_time_ms: int  # when it will be delivered now
    previous_deliver_time_ms: int  # when it would have been


def deliver_time(deliver_time_ms: int | None, delay_ms: int | None) -> int:
    """The absolute time asked for: ``deliver_time_ms``, or now + ``delay_ms`` (0: now)."""
    if (deliver_time_ms is None) == (delay_ms is None):
        raise ValidationError("reschedule needs deliver_time_ms or delay_ms, one of them")
    if delay_ms is not None:
        if delay_ms < 0:
            raise ValidationError(f"delay_ms must not be negative, got {delay_ms}")
        return int(time.time() * 1000) + delay_ms
    assert deliver_time_ms is not None
    if deliver_time_ms < 0:
        raise ValidationError(f"deliver_time_ms must not be negative, got {deliver_time_ms}")
    return deliver_time_ms


def masters(route: TopicRoute) -> list[tuple[str, str]]:
    """(broker name, master address) of each broker of a topic's route that has a master."""
    return [(name, addr) for name in sorted(route.broker_addrs) if (addr := route.master_addr(name))]


async def reschedule(invoke: Callable[[str, RemotingCommand], Awaitable[RemotingCommand]],
                     masters: Sequence[tuple[str, str]], topic: str, msg_id: str | None, key: str | None,
                     deliver_time_ms: int, group: str) -> RescheduleResult:
    """Ask each (broker name, master address) in turn; the first that holds the message answers. MQBrokerError
    with the last refusal (QUERY_NOT_FOUND when none holds it pending). Answers: SUCCESS, QUERY_NOT_FOUND
    (unknown, delivered, cancelled, due too soon), MESSAGE_ILLEGAL (a key naming several, beyond the max delay)."""
    if bool(msg_id) == bool(key):
        raise ValidationError("reschedule needs the message id or a key, one of them")
    header = bh.RescheduleMessageRequestHeader(topic=topic, producer_group=group, msg_id=msg_id or None,
                                               key=key or None, deliver_time_ms=deliver_time_ms)
    last: MQBrokerError | None = None
    for name, addr in masters:
        resp = await invoke(addr, RemotingCommand(code=RequestCode.RESCHEDULE_MESSAGE, ext_fields=header.to_ext()))
        if resp.code == ResponseCode.SUCCESS:
            h = bh.RescheduleMessageResponseHeader.parse(resp.ext_fields)
            return RescheduleResult(h.msg_id or msg_id or "", name, h.deliver_time_ms or deliver_time_ms,
                                    h.previous_deliver_time_ms or 0)
        last = MQBrokerError(resp.code, resp.remark, addr)
        if resp.code != ResponseCode.QUERY_NOT_FOUND:
            raise last  # bad input, or this broker cannot: asking another would not help
    raise last or MQBrokerError(ResponseCode.QUERY_NOT_FOUND, f"topic {topic} has no master broker")
