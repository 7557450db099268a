"""The statistics columns with the official 4.x client (rocketmq==0.4.4, C++ core) producing and consuming."""

from __future__ import annotations

import re
from typing import Any

from tests.compat.harness import msg, uniq
from tests.mqadmin.conftest import Run
from tests.mqadmin.test_mqadmin import admin_call, ok, wait_for
from tests.support import Standalone
from tidalmq.common.mqversion import VERSION_NAMES

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def test_official_client_traffic_shows_in_stats_and_progress(mqadmin: Run, shared_standalone: Standalone,
                                                              agents: Any) -> None:
    s, topic, group = shared_standalone, uniq("MqaOffStats"), uniq("MqaOffStatsG")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    consumer = agents.new("stats-consumer")
    consumer.call("consumer_start", cid="c", group=group, topic=topic, namesrv=s.namesrv_addr)
    producer = agents.new("stats-producer")
    producer.call("producer_start", group=uniq("MqaOffStatsP"), namesrv=s.namesrv_addr)
    producer.call("send", mode="sync", messages=[msg(topic, f"o{i}", keys=f"k{i}") for i in range(6)])
    consumer.wait_messages(lambda m: len(m) >= 6, 30, "the messages")
    # the C++ client commits its offsets every few seconds
    wait_for("the offsets committed", lambda: admin_call(s, lambda a: a.consume_stats(group, topic)).total_diff() == 0, 20)
    conn = ok(mqadmin("consumerConnection", "-g", group)).split()
    client_id, version = conn[1], conn[-1]
    assert conn[3] == "CPP" and version in VERSION_NAMES  # the C++ core's version number, by RocketMQ's name
    # -s true: the broker asks the C++ consumer for its queues (GET_CONSUMER_RUNNING_INFO)
    (row,) = [r for r in (ln.split() for ln in ok(mqadmin("consumerProgress", "-g", group, "-s", "true")).splitlines())
              if r[:1] == [topic]]
    assert row[3:8] == ["6", "6", client_id.split("@")[0], "0", "0"]  # offsets, holder, diff, inflight
    assert STAMP.fullmatch(" ".join(row[8:10]))
    group_row = next(ln.split() for ln in ok(mqadmin("consumerProgress")).splitlines() if ln.startswith(group))
    assert group_row[1:5] == ["1", version, "PUSH", "CLUSTERING"]

    def counted() -> list[str] | None:
        rows = [ln.split() for ln in ok(mqadmin("statsAll", "-t", topic)).splitlines()[1:]]
        return next((r for r in rows if r[:2] == [topic, group] and r[5:] == ["6", "6"]), None)

    stats = wait_for("statsAll counting the official client's messages", counted, 25)
    assert float(stats[3]) > 0 and float(stats[4]) > 0 and stats[2] == "0"
