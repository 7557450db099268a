"""Controller mode with its three replicas on three hosts (network namespaces, tests/netns/hosts.py); etcd and
the NameServer in the root namespace on the bridge. Under load: the master SIGKILLed, then the new master cut
off by its link going down; each time a replica from the SyncStateSet acknowledges sends within 10 s, nothing
acknowledged is lost, and the old master, restarted, rejoins as a slave with the new master's CommitLog.
Scheduled messages pending at the kill (timer messages and a delay level) are delivered on time and once by
the new master. Slow suite: ``pytest tests/netns --run-slow`` as root."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.broker.rawclient import run, send_cmd
from tests.controller.support import Etcd
from tests.controller.test_failover import QUEUES, TOPIC, Consumption, Load, _master, _pull_all, _wait
from tests.controller.test_timer_failover import LATE_MS, LEVEL2_MS, _wait_topic
from tests.ha.support import commit_log_bytes, info, wait_info
from tests.ha.test_timer_failover import PRECISION_MS, after_the_promotion, before_the_crash
from tests.ha.test_timer_failover import TOPIC as TIMER_TOPIC
from tests.netns.hosts import Hosts
from tests.support import Standalone, free_port
from tidalmq.cluster import render_conf
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.timeout(300)]


class HostReplica(Standalone):
    """``tidalmq broker`` in controller mode on test host ``i``, from a broker.conf in its data dir."""

    ready_line = re.compile(r"broker \S+ ready on")

    def __init__(self, hosts: Hosts, i: int, base: Path, namesrv: str, etcd: str) -> None:
        d = base / f"host{i}"
        super().__init__(d)
        self.hosts, self.i = hosts, i
        port = 10911 if hosts.netns else free_port()
        ha = 10912 if hosts.netns else free_port()
        self.settings = {"brokerName": "broker-a", "brokerId": str(i + 1), "brokerRole": "SYNC_MASTER",
                         "enableControllerMode": "true", "controllerEtcdEndpoints": etcd,
                         "controllerLeaseTtlSeconds": "3", "namesrvAddr": namesrv, "brokerIP1": hosts.addr(i),
                         "listenPort": str(port), "haListenPort": str(ha), "syncFlushTimeout": "1000",
                         "haSendHeartbeatInterval": "1000", "mappedFileSizeCommitLog": "1048576", "maxMessageSize": "262144",
                         "timerWheelEnable": "true", "timerPrecisionMs": str(PRECISION_MS),
                         "messageDelayLevel": f"1s {LEVEL2_MS // 1000}s"}
        self.addr = f"{hosts.addr(i)}:{port}"

    @property
    def broker_addr(self) -> str:
        return self.addr

    def command(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "broker.conf").write_text(render_conf(self.settings))
        return [*self.hosts.prefix(self.i), sys.executable, "-m", "tidalmq.cli", "broker", "-c",
                str(self.data_dir / "broker.conf"), "--data-dir", str(self.data_dir), "--host", self.hosts.addr(self.i)]


async def _failover(client: RemotingClient, replicas: list[HostReplica], load: Load, how: str) -> float:
    old = await _master(client, replicas, 30)
    await wait_info(client, old.broker_addr, "SyncStateSet {1,2,3}",
                    lambda t: t.get("controllerSyncStateSet") == "1,2,3", 30)
    n0 = len(load.acked)
    await _wait(lambda: len(load.acked) >= n0 + 200, 30, "200 acknowledged sends")
    others = [r for r in replicas if r is not old]
    scheduled: dict[bytes, int] | None = None
    if how == "kill":  # scheduled messages pending at the kill: the new master delivers them
        for r in others:
            await _wait_topic(client, r.broker_addr)
        scheduled = await before_the_crash(old.broker_addr, [r.broker_addr for r in others], LATE_MS, LEVEL2_MS)
        old.kill()
    else:
        old.hosts.down(old.i)  # a partition: the process runs on, cut off from etcd, NameServer and slaves
    mark = load.mark()
    # The load looks for the master among the reachable replicas (as a client does through the route):
    # probing a host whose link is down costs a connect timeout per try.
    load.replicas = [r for r in replicas if r is not old]
    acked_before = len(load.acked)
    new = await _master(client, others, 20)
    print(f"\n{how}: replica {new.settings['brokerId']} master {time.monotonic() - mark:.2f} s after it")
    if scheduled is not None:
        await after_the_promotion(new.broker_addr, scheduled)
    await _wait(lambda: load.first_ok_after[mark] > 0, 20, "a send acknowledged by the new master")
    took = load.first_ok_after[mark]
    assert took < 10.0, f"{how}: the new master took {took:.1f} s"
    await _wait(lambda: len(load.acked) >= acked_before + 100, 30, "100 sends on the new master")
    acked = list(load.acked)
    deadline = time.monotonic() + 10
    while True:
        lost = set(acked) - await _pull_all(client, new.broker_addr)
        if not lost or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert not lost, f"{how}: {len(lost)} of {len(acked)} acknowledged messages missing"
    if how == "partition":
        old.hosts.up(old.i)
        # Fenced once its lease ran out: it refuses sends (restarted, it rejoins below). A new connection:
        # the load client's one to it is stuck in the retransmissions of the partition.
        probe = RemotingClient()
        resp = await probe.invoke(old.broker_addr, send_cmd(TOPIC, b"to-the-old-master"), 10)
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE, (resp.code, resp.remark)
        old.kill()
        await probe.close()
    old.start()
    probe = RemotingClient() if how == "partition" else client
    load.replicas = replicas
    t = await wait_info(probe, old.broker_addr, "the old master rejoined as a slave",
                        lambda t: t.get("controllerMasterBrokerId") == new.settings["brokerId"]
                        and t.get("haConnectedToMaster") == "true", 30)
    assert t["brokerRole"] == "SLAVE"
    end = int((await info(client, new.broker_addr))["commitLogMaxOffset"])
    await wait_info(probe, old.broker_addr, "caught up", lambda t: int(t["commitLogMaxOffset"]) >= end, 30)
    assert commit_log_bytes(old.data_dir, end) == commit_log_bytes(new.data_dir, end)
    if probe is not client:
        load.client = probe  # the load's next sends to this host go through a connection made after the partition
    return took


async def _scenario(replicas: list[HostReplica], partition: bool, namesrv_addr: str) -> list[float]:
    client = RemotingClient()
    consumption = Consumption(namesrv_addr)
    try:
        first = await _master(client, replicas, 30)
        resp = await client.invoke(first.broker_addr, RemotingCommand(
            code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
                "topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"}), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp = await client.invoke(first.broker_addr, RemotingCommand(
            code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
                "topic": TIMER_TOPIC, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        load = Load(client, replicas)
        sender = asyncio.create_task(load.run())
        await consumption.consumer.start()
        took = [await _failover(client, replicas, load, "kill")]
        if partition:
            took.append(await _failover(client, replicas, load, "partition"))
        load.stop.set()
        await sender
        if load.client is not client:
            await load.client.close()
        await consumption.check(load.acked, failovers=len(took))
        print(f"\nnetns controller failover: first acknowledged send after kill/partition {took} s; "
              f"{len(load.acked)} acknowledged, 0 lost")
        return took
    finally:
        await consumption.consumer.shutdown()
        await client.close()


def test_controller_failover_across_hosts_by_kill_and_by_partition(hosts3: Hosts, tmp_path: Path) -> None:
    root = f"10.231.{hosts3.subnet}.254" if hosts3.netns else "127.0.0.1"
    etcd = Etcd(tmp_path / "etcd", host=root).start()
    ns_port = free_port()
    ns = subprocess.Popen([sys.executable, "-m", "tidalmq.cli", "namesrv", "--host", root, "-p", str(ns_port),
                           "--data-dir", str(tmp_path / "ns")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    replicas = [HostReplica(hosts3, i, tmp_path, f"{root}:{ns_port}", etcd.endpoint) for i in range(3)]
    try:
        for r in replicas:
            r.start()
        # Without namespaces there is no link to cut: the partition round needs them (the log says so).
        run(_scenario(replicas, partition=hosts3.netns, namesrv_addr=f"{root}:{ns_port}"), 280)
    finally:
        for r in replicas:
            r.kill()
        ns.kill()
        ns.wait(10)
        etcd.stop()
