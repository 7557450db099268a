"""``tidalmq cluster`` (docs/cluster.md): the plan it writes, and a real two-group cluster in which the
producer moves to the other group when one group's master dies (RocketMQ's sendLatencyFaultEnable)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.broker.rawclient import pull_bodies, run
from tests.cluster.support import Cluster
from tidalmq.client import Message, Producer, SendStatus
from tidalmq.client.admin import Admin
from tidalmq.cluster import broker_name, plan_cluster, render_conf
from tidalmq.common.config import load_properties_file
from tidalmq.remoting.transport import RemotingClient


def test_plan_gives_each_replica_its_own_ports_dir_and_broker_conf(tmp_path: Path) -> None:
    plan = plan_cluster(groups=3, replicas=2, data_dir=tmp_path, base_port=20000)
    assert plan.namesrv_addr == "127.0.0.1:20000;127.0.0.1:20001"
    brokers = plan.brokers
    assert [(b.conf["brokerName"], b.conf["brokerId"], b.conf["brokerRole"]) for b in brokers] == [
        ("broker-a", "0", "SYNC_MASTER"), ("broker-a", "1", "SLAVE"), ("broker-b", "0", "SYNC_MASTER"),
        ("broker-b", "1", "SLAVE"), ("broker-c", "0", "SYNC_MASTER"), ("broker-c", "1", "SLAVE")]
    ports = [int(b.conf[k]) for b in brokers for k in ("listenPort", "haListenPort")]
    assert len(set(ports)) == len(ports) and min(ports) > 20001
    assert len({b.data_dir for b in brokers}) == len(brokers)
    assert all(b.conf["namesrvAddr"] == plan.namesrv_addr for b in brokers)
    # the file is RocketMQ's properties format, read back by the broker's own loader
    path = tmp_path / "broker.conf"
    path.write_text(render_conf(brokers[1].conf))
    assert load_properties_file(str(path)) == brokers[1].conf


def test_plan_in_controller_mode_starts_etcd_unless_given_and_numbers_replicas_from_one(tmp_path: Path) -> None:
    plan = plan_cluster(groups=1, replicas=3, data_dir=tmp_path, base_port=20000, controller=True)
    assert [p.kind for p in plan.processes] == ["namesrv", "namesrv", "etcd", "broker", "broker", "broker"]
    assert [b.conf["brokerId"] for b in plan.brokers] == ["1", "2", "3"]
    assert all(b.conf["enableControllerMode"] == "true" and b.conf["controllerEtcdEndpoints"] == plan.etcd_endpoints
               for b in plan.brokers)
    given = plan_cluster(groups=1, replicas=3, data_dir=tmp_path, base_port=20000, controller=True,
                         etcd_endpoints="http://10.0.0.5:2379")
    assert "etcd" not in [p.kind for p in given.processes]
    assert given.brokers[0].conf["controllerEtcdEndpoints"] == "http://10.0.0.5:2379"


def test_plan_refuses_what_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="65536"):
        plan_cluster(groups=10, replicas=3, data_dir=tmp_path, base_port=65300)
    with pytest.raises(ValueError, match=">= 1"):
        plan_cluster(groups=0, replicas=1, data_dir=tmp_path, base_port=20000)
    assert [broker_name(i) for i in (0, 25, 26)] == ["broker-a", "broker-z", "broker-aa"]


TOPIC = "ClusterTopic"
QUEUES = 4


async def _pull_bodies(addr: str) -> set[bytes]:
    client = RemotingClient()
    try:
        return await pull_bodies(client, addr, TOPIC, QUEUES)
    finally:
        await client.close()


async def _produce_across_a_master_death(cluster: Cluster) -> tuple[set[bytes], float, list[str]]:
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, QUEUES)
        deadline = time.monotonic() + 20  # both NameServers name both groups once each master registered it
        while {q["brokerName"] for q in (await admin.route(TOPIC)).get("queueDatas", [])} != {"broker-a", "broker-b"}:
            assert time.monotonic() < deadline, await admin.route(TOPIC)
            await asyncio.sleep(0.1)
    acked: set[bytes] = set()
    async with Producer("PG_cluster", cluster.namesrv_addr, send_timeout=3.0) as producer:
        # SYNC_MASTER holds each send until its slave has connected and reported (FLUSH_SLAVE_TIMEOUT after
        # syncFlushTimeout, or the client's timeout): send until a run of 40 is
        # acknowledged SEND_OK on both groups. Only SEND_OK counts as acknowledged.
        streak: list[str] = []
        deadline = time.monotonic() + 30
        i = 0
        while len(streak) < 40 or set(streak) != {"broker-a", "broker-b"}:
            assert time.monotonic() < deadline, streak
            body = f"before-{i}".encode()
            i += 1
            r = await producer.send(Message(TOPIC, body))
            if r.status == SendStatus.SEND_OK:
                acked.add(body)
                streak.append(r.message_queue.broker_name)
            else:
                streak.clear()
        # A slave serves a topic once SlaveSynchronize has copied its config from the master (every 10 s):
        # wait for that, or broker-a's messages could not be read back after its master is gone.
        deadline = time.monotonic() + 30
        while not (await _pull_bodies(cluster.addrs["broker-a-1"])):
            assert time.monotonic() < deadline, "broker-a's slave never served the topic"
            await asyncio.sleep(0.2)
        os.kill(cluster.pids["broker-a-0"], signal.SIGKILL)
        killed = time.monotonic()
        # From the kill on: every send is acknowledged (the failed try is retried on broker-b, and broker-a
        # is then avoided), and a run of 40 in a row lands on broker-b within a bounded time.
        after: list[str] = []
        i = 0
        while time.monotonic() - killed < 20:
            body = f"after-{i}".encode()
            r = await producer.send(Message(TOPIC, body))
            assert r.status == SendStatus.SEND_OK
            acked.add(body)
            after.append(r.message_queue.broker_name)
            i += 1
            if len(after) >= 40 and set(after[-40:]) == {"broker-b"}:
                break
        return acked, time.monotonic() - killed, after


@pytest.mark.timeout(180)
def test_producer_moves_to_the_other_group_when_a_master_dies_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c").start()
    try:
        assert set(cluster.pids) == {"namesrv-0", "namesrv-1", "broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"}
        for name in ("broker-a-0", "broker-b-1"):  # each process's generated conf is in its own dir
            conf = load_properties_file(str(tmp_path / "c" / name / "broker.conf"))
            assert conf["listenPort"] == cluster.addrs[name].rsplit(":", 1)[1]
        acked, took, after = run(_produce_across_a_master_death(cluster), 120)
        assert set(after[-40:]) == {"broker-b"}, after
        assert took < 15, took
        # the supervisor reports the dead child and keeps the others running
        cluster.wait_line(re.compile(r"broker-a-0 exited with code -9"), 10)
        # every acknowledged message is on broker-b's master or broker-a's slave (SYNC_MASTER)
        stored = run(_pull_bodies(cluster.addrs["broker-b-0"])) | run(_pull_bodies(cluster.addrs["broker-a-1"]))
        assert acked - stored == set()
        assert cluster.stop() == 0
        assert "TidalMQ cluster stopped" in cluster.lines
        for pid in cluster.pids.values():  # SIGTERM stopped every child
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        cluster.stop()
        cluster.kill_children()


async def _master_of(namesrv: str, not_addr: str = "", timeout: float = 30.0) -> str:
    """broker-a's brokerId 0 in the NameServer's cluster info, once it is not ``not_addr``."""
    deadline = time.monotonic() + timeout
    async with Admin(namesrv) as admin:
        while True:
            addrs = (await admin.cluster_info()).get("brokerAddrTable", {}).get("broker-a", {}).get("brokerAddrs", {})
            master = addrs.get("0") or addrs.get(0) or ""
            if master and master != not_addr:
                return str(master)
            assert time.monotonic() < deadline, addrs
            await asyncio.sleep(0.2)


async def _wait_sync_state_set(namesrv: str, master: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with Admin(namesrv) as admin:
        while (await admin.broker_runtime_info(master)).get("controllerSyncStateSet") != "1,2,3":
            assert time.monotonic() < deadline, await admin.broker_runtime_info(master)
            await asyncio.sleep(0.2)


@pytest.mark.timeout(180)
def test_controller_cluster_elects_a_master_and_another_after_it_dies(tmp_path: Path) -> None:
    if shutil.which("etcd") is None:
        pytest.skip("etcd binary missing: run scripts/setup-system.sh as root (apt-get install etcd-server)")
    cluster = Cluster(tmp_path / "c", "--controller", "--set", "controllerLeaseTtlSeconds=3",
                      groups=1, replicas=3).start()
    try:
        assert "etcd" in cluster.pids
        first = run(_master_of(cluster.namesrv_addr))
        name = next(n for n, a in cluster.addrs.items() if a == first)
        run(_wait_sync_state_set(cluster.namesrv_addr, first))  # only a replica in the set may be elected
        os.kill(cluster.pids[name], signal.SIGKILL)
        second = run(_master_of(cluster.namesrv_addr, not_addr=first))  # elected through the etcd it started
        assert second in {cluster.addrs[f"broker-a-{r}"] for r in range(3)} - {first}
        assert cluster.stop() == 0
        for pid in cluster.pids.values():
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        cluster.stop()
        cluster.kill_children()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(120)
def test_children_stop_when_the_supervisor_is_sigkilled(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c", groups=1, replicas=1).start()
    abort = tmp_path / "c" / "broker-a-0" / "store" / "abort"  # RocketMQ's "running, not shut down" mark
    try:
        assert set(cluster.pids) == {"namesrv-0", "namesrv-1", "broker-a-0"}
        assert abort.exists()
        assert cluster.proc is not None
        cluster.proc.kill()  # nothing of the supervisor runs: no SIGTERM handler, no stop()
        cluster.proc.wait(10)
        deadline = time.monotonic() + 45
        while not all(_gone(pid) for pid in cluster.pids.values()):
            assert time.monotonic() < deadline, {n: p for n, p in cluster.pids.items() if not _gone(p)}
            time.sleep(0.1)
        # they stopped as on an operator's SIGTERM: the broker's shutdown ran to its end
        assert not abort.exists()
    finally:
        cluster.kill_children()
