"""RocketMQ 5.4's flags and columns in TidalMQ's mqadmin (docs/mqadmin.md): clusterList -c, topicRoute -l,
topicClusterList, updateTopicPerm, updateSubGroup -o/-i/-w/-a/-p, resetOffsetByTime -q/-o, queryMsgByKey -m.
tests/reference/test_mqadmin.py compares the same lines with Apache's own tool."""

from __future__ import annotations

import asyncio

from tests.compat.harness import uniq
from tests.mqadmin.conftest import Run
from tests.mqadmin.test_mqadmin import admin_call, ok
from tests.support import Standalone
from tidalmq.client.message import Message
from tidalmq.client.producer import Producer


def _send(namesrv: str, topic: str, n: int) -> None:
    async def go() -> None:
        p = Producer(uniq("FlagPG"), namesrv)
        await p.start()
        try:
            for i in range(n):
                await p.send(Message(topic, f"b{i}", keys=f"fk{i}"))
        finally:
            await p.shutdown()
    asyncio.run(asyncio.wait_for(go(), 30))


def test_cluster_list_by_cluster_with_rocketmq5_columns(mqadmin: Run, shared_standalone: Standalone) -> None:
    lines = ok(mqadmin("clusterList", "-c", "DefaultCluster")).splitlines()
    assert lines[0].split()[-5:] == ["#Timer(Progress)", "#PCWait(ms)", "#Hour", "#SPACE", "#ACTIVATED"]
    row = lines[1].split()
    assert row[3] == shared_standalone.broker_addr and row[-1] == "true"  # a master is active
    assert row[6].endswith("|0,0ms)")  # the ack pool, after the pull pool
    assert ok(mqadmin("clusterList", "-c", "NoSuchCluster")).splitlines()[1:] == []


def test_topic_route_list_cluster_list_and_perm(mqadmin: Run, shared_standalone: Standalone) -> None:
    s, topic = shared_standalone, uniq("FlagRoute")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "3", "-w", "2", "-u", "false"))
    lines = ok(mqadmin("topicRoute", "-t", topic, "-l")).splitlines()
    assert lines[0].split() == ["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"]
    assert lines[1].split()[0] == "DefaultCluster" and lines[1].split()[2:] == [f"{{0={s.broker_addr}}}", "3", "2", "6"]
    assert lines[2] == "-" * 158 and lines[3].split() == ["Total:", "1", "3", "2"]
    assert ok(mqadmin("topicClusterList", "-t", topic)).splitlines() == ["DefaultCluster"]
    out = ok(mqadmin("updateTopicPerm", "-c", "DefaultCluster", "-t", topic, "-p", "4"))
    assert out.strip() == f"update topic perm from 6 to 4 in {s.broker_addr} success."
    assert admin_call(s, lambda a: a.topic_config(topic)).popitem()[1]["perm"] == 4
    assert ok(mqadmin("updateTopicPerm", "-c", "DefaultCluster", "-t", topic, "-p", "4")).strip() == \
        "new perm equals to the old one!"
    bad = mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-u", "maybe")
    assert bad.returncode == 2 and "-u must be true or false" in bad.stderr


def test_ordered_topic_gets_its_order_conf(mqadmin: Run, shared_standalone: Standalone) -> None:
    s, topic = shared_standalone, uniq("FlagOrder")
    out = ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-w", "4", "-r", "4", "-o", "true"))
    (conf_line,) = [ln for ln in out.splitlines() if ln.startswith("set cluster orderConf")]
    name = conf_line.split("[")[1].split(":")[0]
    assert conf_line == f"set cluster orderConf. isOrder=true, orderConf=[{name}:4]"
    from tidalmq.remoting.codes import RequestCode
    got = admin_call(s, lambda a: a._namesrv(RequestCode.GET_KV_CONFIG,
                                                {"namespace": "ORDER_TOPIC_CONFIG", "key": topic}))
    assert got.ext_fields["value"] == f"{name}:4"


