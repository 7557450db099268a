"""SYNC_MASTER in controller mode waits for the SyncStateSet (RocketMQ 5's allAckInSyncStateSet,
minInSyncReplicas): three replicas, a NameServer and a real etcd (docs/replication.md, "What a SYNC_MASTER
waits for")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.broker.rawclient import pull_cmd, records, run, send_cmd
from tests.controller.support import Etcd
from tests.controller.test_failover import Replica, _master
from tests.ha.support import NameServer, info, wait_info
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

TOPIC = "SssTopic"


def _group(tmp_path: Path, ns: NameServer, etcd: Etcd, **keys: str) -> list[Replica]:
    replicas = [Replica(tmp_path / f"r{i}", ns.namesrv_addr, i, etcd) for i in (1, 2, 3)]
    for r in replicas:
        r.settings.update({"syncStateSetMaxLagMs": "2000", **keys})
    return replicas


async def _setup(client: RemotingClient, replicas: list[Replica]) -> Replica:
    """The elected master, once all three replicas are in its SyncStateSet and the topic exists."""
    master = await _master(client, replicas)
    resp = await client.invoke(master.broker_addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
        "topic": TOPIC, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}), 5)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await wait_info(client, master.broker_addr, "SyncStateSet {1,2,3}",
                    lambda t: t.get("controllerSyncStateSet") == "1,2,3", 30)
    return master


async def _send(client: RemotingClient, addr: str, body: bytes) -> RemotingCommand:
    return await client.invoke(addr, send_cmd(TOPIC, body), 10)


def test_all_ack_in_sync_state_set_waits_for_every_member_until_the_set_shrinks(tmp_path: Path, etcd: Etcd) -> None:
    with NameServer(tmp_path / "ns") as ns:
        replicas = _group(tmp_path, ns, etcd, allAckInSyncStateSet="true")
        try:
            for r in replicas:
                r.start()
            run(_all_ack(replicas), 90)
        finally:
            for r in replicas:
                r.kill()


async def _all_ack(replicas: list[Replica]) -> None:
    client = RemotingClient()
    try:
        master = await _setup(client, replicas)
        resp = await _send(client, master.broker_addr, b"all-three")
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        stopped, kept = [r for r in replicas if r is not master]
        stopped.pause()  # SIGSTOP: connected, silent
        try:
            # Still in the SyncStateSet: one member has not acknowledged, the send is not SEND_OK (the
            # old one-slave rule would have answered SEND_OK with the other slave's ack).
            resp = await _send(client, master.broker_addr, b"while-stopped")
            assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (resp.code, resp.remark)
            t = await wait_info(client, master.broker_addr, "the stopped replica to leave the SyncStateSet",
                                lambda t: t.get("controllerSyncStateSet") not in ("1,2,3", None), 30)
            assert t["controllerSyncStateSet"] == ",".join(sorted(
                {master.settings["brokerId"], kept.settings["brokerId"]}))
            started = time.monotonic()
            resp = await _send(client, master.broker_addr, b"after-shrink")
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
            assert time.monotonic() - started < 1.0  # acknowledged by the remaining member, no timeout
            # What the master acknowledged is on the replica still in the set: in its CommitLog when it
            # acknowledged, in its ConsumeQueue once its reput has dispatched it (asynchronous, as in RocketMQ).
            deadline = time.monotonic() + 10
            while True:
                got = await client.invoke(kept.broker_addr, pull_cmd(TOPIC, 0, 0, max_nums=32), 10)
                bodies = {bytes(m.body) for m in records(got.body_bytes())} if got.code == ResponseCode.SUCCESS else set()
                if b"after-shrink" in bodies:
                    break
                assert time.monotonic() < deadline, f"not pullable from {kept.broker_addr}: [{got.code}] {bodies}"
                await asyncio.sleep(0.05)
        finally:
            stopped.resume()
    finally:
        await client.close()


def test_min_in_sync_replicas_refuses_sends_once_the_set_is_too_small(tmp_path: Path, etcd: Etcd) -> None:
    with NameServer(tmp_path / "ns") as ns:
        replicas = _group(tmp_path, ns, etcd, minInSyncReplicas="3", inSyncReplicas="3")
        try:
            for r in replicas:
                r.start()
            run(_min_in_sync(replicas), 90)
        finally:
            for r in replicas:
                r.kill()


async def _min_in_sync(replicas: list[Replica]) -> None:
    client = RemotingClient()
    try:
        master = await _setup(client, replicas)
        resp = await _send(client, master.broker_addr, b"three-in-sync")
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        gone = next(r for r in replicas if r is not master)
        gone.kill()
        await wait_info(client, master.broker_addr, "the dead replica to leave the SyncStateSet",
                        lambda t: len(t.get("controllerSyncStateSet", "").split(",")) == 2, 30)
        before = int((await info(client, master.broker_addr))["commitLogMaxOffset"])
        resp = await _send(client, master.broker_addr, b"two-in-sync")
        assert resp.code == ResponseCode.SYSTEM_ERROR, (resp.code, resp.remark)
        assert resp.remark == "in-sync replicas not enough"
        assert int((await info(client, master.broker_addr))["commitLogMaxOffset"]) == before, "nothing stored"
    finally:
        await client.close()
