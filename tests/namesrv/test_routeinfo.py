"""The NameServer's route table, without sockets."""

from __future__ import annotations

from tidalmq.namesrv.routeinfo import ORDER_TOPIC_CONFIG_NAMESPACE, RouteInfoManager


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


TOPICS = {"T1": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}, "T2": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}


def test_register_then_route_and_cluster_info() -> None:
    r = RouteInfoManager(Clock())
    r.register_broker("C", "127.0.0.1:10911", "b1", 0, "127.0.0.1:10912", TOPICS, {"counter": 1})
    r.register_broker("C", "127.0.0.1:10921", "b1", 1, "", {}, {"counter": 1})
    route = r.pickup_topic_route("T1")
    assert route is not None
    assert route["queueDatas"] == [{"brokerName": "b1", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}]
    assert route["brokerDatas"][0]["brokerAddrs"] == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
    assert r.pickup_topic_route("nope") is None
    assert r.cluster_info()["clusterAddrTable"] == {"C": ["b1"]}
    assert r.all_topics() == ["T1", "T2"]


def test_slave_learns_master_addresses() -> None:
    r = RouteInfoManager(Clock())
    r.register_broker("C", "m:1", "b1", 0, "m:2", TOPICS, {})
    assert r.register_broker("C", "s:1", "b1", 1, "", {}, {}) == ("m:2", "m:1")


def test_topics_removed_from_master_disappear() -> None:
    r = RouteInfoManager(Clock())
    r.register_broker("C", "m:1", "b1", 0, "", TOPICS, {})
    r.register_broker("C", "m:1", "b1", 0, "", {"T1": TOPICS["T1"]}, {})
    assert r.all_topics() == ["T1"]


def test_broker_expires_after_120s_without_heartbeat() -> None:
    clock = Clock()
    r = RouteInfoManager(clock)
    r.register_broker("C", "m:1", "b1", 0, "", TOPICS, {})
    clock.now += 119_000
    assert r.scan_not_active_brokers() == []
    r.register_broker("C", "m:1", "b1", 0, "", TOPICS, {})  # heartbeat
    clock.now += 119_000
    assert r.scan_not_active_brokers() == []
    clock.now += 2_000
    assert r.scan_not_active_brokers() == ["m:1"]
    assert r.pickup_topic_route("T1") is None
    assert r.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_order_topic_conf_in_route() -> None:
    r = RouteInfoManager(Clock())
    r.register_broker("C", "m:1", "b1", 0, "", TOPICS, {})
    r.put_kv(ORDER_TOPIC_CONFIG_NAMESPACE, "T1", "b1:4")
    assert r.pickup_topic_route("T1")["orderTopicConf"] == "b1:4"  # type: ignore[index]
    r.delete_kv(ORDER_TOPIC_CONFIG_NAMESPACE, "T1")
    assert "orderTopicConf" not in r.pickup_topic_route("T1")  # type: ignore[operator]


def test_unregister_removes_broker_and_its_topics() -> None:
    r = RouteInfoManager(Clock())
    r.register_broker("C", "m:1", "b1", 0, "", TOPICS, {})
    r.register_broker("C", "n:1", "b2", 0, "", {"T1": TOPICS["T1"]}, {})
    r.unregister_broker("C", "m:1", "b1", 0)
    route = r.pickup_topic_route("T1")
    assert route is not None and [q["brokerName"] for q in route["queueDatas"]] == ["b2"]
    assert r.pickup_topic_route("T2") is None
