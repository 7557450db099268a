"""``consumerProgress`` without ``-g`` (a line per group) and ``topicList -c`` (cluster and consuming groups),
against a group the client consumes with, online then offline."""

from __future__ import annotations

import asyncio
import time

from tests.compat.harness import uniq
from tests.mqadmin.conftest import Run
from tests.mqadmin.test_mqadmin import ok
from tests.support import Standalone
from tidalmq.client import ConsumeResult, Message, MessageExt, Producer, PushConsumer
from tidalmq.client.admin import Admin


def _row(out: str, first: str) -> list[str]:
    rows = [ln.split() for ln in out.splitlines()[1:] if ln.split()[:1] == [first]]
    assert len(rows) == 1, out
    return rows[0]


def test_all_groups_progress_and_topic_list_with_clusters(mqadmin: Run, shared_standalone: Standalone) -> None:
    s, topic, group = shared_standalone, uniq("MqaList"), uniq("MqaListG")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))

    async def online() -> tuple[str, str]:
        async def consumed(msgs: list[MessageExt]) -> ConsumeResult:
            return ConsumeResult.SUCCESS

        c = PushConsumer(group, s.namesrv_addr, listener=consumed)
        c.subscribe(topic)
        await c.start()
        try:
            async with Producer(uniq("MqaListP"), s.namesrv_addr) as p:
                for i in range(3):
                    await p.send(Message(topic, f"m{i}"))
            async with Admin(s.namesrv_addr) as admin:  # consumed and committed: the diff is 0
                deadline = time.monotonic() + 20
                while [r.lag for r in await admin.consumer_progress(group, topic)] != [0]:
                    assert time.monotonic() < deadline, "the group did not catch up"
                    await asyncio.sleep(0.1)
            progress = await asyncio.to_thread(lambda: ok(mqadmin("consumerProgress")))
            listed = await asyncio.to_thread(lambda: ok(mqadmin("topicList", "-c")))
            return progress, listed
        finally:
            await c.shutdown()

    progress, listed = asyncio.run(asyncio.wait_for(online(), 60))
    assert progress.splitlines()[0].split() == ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff", "Total"]
    row = _row(progress, group)
    assert row[1] == "1" and row[3:] == ["PUSH", "CLUSTERING", "0", "0"], row
    assert listed.splitlines()[0].split() == ["#Cluster", "Name", "#Topic", "#Consumer", "Group"]
    assert ["DefaultCluster", topic, group] in [ln.split() for ln in listed.splitlines()]
    assert not any(ln.split()[1].startswith("%RETRY%") for ln in listed.splitlines()[1:] if len(ln.split()) > 1)
    # offline: the group still has its line, its offsets and no connection
    ok(mqadmin("sendMessage", "-t", topic, "-p", "late"))
    assert _row(ok(mqadmin("consumerProgress")), group)[1:] == ["0", "OFFLINE", "0", "1"]


def test_consume_message_reads_by_count_queue_offset_and_time(mqadmin: Run) -> None:
    topic = uniq("MqaConsume")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    for i in range(5):
        ok(mqadmin("sendMessage", "-t", topic, "-p", f"c{i}"))
    broker = ok(mqadmin("topicStatus", "-t", topic)).splitlines()[1].split()[0]

    def bodies(*args: str) -> list[str]:
        out = ok(mqadmin("consumeMessage", "-t", topic, *args))
        return [ln.rsplit("BODY: ", 1)[1] for ln in out.splitlines() if ln.startswith("MSGID: ")]

    assert bodies("-c", "3") == ["c0", "c1", "c2"]
    assert bodies("-b", broker, "-i", "0", "-o", "3") == ["c3", "c4"]
    assert bodies("-s", str(int(time.time() * 1000) + 60_000)) == []  # nothing stored after that time
    lonely = mqadmin("consumeMessage", "-t", topic, "-i", "0")
    assert lonely.returncode == 2 and "-i needs -b" in lonely.stderr
