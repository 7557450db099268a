"""Messages sent by the official RocketMQ 4.x client (rocketmq==0.4.4, in a subprocess agent) consumed
by pop: tags, keys and properties intact, and orderly (sharding-key) sends popped in order per shard."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.compat.harness import (
    ClientAgent,
    create_topic,
    msg,
    require_official_client,
    send_acknowledged,
    uniq,
)
from tests.support import Standalone
from tidalmq.client import MessageExt, PopConsumer

require_official_client()
pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_official_orderly_sends_popped_in_order_with_properties(shared_standalone: Standalone,
                                                                 tmp_path: Path) -> None:
    s = shared_standalone
    topic = uniq("PopOfficial")
    create_topic(s.namesrv_addr, topic, 2)
    shards, per = 2, 5
    producer = ClientAgent("pop-producer", tmp_path)
    try:
        producer.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
        specs = [msg(topic, f"s{sh}-{seq}", tags="TagA", keys=f"s{sh}-{seq}", props={"color": "red"}, arg=sh)
                 for seq in range(per) for sh in range(shards)]
        results = send_acknowledged(producer, mode="orderly", messages=specs)
        assert all(r and r["status"] == "OK" for r in results), results[:3]
    finally:
        producer.close()

    async def body() -> list[MessageExt]:
        got: list[MessageExt] = []
        async with PopConsumer(uniq("CG"), s.namesrv_addr) as c:
            deadline = time.monotonic() + 30
            while len(got) < shards * per:
                assert time.monotonic() < deadline, f"popped {len(got)} of {shards * per}"
                msgs = await c.receive(topic, 1, invisible_time=30.0, order=True, block_timeout=1.0)
                for m in msgs:
                    got.append(m)
                    await c.ack(m)  # the shard's next message only after this ack
        return got

    got = asyncio.run(asyncio.wait_for(body(), 60))
    per_shard: dict[str, list[int]] = defaultdict(list)
    for m in got:
        sh, seq = m.body.decode().split("-")
        assert m.tags == "TagA" and m.keys == [m.body.decode()] and m.properties["color"] == "red"
        per_shard[sh].append(int(seq))
    assert per_shard == {f"s{sh}": list(range(per)) for sh in range(shards)}
