"""Orderly consumption with the official client: each queue strictly in order through listener
failures (local retry) and through a consumer restart."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from tests.compat.harness import (
    consumer_ids,
    create_topic,
    msg,
    send_acknowledged,
    sentinels_received,
    uniq,
    wait_route,
)
from tests.support import Standalone

pytestmark = pytest.mark.compat
QUEUES = 4
PER_QUEUE = 10


def successes_by_queue(consumers: list[Any]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for c in consumers:
        for m in sorted(c.messages(), key=lambda m: m["t"]):
            if not m["failed"] and m["keys"].startswith("o-"):
                q, seq = (int(x) for x in m["keys"][2:].split("-"))
                out[q].append(seq)
    return out


def test_orderly_keeps_queue_order_through_failures_and_restart(standalone: Standalone, agents: Any) -> None:
    s = standalone
    topic, group = uniq("OrdT"), uniq("OrdG")
    create_topic(s.namesrv_addr, topic, QUEUES)
    wait_route(s.namesrv_addr, topic)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    fail_once = [f"o-{q}-{seq}" for q in range(QUEUES) for seq in (2, 5)]
    c1 = agents.new("c1")
    c1.call("consumer_start", cid="c1", group=group, topic=topic, namesrv=s.namesrv_addr, orderly=True,
            fail_once_keys=fail_once)
    c1.wait(lambda: len(consumer_ids(s.broker_addr, group)) == 1, 20, "consumer registered")
    first = [msg(topic, f"o-{q}-{seq}", keys=f"o-{q}-{seq}", arg=q) for seq in range(PER_QUEUE // 2) for q in range(QUEUES)]
    assert all(r["status"] == "OK" for r in send_acknowledged(p, mode="orderly", messages=first))
    c1.wait(lambda: sum(len(v) for v in successes_by_queue([c1]).values()) == len(first), 60, "first half")
    # Each planned failure was retried locally before anything after it in the queue.
    for q, seqs in successes_by_queue([c1]).items():
        assert seqs == list(range(PER_QUEUE // 2)), (q, seqs)
    failed = [m["keys"] for m in c1.messages() if m["failed"]]
    assert sorted(failed) == sorted(k for k in fail_once if int(k.split("-")[2]) < PER_QUEUE // 2)

    # Restart the consumer (clean shutdown commits offsets and releases the queue locks).
    c1.call("consumer_shutdown", cid="c1")
    c2 = agents.new("c2")
    c2.call("consumer_start", cid="c2", group=group, topic=topic, namesrv=s.namesrv_addr, orderly=True,
            fail_once_keys=fail_once)
    second = [msg(topic, f"o-{q}-{seq}", keys=f"o-{q}-{seq}", arg=q)
              for seq in range(PER_QUEUE // 2, PER_QUEUE) for q in range(QUEUES)]
    assert all(r["status"] == "OK" for r in send_acknowledged(p, mode="orderly", messages=second))
    c2.wait(lambda: all(len(v) and v[-1] == PER_QUEUE - 1 for v in successes_by_queue([c2]).values())
            and len(successes_by_queue([c2])) == QUEUES, 60, "second half")
    sentinels_received(p, [c2], topic, QUEUES)  # a replayed tail would come before them
    for q, seqs in successes_by_queue([c2]).items():
        # At-least-once across the restart may replay a tail of the first half, but never out of order.
        assert seqs == sorted(seqs) and seqs[-(PER_QUEUE // 2):] == list(range(PER_QUEUE // 2, PER_QUEUE)), (q, seqs)
