"""Scheduled messages across a controller-mode failover: the master is SIGKILLed with timer messages and delay
levels pending; the replica elected in its place switches role at runtime and delivers them on time, once
(docs/replication.md, "Scheduled messages across a failover")."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker.rawclient import pull_cmd, run
from tests.controller.support import Etcd
from tests.controller.test_failover import Replica, _master
from tests.ha.support import NameServer, wait_info
from tests.ha.test_timer_failover import PRECISION_MS, TOPIC, after_the_promotion, before_the_crash
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

# The election takes the lease TTL (3 s) and a tick or two: the late messages fall due well after it.
LATE_MS = 9000
LEVEL2_MS = 11000


def test_replica_elected_after_a_sigkill_delivers_pending_scheduled_messages_on_time_once(
        tmp_path: Path, etcd: Etcd) -> None:
    with NameServer(tmp_path / "ns") as ns:
        replicas = [Replica(tmp_path / f"r{i}", ns.namesrv_addr, i, etcd) for i in (1, 2)]
        for r in replicas:
            r.settings.update({"timerWheelEnable": "true", "timerPrecisionMs": str(PRECISION_MS),
                               "messageDelayLevel": f"1s {LEVEL2_MS // 1000}s"})
        try:
            for r in replicas:
                r.start()
            run(_scenario(replicas), 120)
        finally:
            for r in replicas:
                r.kill()


async def _scenario(replicas: list[Replica]) -> None:
    client = RemotingClient()
    try:
        old = await _master(client, replicas)
        resp = await client.invoke(old.broker_addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": TOPIC, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        await wait_info(client, old.broker_addr, "SyncStateSet {1,2}", lambda t: t.get("controllerSyncStateSet") == "1,2", 30)
        other = next(r for r in replicas if r is not old)
        await _wait_topic(client, other.broker_addr)
        sent = await before_the_crash(old.broker_addr, [other.broker_addr], LATE_MS, LEVEL2_MS)
        old.kill()
        new = await _master(client, [other], 15)
        await after_the_promotion(new.broker_addr, sent)
    finally:
        await client.close()


async def _wait_topic(client: RemotingClient, addr: str) -> None:
    """Until the slave serves the topic: SlaveSynchronize copies its config at the slave's start and then
    every 10 s."""
    deadline = asyncio.get_running_loop().time() + 20
    while (await client.invoke(addr, pull_cmd(TOPIC, 0, 0), 5)).code == ResponseCode.TOPIC_NOT_EXIST:
        assert asyncio.get_running_loop().time() < deadline, "the topic config never reached the slave"
        await asyncio.sleep(0.2)
