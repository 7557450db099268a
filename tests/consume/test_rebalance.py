"""Rebalance with the official client: three consumers share a topic's queues as
AllocateMessageQueueAveragely does; when one dies its queues move to the others and nothing is lost."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.compat.harness import consumer_ids, create_topic, msg, send_acknowledged, uniq, wait_route
from tests.support import Standalone

pytestmark = pytest.mark.compat
QUEUES = 6


def settle_owners(p: Any, consumers: list[Any], topic: str, timeout: float = 60.0) -> dict[int, str]:
    """Send one marker per queue, round after round, until two rounds agree on who owns each queue."""
    deadline = time.monotonic() + timeout
    last: dict[int, str] | None = None
    rnd = 0
    while True:
        keys = [f"mark-{rnd}-{q}" for q in range(QUEUES)]
        send_acknowledged(p, mode="orderly", messages=[msg(topic, k, keys=k, arg=q) for q, k in enumerate(keys)])
        consumers[0].holds_within(lambda ks=keys: set(ks) <= {m["keys"] for c in consumers for m in c.messages()}, 5,
                                  "a round of markers")  # judged below, whether all came or not
        owner: dict[int, list[str]] = {}
        for c in consumers:
            for m in c.messages():
                if m["keys"] in keys:
                    owner.setdefault(m["queue_id"], []).append(c.name)
        flat = {q: v[0] for q, v in owner.items() if len(v) == 1}
        if len(flat) == QUEUES and flat == last:
            return flat
        last = flat if len(flat) == QUEUES else None
        rnd += 1
        if time.monotonic() > deadline:
            raise AssertionError(f"the group never settled: {owner}")


def averagely_ordered(cids: list[str]) -> list[str]:
    """The consumers' names (their instance names) in the order AllocateMessageQueueAveragely deals queues."""
    return [cid.rsplit("@", 1)[1] for cid in sorted(cids)]


def test_three_consumers_share_averagely_and_survive_one_dying(standalone: Standalone, agents: Any) -> None:
    s = standalone
    topic, group = uniq("Rebal"), uniq("RebalG")
    create_topic(s.namesrv_addr, topic, QUEUES)
    wait_route(s.namesrv_addr, topic)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    consumers = []
    for i in (1, 2, 3):
        c = agents.new(f"i{i}")
        c.call("consumer_start", cid=f"i{i}", group=group, topic=topic, namesrv=s.namesrv_addr, instance=f"i{i}")
        consumers.append(c)
    consumers[0].wait(lambda: len(consumer_ids(s.broker_addr, group)) == 3, 20, "three consumers registered")
    owners = settle_owners(p, consumers, topic)
    # AllocateMessageQueueAveragely: client ids sorted as strings, queues in contiguous blocks. The C++
    # client's id is "<pid>-<ip>@<instance>", so the order is the pids' as text (not always i1, i2, i3:
    # 9999 sorts after 10000, and pids wrap).
    first, second, third = averagely_ordered(consumer_ids(s.broker_addr, group))
    assert owners == {0: first, 1: first, 2: second, 3: second, 4: third, 5: third}

    dead = consumers.pop(1)
    dead.proc.kill()  # no unregister, no offset commit: the broker sees the connection drop
    dead.proc.wait(10)
    t0 = time.monotonic()
    owners = settle_owners(p, consumers, topic)
    took = time.monotonic() - t0
    assert sorted(set(owners.values())) == ["i1", "i3"]
    first, second = averagely_ordered(consumer_ids(s.broker_addr, group))
    assert owners == {0: first, 1: first, 2: first, 3: second, 4: second, 5: second}
    assert took < 30, f"the dead consumer's queues took {took:.1f}s to move"

    n = 120
    sent = p.call("send", mode="sync", messages=[msg(topic, f"after-{i}", keys=f"after-{i}") for i in range(n)])
    assert all(r["status"] == "OK" for r in sent)
    want = {f"after-{i}" for i in range(n)}
    consumers[0].wait(lambda: want <= {m["keys"] for c in consumers for m in c.messages()}, 30, "every message")
