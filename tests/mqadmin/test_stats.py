"""Statistics as RocketMQ's tools show them, against a real standalone after messages flow (sent and consumed
with tidalmq.client): statsAll, clusterList's TPS, consumerProgress's Consume TPS / #LastTime / #Client IP /
#TPS / #Version, topicStatus's #Last Updated; and the broker's answers behind them."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from tests.compat.harness import uniq
from tests.mqadmin.conftest import Run
from tests.mqadmin.test_mqadmin import admin_call, ok, wait_for
from tests.support import Standalone
from tidalmq.client import ConsumeResult, Message, MessageExt, Producer, PushConsumer
from tidalmq.client.admin import Admin, AdminError
from tidalmq.common.mqversion import VERSION_NAMES

SENT = 20
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _rows(out: str, first: str) -> list[list[str]]:
    return [ln.split() for ln in out.splitlines()[1:] if ln.split()[:1] == [first]]


def test_stats_columns_move_after_messages_flow(mqadmin: Run, shared_standalone: Standalone) -> None:
    s, topic, group = shared_standalone, uniq("MqaStats"), uniq("MqaStatsG")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    idle = ok(mqadmin("statsAll", "-t", topic)).splitlines()  # nothing sent, no consumer
    assert idle[0].split() == ["#Topic", "#Consumer", "Group", "#Accumulation", "#InTPS", "#OutTPS",
                               "#InMsg24Hour", "#OutMsg24Hour"]
    assert idle[1].split() == [topic, "0", "0.00", "0", "NO_CONSUMER"]
    assert ok(mqadmin("statsAll", "-t", topic, "-a")).splitlines()[1:] == []  # -a: active topics only

    async def flow() -> dict[str, Any]:
        async def consumed(msgs: list[MessageExt]) -> ConsumeResult:
            return ConsumeResult.SUCCESS

        c = PushConsumer(group, s.namesrv_addr, listener=consumed)
        c.subscribe(topic)
        await c.start()
        try:
            async with Producer(uniq("MqaStatsP"), s.namesrv_addr) as p:
                for i in range(SENT):
                    await p.send(Message(topic, f"s{i}"))
            async with Admin(s.namesrv_addr) as admin:
                deadline = time.monotonic() + 20
                while (await admin.consume_stats(group, topic)).total_diff() != 0:
                    assert time.monotonic() < deadline, "the group did not catch up"
                    await asyncio.sleep(0.1)

            def run(*args: str) -> str:
                return ok(mqadmin(*args))

            seen: dict[str, Any] = {"client": c.client_id.split("@")[0]}
            # clusterList's InTPS: the 10 s put rate of the runtime info's putTps
            seen["cluster"] = await asyncio.to_thread(wait_for, "clusterList InTPS above 0", lambda: next(
                (ln for ln in run("clusterList").splitlines()[1:] if float(ln.split()[5].split("(")[0]) > 0), None), 20)
            # the minute window's first sample (every 10 s) carries all the messages in and out
            seen["stats"] = await asyncio.to_thread(wait_for, "statsAll counts", lambda: next(
                (r for r in _rows(run("statsAll", "-t", topic), topic)
                 if r[1] == group and r[5:7] == [str(SENT), str(SENT)]), None), 25)
            seen["progress"] = await asyncio.to_thread(run, "consumerProgress", "-g", group, "-s", "true")
            seen["groups"] = await asyncio.to_thread(run, "consumerProgress")
            return seen
        finally:
            await c.shutdown()

    seen = asyncio.run(asyncio.wait_for(flow(), 90))
    in_tps, out_tps = float(seen["stats"][3]), float(seen["stats"][4])
    assert seen["stats"][2] == "0" and in_tps > 0 and out_tps > 0  # accumulation 0: all consumed
    cluster = seen["cluster"].split()
    # RocketMQ 5's base line: #OutTPS(LOAD) with the ack pool, #Timer(Progress), #Hour, #ACTIVATED
    assert re.fullmatch(r"\d+\.\d\d\(\d+,\d+ms\)", cluster[5]) and re.fullmatch(r"\d+\.\d\d", cluster[11])
    assert re.fullmatch(r"\d+\.\d\d\(\d+,\d+ms\|0,0ms\)", cluster[6]) and cluster[13] == "true"
    assert " ".join(cluster[7:10]) == "0-0(0.0w, 0.0, 0.0)"
    lines = seen["progress"].splitlines()
    (row,) = _rows(seen["progress"], topic)  # the group's %RETRY% queue may have its line too, as RocketMQ's
    assert row[3:8] == [str(SENT), str(SENT), seen["client"], "0", "0"]  # offsets, holder, diff, inflight
    assert STAMP.fullmatch(" ".join(row[8:10]))  # #LastTime: the last consumed message's store time
    assert lines[-3].startswith("Consume TPS: ") and float(lines[-3].split(": ")[1]) > 0
    assert lines[-2:] == ["Consume Diff Total: 0", "Consume Inflight Total: 0"]
    group_row = _rows(seen["groups"], group)[0]
    assert group_row[1] == "1" and group_row[2] in VERSION_NAMES and group_row[3:5] == ["PUSH", "CLUSTERING"]
    assert int(group_row[5]) >= 0 and group_row[6] == "0"  # #TPS (an int, as RocketMQ's), #Diff Total
    status = ok(mqadmin("topicStatus", "-t", topic)).splitlines()[1]
    assert status.split()[1:4] == ["0", "0", str(SENT)] and STAMP.match(status.split(None, 4)[4])
    more = ok(mqadmin("clusterList", "-m")).splitlines()  # no midnight yet: today is since the start
    assert more[0].split() == ["#Cluster", "Name", "#Broker", "Name", "#InTotalYest", "#OutTotalYest",
                               "#InTotalToday", "#OutTotalToday"]
    assert more[1].split()[2:4] == ["0", "0"] and min(int(n) for n in more[1].split()[4:6]) >= SENT
    by_broker = ok(mqadmin("brokerConsumeStats", "-b", s.broker_addr)).splitlines()  # GET_BROKE_CONSUME_STATS
    assert by_broker[0].split()[:4] == ["#Topic", "#Group", "#Broker", "Name"] and by_broker[-1].startswith("Diff Total: ")
    (line,) = [r for r in _rows("\n".join(by_broker), topic) if r[1] == group]
    assert line[3:7] == ["0", str(SENT), str(SENT), "0"] and STAMP.fullmatch(" ".join(line[7:9]))
    (without_ip,) = _rows(ok(mqadmin("consumerProgress", "-g", group)), topic)
    assert without_ip[3:6] == [str(SENT), str(SENT), "0"]  # no #Client IP column without -s true, as RocketMQ 5's


def test_broker_stats_requests(shared_standalone: Standalone) -> None:
    s, topic = shared_standalone, uniq("MqaStatsRaw")

    async def go() -> None:
        async with Admin(s.namesrv_addr) as admin:
            await admin.create_topic(topic, 2)
            async with Producer(uniq("MqaStatsRawP"), s.namesrv_addr) as p:
                await p.send(Message(topic, "x"))
            try:
                await admin.broker_stats_data(s.broker_addr, "TOPIC_PUT_NUMS", "NoSuchTopic")
                raise AssertionError("an unknown key was answered")
            except AdminError as e:
                assert e.code == 1 and e.remark == "The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist"
            data = await admin.broker_stats_data(s.broker_addr, "TOPIC_PUT_NUMS", topic)
            assert set(data) == {"statsMinute", "statsHour", "statsDay"}
            assert set(data["statsMinute"]) == {"sum", "tps", "avgpt"}
            listed = await admin.broker_consume_stats(s.broker_addr)
            assert listed["brokerAddr"] == s.broker_addr and isinstance(listed["totalDiff"], int)
            assert all(isinstance(entry, dict) and len(entry) == 1 for entry in listed["consumeStatsList"])
            try:  # GET_CONSUMER_RUNNING_INFO is passed on to an online consumer only
                await admin.consumer_running_info("NoSuchGroup", "127.0.0.1@1")
                raise AssertionError("a consumer not online was asked")
            except AdminError as e:
                assert e.code == 1 and e.remark == "The Consumer <NoSuchGroup> <127.0.0.1@1> not online"
            info = await admin.broker_runtime_info(s.broker_addr)
            assert {"putTps", "getTransferedTps", "earliestMessageTimeStamp"} <= set(info)
            assert int(info["earliestMessageTimeStamp"]) > 0

    asyncio.run(asyncio.wait_for(go(), 60))
    assert admin_call(s, lambda a: a.topic_stats(topic))[0][0].max_offset + \
        admin_call(s, lambda a: a.topic_stats(topic))[1][0].max_offset == 1


def test_cluster_list_repeats_with_interval(shared_standalone: Standalone) -> None:
    """clusterList -i 1: the table again every second until the command is stopped."""
    import os
    import queue
    import subprocess
    import threading

    from tests.mqadmin.conftest import MQADMIN

    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    proc = subprocess.Popen([MQADMIN, "clusterList", "-i", "1", "-n", shared_standalone.namesrv_addr],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")  # the end of its output

    threading.Thread(target=read, daemon=True).start()
    try:
        headers, deadline = 0, time.monotonic() + 20
        while headers < 2:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))  # queue.Empty: no second table
            assert line, "clusterList -i stopped by itself"
            headers += line.startswith("#Cluster Name")
    finally:
        proc.kill()
        proc.wait(10)