def test_update_sub_group_rocketmq5_flags(mqadmin: Run, shared_standalone: Standalone) -> None:
    s, group = shared_standalone, uniq("FlagSubG")
    policy = '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":5000,"max":7200000,"multiplier":2}}'
    out = ok(mqadmin("updateSubGroup", "-b", s.broker_addr, "-g", group, "-o", "true", "-i", "0", "-w", "1",
                     "-a", "false", "-p", policy)).splitlines()
    assert out[0] == f"create subscription group to {s.broker_addr} success."
    assert out[1].startswith(f"SubscriptionGroupConfig{{groupName={group}, consumeEnable=true, "
                             "consumeFromMinEnable=false, consumeBroadcastEnable=false, consumeMessageOrderly=true,")
    conf = admin_call(s, lambda a: a.group_list())[group]
    assert conf["consumeMessageOrderly"] is True and conf["notifyConsumerIdsChangedEnable"] is False
    bad = mqadmin("updateSubGroup", "-b", s.broker_addr, "-g", group, "-p", "{not json")
    assert bad.returncode == 2 and "retry policy" in bad.stderr


def test_reset_offset_of_one_queue_to_an_offset_and_query_by_key_max(mqadmin: Run,
                                                                    shared_standalone: Standalone) -> None:
    s, topic, group = shared_standalone, uniq("FlagReset"), uniq("FlagResetG")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    _send(s.namesrv_addr, topic, 3)
    lines = ok(mqadmin("resetOffsetByTime", "-g", group, "-t", topic, "-s", "now", "-q", "0", "-o", "2")).splitlines()
    assert lines[0].startswith(f"reset consumer offset by specified consumerGroup[{group}], topic[{topic}], force[true], "
                               "timestamp(string)[now], timestamp(long)[")
    assert lines[1].split() == ["#brokerName", "#queueId", "#brokerOffset", "#consumerOffset", "#timestampOffset",
                                "#resetOffset"]
    assert [ln.split()[1:] for ln in lines[2:]] == [["0", "3", "0", "2", "2"]]  # queue 0, set to -o
    progress = ok(mqadmin("consumerProgress", "-g", group, "-t", topic)).splitlines()
    assert [r.split()[2:6] for r in progress[1:] if r.startswith(topic)] == [["0", "3", "2", "1"]]
    bad = mqadmin("resetOffsetByTime", "-g", group, "-t", topic, "-s", "now", "-o", "1")
    assert bad.returncode == 2 and "-o needs -q" in bad.stderr
    found = ok(mqadmin("queryMsgByKey", "-t", topic, "-k", "fk1", "-m", "5")).splitlines()
    assert len(found) == 2 and found[1].split()[3].split("@")[1:4] == [topic, "K", "fk1"]


def test_update_order_conf_put_get_delete(mqadmin: Run) -> None:
    topic = uniq("FlagOrderConf")
    # RocketMQ's lines, without a newline (its printf)
    assert ok(mqadmin("updateOrderConf", "-t", topic, "-m", "put", "-v", "b1:4;b2:4")) == \
        f"update orderConf success. topic=[{topic}], orderConf=[b1:4;b2:4]"
    assert ok(mqadmin("updateOrderConf", "-t", topic, "-m", "get")) == \
        f"get orderConf success. topic=[{topic}], orderConf=[b1:4;b2:4] "
    assert ok(mqadmin("updateOrderConf", "-t", topic, "-m", "delete")) == f"delete orderConf success. topic=[{topic}]"
    assert ok(mqadmin("updateOrderConf", "-t", topic, "-m", "get")) == \
        f"get orderConf success. topic=[{topic}], orderConf=[null] "
    bad = mqadmin("updateOrderConf", "-t", topic, "-m", "put")
    assert bad.returncode == 2 and "-m put needs -v" in bad.stderr
