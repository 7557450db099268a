"""The reference harness itself: Apache RocketMQ starts on free loopback ports, and Apache's mqadmin
reaches both it and TidalMQ."""

from __future__ import annotations

from pathlib import Path

from tests.reference.apache import ApacheRocketMQ, mqadmin


def test_apache_mqadmin_lists_each_servers_broker(server: ApacheRocketMQ, rocketmq_jars: Path, tmp_path: Path) -> None:
    out = mqadmin(rocketmq_jars, tmp_path, ["clusterList", "-n", server.namesrv_addr])
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0].split("  ")
    assert header[0] == "#Cluster Name"
    assert server.broker_addr in out.stdout, out.stdout
