"""Rewind by time, applied to a live official-client consumer without a restart."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.compat.harness import create_topic, msg, sentinels_received, uniq, wait_route, without_sentinels
from tests.support import Standalone
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.compat


def reset(addr: str, group: str, topic: str, timestamp: int) -> RemotingCommand:
    async def go() -> RemotingCommand:
        c = RemotingClient()
        try:
            return await c.invoke(addr, RemotingCommand(code=RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext_fields={
                "topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true"}), 10)
        finally:
            await c.close()

    return asyncio.run(asyncio.wait_for(go(), 20))


def test_rewind_replays_exactly_what_was_stored_after_the_time(standalone: Standalone, agents: Any) -> None:
    s = standalone
    topic, group = uniq("RewindT"), uniq("RewindG")
    create_topic(s.namesrv_addr, topic, queues=2)
    wait_route(s.namesrv_addr, topic)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    c = agents.new("consumer")
    c.call("consumer_start", cid="c", group=group, topic=topic, namesrv=s.namesrv_addr, expr="*")
    before = p.call("send", mode="sync", messages=[msg(topic, f"a{i}", keys=f"a{i}") for i in range(10)])
    time.sleep(0.05)  # store timestamps are in ms: keep the two batches apart by a clear margin
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    after = p.call("send", mode="sync", messages=[msg(topic, f"b{i}", keys=f"b{i}") for i in range(10)])
    assert all(r["status"] == "OK" for r in before + after)
    c.wait_messages(lambda ms: len({m["keys"] for m in ms}) == 20, 30, "all 20 consumed")
    sentinels_received(p, [c], topic, 2)  # stored after the cut: replayed too
    first_round = len(c.messages())

    r = reset(s.broker_addr, group, topic, cut)
    assert r.code == ResponseCode.SUCCESS, r.remark
    table = fastjson.loads(r.body_bytes())["offsetTable"]
    assert sum(e["offset"] for e in table) == 10  # each queue rewound to its first message after the cut

    c.wait_messages(lambda ms: len(ms) >= first_round + 10, 40, "the replay")
    sentinels_received(p, [c], topic, 2)
    replay = without_sentinels(c.messages()[first_round:])
    assert sorted(m["keys"] for m in replay) == sorted(f"b{i}" for i in range(10))


def test_rewind_of_unknown_group_and_to_before_the_oldest(standalone: Standalone, agents: Any) -> None:
    s = standalone
    r = reset(s.broker_addr, "NoSuchGroup", "", 0)
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE and "NoSuchGroup" in (r.remark or "")
    topic, group = uniq("OldT"), uniq("OldG")
    create_topic(s.namesrv_addr, topic, queues=1)
    wait_route(s.namesrv_addr, topic)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    c = agents.new("consumer")
    c.call("consumer_start", cid="c", group=group, topic=topic, namesrv=s.namesrv_addr, expr="*")
    p.call("send", mode="sync", messages=[msg(topic, f"m{i}", keys=f"m{i}") for i in range(3)])
    c.wait_messages(lambda ms: len(ms) >= 3, 30, "3 consumed")
    r = reset(s.broker_addr, group, topic, 1)  # long before anything was stored
    assert r.code == ResponseCode.SUCCESS
    assert "earliest retained message" in (r.remark or "")
    assert [e["offset"] for e in fastjson.loads(r.body_bytes())["offsetTable"]] == [0]
    c.wait_messages(lambda ms: len(ms) >= 6, 40, "the replay from the start")
