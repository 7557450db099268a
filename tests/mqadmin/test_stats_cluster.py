"""statsAll and consumerProgress over two broker groups (``tidalmq cluster``): each master's counts summed,
each master's queues listed, as RocketMQ's tools add them up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.cluster.support import Cluster
from tests.compat.harness import uniq
from tests.mqadmin.conftest import run_mqadmin
from tests.mqadmin.test_mqadmin import ok, wait_for
from tidalmq.client import ConsumeResult, Message, MessageExt, Producer, PushConsumer
from tidalmq.client.admin import Admin

pytestmark = pytest.mark.timeout(180)

SENT = 16


def test_stats_add_up_over_two_broker_groups(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c", groups=2, replicas=1).start()
    ns, topic, group = cluster.namesrv_addr, uniq("MqaTwo"), uniq("MqaTwoG")
    try:
        ok(run_mqadmin(ns, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2"))

        async def flow() -> tuple[str, str]:
            async def consumed(msgs: list[MessageExt]) -> ConsumeResult:
                return ConsumeResult.SUCCESS

            c = PushConsumer(group, ns, listener=consumed)
            c.subscribe(topic)
            await c.start()
            try:
                async with Producer(uniq("MqaTwoP"), ns) as p:
                    brokers = {(await p.send(Message(topic, f"t{i}"))).message_queue.broker_name for i in range(SENT)}
                assert brokers == {"broker-a", "broker-b"}  # the sends went to both groups
                async with Admin(ns) as admin:
                    deadline = time.monotonic() + 30
                    while (stats := await admin.consume_stats(group, topic)).total_diff() != 0 or not stats.queues:
                        assert time.monotonic() < deadline, "the group did not catch up"
                        await asyncio.sleep(0.1)

                def counted() -> str | None:
                    out = ok(run_mqadmin(ns, "statsAll", "-t", topic))
                    return out if any(
                        ln.split()[:2] == [topic, group] and ln.split()[5:] == [str(SENT), str(SENT)]
                        for ln in out.splitlines()) else None

                stats_out = await asyncio.to_thread(wait_for, "statsAll summing both masters", counted, 30)
                progress = await asyncio.to_thread(lambda: ok(run_mqadmin(ns, "consumerProgress", "-g", group,
                                                                          "-t", topic)))
                return stats_out, progress
            finally:
                await c.shutdown()

        stats_out, progress = asyncio.run(asyncio.wait_for(flow(), 120))
        rows = [ln.split() for ln in progress.splitlines()[1:] if ln.split()[:1] == [topic]]
        assert sorted((r[1], r[2]) for r in rows) == [("broker-a", "0"), ("broker-a", "1"), ("broker-b", "0"),
                                                      ("broker-b", "1")]
        assert sum(int(r[4]) for r in rows) == SENT and progress.splitlines()[-2] == "Consume Diff Total: 0"
        assert stats_out.splitlines()[0].startswith("#Topic")
    finally:
        cluster.stop()
        cluster.kill_children()
