"""consumerStatus, cloneGroupOffset and printMsgByQueue against a live TidalMQ push consumer (RocketMQ 5.4's
flags and lines; the same text as Apache's tool prints: tests/reference/test_mqadmin_consumers.py)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from tests.compat.harness import uniq
from tests.mqadmin.support import run_mqadmin
from tests.mqadmin.test_mqadmin import ok
from tests.support import Standalone
from tidalmq.client import Message, MessageExt, Producer, PushConsumer
from tidalmq.client.admin import Admin
from tidalmq.client.message import MessageQueue


async def _committed(s: Standalone, group: str, mq: MessageQueue, offset: int) -> None:
    async with Admin(s.namesrv_addr) as admin:
        deadline = time.monotonic() + 20
        while await admin.query_offset(group, mq) != offset:
            assert time.monotonic() < deadline, f"{group} never committed {offset}"
            await asyncio.sleep(0.05)


def test_consumer_status_clone_and_print_by_queue(shared_standalone: Standalone, tmp_path: Path) -> None:
    s, topic, group, clone = shared_standalone, uniq("MqaStatus"), uniq("MqaStatusG"), uniq("MqaCloneG")

    def mqadmin(*args: str) -> str:
        return ok(run_mqadmin(s.namesrv_addr, *args, cwd=tmp_path))

    mqadmin("updateTopic", "-b", s.broker_addr, "-t", topic, "-r", "1", "-w", "1")
    mqadmin("updateSubGroup", "-b", s.broker_addr, "-g", clone)

    async def online() -> tuple[str, dict[str, str], str]:
        got: list[MessageExt] = []

        async def on(msgs: list[MessageExt]) -> None:
            got.extend(msgs)

        c = PushConsumer(group, s.namesrv_addr, listener=on, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                         persist_offset_interval=0.2)
        c.subscribe(topic)
        await c.start()
        try:
            async with Producer(uniq("MqaStatusP"), s.namesrv_addr) as p:
                for i in range(3):
                    sent = await p.send(Message(topic, f"body{i}", tags="TagA" if i % 2 else "TagB"))
            mq = sent.message_queue
            await _committed(s, group, mq, 3)
            outs = {name: await asyncio.to_thread(mqadmin, *args) for name, args in {
                "list": ["consumerStatus", "-g", group], "one": ["consumerStatus", "-g", group, "-i", c.client_id],
                "jstack": ["consumerStatus", "-g", group, "-i", c.client_id, "-s"],
                "broker": ["consumerStatus", "-g", group, "-b", s.broker_addr],
                "clone": ["cloneGroupOffset", "-s", group, "-d", clone, "-t", topic]}.items()}
            async with Admin(s.namesrv_addr) as admin:
                cloned = await admin.query_offset(clone, mq)
            return c.client_id, outs, f"{mq.broker_name}:{cloned}"
        finally:
            await c.shutdown()

    client_id, outs, cloned = asyncio.run(asyncio.wait_for(online(), 90))
    header, row, *rest = outs["list"].splitlines()
    assert header.split() == ["#Index", "#ClientId", "#Version", "#ConsumerRunningInfoFile"]
    index, cid, version, path = row.split()
    assert (index, cid) == ("1", client_id) and re.fullmatch(r"V\d+_\d+_\d+", version)
    assert re.fullmatch(rf"\d{{13}}/{re.escape(client_id)}", path)
    assert [ln for ln in rest if ln] == ["Same subscription in the same group of consumer", "Rebalance OK"]
    running = (tmp_path / path).read_text()  # the file holds what -i prints
    assert running.splitlines()[0] == outs["one"].splitlines()[0] == "#Consumer Properties#"
    assert re.search(rf"^{re.escape(topic)} +\S+ +0 +3 +$", outs["one"], re.M), outs["one"]
    assert re.search(r"^PROP_CONSUME_TYPE +: CONSUME_PASSIVELY$", outs["one"], re.M)
    assert re.search(rf"^001 Topic: %RETRY%{group} +ClassFilter: false +SubExpression: \*$", outs["one"], re.M)
    assert "#Consumer jstack#" not in outs["one"] and "#Consumer jstack#" in outs["jstack"]
    assert outs["broker"].splitlines()[1].split()[1] == client_id
    assert outs["clone"] == f"clone group offset success. srcGroup[{group}], destGroup=[{clone}], topic[{topic}]"
    broker_name, offset = cloned.split(":")
    assert offset == "3"

    printed = mqadmin("printMsgByQueue", "-t", topic, "-a", broker_name, "-i", "0", "-p", "true", "-d", "true",
                      "-f", "true").splitlines()
    assert [re.sub(r"^MSGID: \S+ MessageExt \[.*\] BODY: ", "", ln) for ln in printed[:3]] == ["body0", "body1", "body2"]
    assert "queueOffset=1," in printed[1] and "properties={" in printed[1] and "TAGS=TagA" in printed[1]
    assert printed[3:] == ["Tag: TagB                           Count: 2", "Tag: TagA                           Count: 1"]
    filtered = mqadmin("printMsgByQueue", "-t", topic, "-a", broker_name, "-i", "0", "-s", "TagA", "-p", "true")
    assert [ln.endswith("NOT PRINT BODY") and "queueOffset=1," in ln for ln in filtered.splitlines()] == [True]
    # no consumer online: RocketMQ's CONSUMER_NOT_ONLINE
    gone = run_mqadmin(s.namesrv_addr, "consumerStatus", "-g", group, cwd=tmp_path)
    assert gone.returncode == 1 and "CODE: 206" in gone.stderr and not gone.stdout
