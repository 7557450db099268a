"""``mqadmin`` as operators' scripts use it: the console script in a subprocess against a real standalone,
results checked through the official 4.x client (tests/compat agents) or tidalmq.client."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.compat.harness import msg, uniq
from tests.mqadmin.conftest import Run, run_mqadmin
from tests.support import Standalone
from tidalmq.client.admin import Admin
from tidalmq.remoting.codes import RequestCode


def ok(r: Any) -> str:
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    return str(r.stdout)


def admin_call(s: Standalone, fn: Any) -> Any:
    async def go() -> Any:
        async with Admin(s.namesrv_addr) as a:
            return await fn(a)
    return asyncio.run(go())


def wait_for(what: str, cond: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_update_topic_delay_then_official_client_sends_and_consumes_late(mqadmin: Run, shared_standalone: Standalone,
                                                                         agents: Any) -> None:
    s, topic, group = shared_standalone, uniq("MqaDelay"), uniq("MqaDelayG")
    out = ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2",
                     "-a", "+message.type=DELAY"))
    assert f"create topic to {s.broker_addr} success." in out
    conf = next(iter(admin_call(s, lambda a: a.topic_config(topic)).values()))
    assert (conf["readQueueNums"], conf["writeQueueNums"]) == (2, 2)
    assert conf["attributes"]["message.type"] == "DELAY"
    consumer = agents.new("delay-consumer")
    consumer.call("consumer_start", cid="c", group=group, topic=topic, namesrv=s.namesrv_addr)
    producer = agents.new("delay-producer")
    producer.call("producer_start", group=uniq("MqaPG"), namesrv=s.namesrv_addr)
    (res,) = producer.call("send", mode="sync", messages=[msg(topic, "later", keys="d1", props={"DELAY": "1"})])
    assert res["status"] == "OK"
    (got,) = consumer.wait_messages(lambda m: len(m) >= 1, 30, "the delayed message")
    assert got["keys"] == "d1" and got["t"] * 1000 - got["born_timestamp"] >= 900  # level 1 is 1 s


def test_query_msg_by_key_and_unique_key_find_what_the_official_client_sent(mqadmin: Run,
                                                                            shared_standalone: Standalone,
                                                                            agents: Any) -> None:
    s, topic, key = shared_standalone, uniq("MqaQuery"), uniq("order")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic))
    producer = agents.new("query-producer")
    producer.call("producer_start", group=uniq("MqaPG"), namesrv=s.namesrv_addr)
    (res,) = producer.call("send", mode="sync", messages=[msg(topic, "needle", keys=key, tags="TA")])
    lines = ok(mqadmin("queryMsgByKey", "-t", topic, "-k", key)).splitlines()
    assert lines[0].split() == ["#Message", "ID", "#QID", "#Offset", "#IndexKey"]
    assert [ln.split()[0] for ln in lines[1:]] == [res["msg_id"]]
    assert ok(mqadmin("queryMsgByKey", "-t", topic, "-k", "no-such-key")).splitlines()[1:] == []
    shown = ok(mqadmin("queryMsgByUniqueKey", "-i", res["msg_id"], "-t", topic))
    fields = dict(ln.split(":", 1) for ln in shown.splitlines() if ln)
    assert shown.endswith("\n\nWARN: No Consumer")  # RocketMQ's message tracks: no group consumes the topic
    assert fields["Topic"].strip() == topic and fields["Keys"].strip() == f"[{key}]"
    assert fields["Tags"].strip() == "[TA]" and fields["Message Body"].strip() == "needle"
    offset_id = fields["OffsetID"].strip()
    assert "needle" in ok(mqadmin("queryMsgById", "-i", offset_id))


def test_reset_offset_by_time_makes_the_official_consumer_read_again(mqadmin: Run, shared_standalone: Standalone,
                                                                     agents: Any) -> None:
    s, topic, group = shared_standalone, uniq("MqaReset"), uniq("MqaResetG")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2"))
    before = str(int(time.time() * 1000) - 1000)
    consumer = agents.new("reset-consumer")
    consumer.call("consumer_start", cid="c", group=group, topic=topic, namesrv=s.namesrv_addr)
    producer = agents.new("reset-producer")
    producer.call("producer_start", group=uniq("MqaPG"), namesrv=s.namesrv_addr)
    producer.call("send", mode="sync", messages=[msg(topic, f"b{i}", keys=f"k{i}") for i in range(4)])
    consumer.wait_messages(lambda m: len(m) >= 4, 30, "the first reading")
    wait_for("committed offsets", lambda: sum(p.consumer_offset for p in admin_call(
        s, lambda a: a.consumer_progress(group, topic))) == 4)
    out = ok(mqadmin("resetOffsetByTime", "-g", group, "-t", topic, "-s", before))
    assert out.splitlines()[1].split() == ["#brokerName", "#queueId", "#offset"]
    assert sorted(ln.split()[2] for ln in out.splitlines()[2:]) == ["0", "0"]
    again = consumer.wait_messages(lambda m: len(m) >= 8, 30, "the second reading")
    assert sorted(m["keys"] for m in again) == sorted([f"k{i}" for i in range(4)] * 2)


def test_update_and_delete_sub_group(mqadmin: Run, shared_standalone: Standalone) -> None:
    s, group = shared_standalone, uniq("MqaSubG")
    out = ok(mqadmin("updateSubGroup", "-b", s.broker_addr, "-g", group, "-r", "3", "-q", "2", "-d", "false"))
    assert out.splitlines()[0] == f"create subscription group to {s.broker_addr} success."
    conf = admin_call(s, lambda a: a.group_list())[group]
    assert (conf["retryMaxTimes"], conf["retryQueueNums"], conf["consumeBroadcastEnable"]) == (3, 2, False)
    ok(mqadmin("updateSubGroup", "-b", s.broker_addr, "-g", group, "--attributes", "+priority.factor=50"))
    assert admin_call(s, lambda a: a.group_list())[group]["attributes"] == {"priority.factor": "50"}
    bad = mqadmin("updateSubGroup", "-b", s.broker_addr, "-g", group, "--attributes", "+priority.factor=101")
    assert bad.returncode != 0 and "value is not in range(0, 100)" in bad.stdout + bad.stderr
    out = ok(mqadmin("deleteSubGroup", "-c", "DefaultCluster", "-g", group))
    assert f"delete subscription group [{group}] from broker [{s.broker_addr}]" in out
    assert group not in admin_call(s, lambda a: a.group_list())


def test_delete_topic_and_topic_list_with_namesrv_from_environment(mqadmin: Run, shared_standalone: Standalone) -> None:
    s, topic = shared_standalone, uniq("MqaDel")
    ok(mqadmin("updateTopic", "-b", s.broker_addr, "-t", topic))
    env = {"NAMESRV_ADDR": s.namesrv_addr}
    assert topic in ok(run_mqadmin(None, "topicList", env=env)).split()
    out = ok(mqadmin("deleteTopic", "-t", topic, "-c", "DefaultCluster"))
    assert out.splitlines() == [f"delete topic [{topic}] from cluster [DefaultCluster] success.",
                                f"delete topic [{topic}] from NameServer success."]
    assert topic not in ok(run_mqadmin(None, "topicList", env=env)).split()
    assert admin_call(s, lambda a: a.topic_config(topic)) == {}
    gone = mqadmin("topicRoute", "-t", topic)
    assert gone.returncode == 1 and gone.stderr.startswith("mqadmin: CODE: 17 ")


def test_send_message_then_topic_status_and_consumer_progress(mqadmin: Run) -> None:
    topic, group = uniq("MqaSend"), uniq("MqaSendG")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    sent = ok(mqadmin("sendMessage", "-t", topic, "-p", "hi", "-k", "sk", "-c", "TA")).splitlines()
    assert sent[1].split()[2] == "SEND_OK"
    status = ok(mqadmin("topicStatus", "-t", topic)).splitlines()
    assert status[1].split()[1:4] == ["0", "0", "1"]
    ok(mqadmin("resetOffsetByTime", "-g", group, "-t", topic, "-s", "0"))  # offline: no consumer online
    progress = ok(mqadmin("consumerProgress", "-g", group, "-t", topic)).splitlines()
    row = progress[1].split()
    assert row[0] == topic and row[2:7] == ["0", "1", "0", "1", "0"]  # queue, broker/consumer offset, diff, inflight
    assert progress[-2:] == ["Consume Diff Total: 1", "Consume Inflight Total: 0"]


def test_errors_are_one_line_on_stderr_with_a_status(mqadmin: Run, shared_standalone: Standalone) -> None:
    hot = mqadmin("updateBrokerConfig", "-c", "DefaultCluster", "-k", "flushDiskType", "-v", "SYNC_FLUSH")
    assert hot.returncode == 1 and hot.stdout == "" and len(hot.stderr.splitlines()) == 1
    assert "CODE: 1 " in hot.stderr and "restart" in hot.stderr
    bad = mqadmin("updateTopic", "-c", "DefaultCluster", "-t", "bad topic!")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "illegal characters" in bad.stderr
    down = run_mqadmin("127.0.0.1:1", "topicList")
    assert down.returncode == 1 and len(down.stderr.splitlines()) == 1
    ts = mqadmin("resetOffsetByTime", "-g", "G", "-t", "T", "-s", "yesterday")
    assert ts.returncode == 2 and "bad timestamp" in ts.stderr


def test_get_broker_config_and_kv_config(mqadmin: Run, shared_standalone: Standalone) -> None:
    s = shared_standalone
    lines = ok(mqadmin("getBrokerConfig", "-b", s.broker_addr)).splitlines()
    assert lines[0] == f"============{s.broker_addr}============" and lines[-1] == ""
    conf = {k.strip(): v.strip() for k, v in (ln.split("=  ", 1) for ln in lines[1:-1])}
    listed = ok(mqadmin("clusterList")).splitlines()  # RocketMQ 5's widths: 22 for the cluster, 22 for the broker
    assert listed[0].startswith("#Cluster Name           #Broker Name") and len(listed) == 2
    assert listed[1].startswith(f"{'DefaultCluster':<22}  ") and listed[1].split()[2:5] == ["0", s.broker_addr, "V4_9_3"]
    by_cluster = ok(mqadmin("getBrokerConfig", "-c", "DefaultCluster")).splitlines()
    assert by_cluster[0] == f"============Master: {s.broker_addr}============"
    assert conf["brokerClusterName"] == "DefaultCluster"
    ns = uniq("MqaNs")
    ok(mqadmin("updateKvConfig", "-s", ns, "-k", "answer", "-v", "42"))
    assert admin_call(s, lambda a: a._namesrv(RequestCode.GET_KV_CONFIG, {"namespace": ns, "key": "answer"})).ext_fields["value"] == "42"


def test_query_msg_by_offset_and_print_msg(mqadmin: Run) -> None:
    topic = uniq("MqaScan")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    for i in range(3):
        ok(mqadmin("sendMessage", "-t", topic, "-p", f"body-{i}", "-k", f"sk{i}"))
    broker_name = ok(mqadmin("topicStatus", "-t", topic)).splitlines()[1].split()[0]
    shown = ok(mqadmin("queryMsgByOffset", "-t", topic, "-b", broker_name, "-i", "0", "-o", "1"))
    fields = dict(ln.split(":", 1) for ln in shown.splitlines() if ln)
    assert shown.endswith("\n\nWARN: No Consumer")  # RocketMQ's message tracks: no group consumes the topic
    assert fields["Keys"].strip() == "[sk1]" and fields["Queue Offset"].strip() == "1"
    past = mqadmin("queryMsgByOffset", "-t", topic, "-b", broker_name, "-i", "0", "-o", "3")
    assert past.returncode == 1 and "CODE: 22 " in past.stderr  # QUERY_NOT_FOUND
    printed = [ln for ln in ok(mqadmin("printMsg", "-t", topic)).splitlines() if ln.startswith("MSGID: ")]
    assert [ln.rsplit("BODY: ", 1)[1] for ln in printed] == ["body-0", "body-1", "body-2"]


def test_consumer_connection_and_dlq_resend(mqadmin: Run, shared_standalone: Standalone) -> None:
    from tidalmq.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer, PushConsumer

    s, topic, group = shared_standalone, uniq("MqaDlq"), uniq("MqaDlqG")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))

    async def letters_then_connection() -> str:
        async def always_fail(msgs: list[MessageExt]) -> ConsumeResult:
            return ConsumeResult.RECONSUME_LATER

        # no retries: the first failure makes a dead letter
        c = PushConsumer(group, s.namesrv_addr, listener=always_fail, max_reconsume_times=0,
                         consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        try:
            async with Producer(uniq("MqaPG"), s.namesrv_addr) as p:
                for i in range(2):
                    await p.send(Message(topic, f"dead-{i}", keys=f"dk{i}"))
            async with Admin(s.namesrv_addr) as admin:
                deadline = time.monotonic() + 20
                while len(await admin.dead_letters(group)) < 2:
                    assert time.monotonic() < deadline, "dead letters did not arrive"
                    await asyncio.sleep(0.1)
            out = await asyncio.to_thread(lambda: ok(mqadmin("consumerConnection", "-g", group)))
            assert c.client_id in out.split() and "PYTHON" in out.split()  # the client's own LanguageCode
            return out
        finally:
            await c.shutdown()

    out = asyncio.run(asyncio.wait_for(letters_then_connection(), 60))
    assert len(out.splitlines()) == 1 and out.startswith("001  ")
    resent = ok(mqadmin("resendDlqMessage", "-g", group, "-a")).splitlines()
    assert resent[0].split() == ["#Old", "MsgId", "#New", "MsgId"] and len(resent) == 3
    status = ok(mqadmin("topicStatus", "-t", topic)).splitlines()
    assert status[1].split()[3] == "4"  # the two originals and their re-sent copies, in the original topic
    refused = mqadmin("resendDlqMessage", "-g", group)
    assert refused.returncode == 2 and "-a" in refused.stderr


def test_scans_show_a_counter_on_a_terminal_only(shared_standalone: Standalone) -> None:
    import os
    import pty
    import subprocess

    from tests.mqadmin.conftest import MQADMIN

    topic = uniq("MqaTty")
    ok(run_mqadmin(shared_standalone.namesrv_addr, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    for i in range(3):
        ok(run_mqadmin(shared_standalone.namesrv_addr, "sendMessage", "-t", topic, "-p", f"b{i}"))
    args = [MQADMIN, "printMsg", "-t", topic, "-n", shared_standalone.namesrv_addr]
    leader, follower = pty.openpty()
    try:
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=follower, text=True, timeout=60)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: everything read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    assert r.returncode == 0 and "messages read" not in r.stdout
    assert b"\rmessages read: 3" in seen
    piped = ok(run_mqadmin(shared_standalone.namesrv_addr, "printMsg", "-t", topic))
    assert "messages read" not in piped  # and nothing on a piped stderr:
    assert run_mqadmin(shared_standalone.namesrv_addr, "printMsg", "-t", topic).stderr == ""
