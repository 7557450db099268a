"""Broadcasting with the official client: every consumer of the group gets every message, and a
failed message is not retried (RocketMQ's rule for broadcasting)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat.harness import create_topic, msg, send_acknowledged, uniq, wait_route
from tests.support import Standalone

pytestmark = pytest.mark.compat


def test_broadcast_failures_are_not_retried(standalone: Standalone, agents: Any) -> None:
    s = standalone
    topic, group = uniq("BcastF"), uniq("BcastFG")
    create_topic(s.namesrv_addr, topic, queues=2)
    wait_route(s.namesrv_addr, topic)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    consumers = []
    for name in ("b1", "b2"):
        c = agents.new(name)
        c.call("consumer_start", cid=name, group=group, topic=topic, namesrv=s.namesrv_addr, model="BROADCASTING",
               fail_once_keys=["fail-me"])
        consumers.append(c)
    # Broadcasting consumers start at each queue's end: send markers until both are listening.
    for rnd in range(40):
        send_acknowledged(p, mode="orderly", messages=[msg(topic, "m", keys=f"mark-{rnd}-{q}", arg=q) for q in range(2)])
        if all(c.holds_within(lambda c=c, r=rnd: {f"mark-{r}-0", f"mark-{r}-1"} <= {m["keys"] for m in c.messages()},
                              2, "markers") for c in consumers):
            break
    else:
        raise AssertionError("broadcasting consumers never both listened")
    sent = p.call("send", mode="sync", messages=[msg(topic, "x", keys="fail-me"), msg(topic, "y", keys="fine")])
    assert all(r["status"] == "OK" for r in sent)
    for c in consumers:
        c.wait_messages(lambda ms: {"fail-me", "fine"} <= {m["keys"] for m in ms}, 20, "both messages")
    for c in consumers:
        c.settle(quiet=2.5, limit=6)  # a retry would come back within a delay level (1 s here at the least)
        failed = [m for m in c.messages() if m["keys"] == "fail-me"]
        assert len(failed) == 1 and failed[0]["failed"], failed
    # Nothing was sent back: the group's retry queue holds no message.
    import asyncio

    from tidalmq.remoting.codes import RequestCode
    from tidalmq.remoting.command import RemotingCommand
    from tidalmq.remoting.transport import RemotingClient

    async def retry_max_offset() -> int:
        c = RemotingClient()
        try:
            r = await c.invoke(s.broker_addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={
                "topic": f"%RETRY%{group}", "queueId": "0"}), 5)
            return int(r.ext_fields.get("offset", "0"))
        finally:
            await c.close()

    assert asyncio.run(asyncio.wait_for(retry_max_offset(), 10)) == 0
