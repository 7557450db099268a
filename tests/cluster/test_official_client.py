"""The official 4.x client (``rocketmq==0.4.4``) against a ``tidalmq cluster`` of two groups: when broker-a's
master dies, its producer's sends go on being acknowledged, by broker-b."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.compat.harness import require_official_client

require_official_client()

from tests.broker.rawclient import run  # noqa: E402
from tests.cluster.support import Cluster  # noqa: E402
from tests.cluster.test_cluster_command import TOPIC, _pull_bodies  # noqa: E402
from tests.compat.conftest import Agents  # noqa: E402
from tests.compat.harness import create_topic, msg, send_acknowledged, uniq, wait_route  # noqa: E402

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def _ok(result: object) -> bool:
    return isinstance(result, dict) and result.get("status") == "OK"


def test_the_official_producer_goes_on_with_broker_b_when_broker_a_dies(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c", groups=2, replicas=1).start()
    agents = Agents(tmp_path)
    try:
        create_topic(cluster.namesrv_addr, TOPIC)
        deadline = time.monotonic() + 30
        for ns in cluster.namesrv_addr.split(";"):  # the client asks either NameServer for the route
            route = wait_route(ns, TOPIC)
            while {q["brokerName"] for q in route.get("queueDatas", [])} != {"broker-a", "broker-b"}:
                assert time.monotonic() < deadline, f"{ns}: route of {TOPIC} still {route}"
                time.sleep(0.05)
                route = wait_route(ns, TOPIC)
        p = agents.new("producer")
        p.call("producer_start", group=uniq("PG"), namesrv=cluster.namesrv_addr)
        sent = send_acknowledged(p, [msg(TOPIC, f"before-{i}") for i in range(20)])
        assert all(_ok(r) for r in sent), sent[:3]
        os.kill(cluster.pids["broker-a-0"], signal.SIGKILL)
        killed = time.monotonic()
        acked: set[bytes] = set()
        failed = 0
        streak = 0
        i = 0
        while streak < 40:  # until 40 sends in a row are acknowledged
            assert time.monotonic() - killed < 60, f"{failed} failed, streak {streak}"
            body = f"after-{i}"
            i += 1
            r = p.call("send", mode="sync", collect_errors=True, messages=[msg(TOPIC, body)])[0]
            if _ok(r):
                acked.add(body.encode())
                streak += 1
            else:
                failed += 1
                streak = 0
        took = time.monotonic() - killed
        print(f"\nofficial client: {failed} sends failed after the kill; 40 in a row acknowledged {took:.2f} s after it")
        assert acked - run(_pull_bodies(cluster.addrs["broker-b-0"])) == set()  # all on broker-b, none lost
        p.close()
    finally:
        cluster.stop()
        cluster.kill_children()
