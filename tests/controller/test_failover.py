"""Controller mode end to end: three ``tidalmq broker`` replicas, a NameServer and a real etcd, separate
processes on loopback ports in temp dirs (docs/replication.md, "Controller mode")."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.broker.rawclient import pull_bodies, run, send_cmd
from tests.controller.support import Etcd
from tests.ha.support import NameServer, Slave, commit_log_bytes, info, wait_info
from tests.support import Standalone, free_port
from tidalmq.client import ConsumeFromWhere, MessageExt, PushConsumer
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient, RemotingError

TOPIC = "CtlTopic"
QUEUES = 4
PULL_BATCH = 32


R = TypeVar("R", bound=Standalone)  # a replica: a broker the tests start in controller mode


class Replica(Slave):
    """A controller-mode broker: brokerId is its replica id; it starts as a slave."""

    def __init__(self, data_dir: Path, namesrv_addr: str, broker_id: int, etcd: Etcd) -> None:
        super().__init__(data_dir, namesrv_addr, {
            "brokerRole": "SYNC_MASTER", "brokerId": str(broker_id), "enableControllerMode": "true",
            "controllerEtcdEndpoints": etcd.endpoint, "controllerLeaseTtlSeconds": "3",
            "haListenPort": str(free_port()), "syncFlushTimeout": "1000", "haSendHeartbeatInterval": "1000"})


async def _current_master(client: RemotingClient, replicas: Sequence[R]) -> R | None:
    """The running replica that says it is the master, or None (one look at each)."""
    for r in replicas:
        if r.proc is not None and r.proc.poll() is None:
            try:
                if (await info(client, r.broker_addr)).get("controllerIsMaster") == "true":
                    return r
            except (RemotingError, OSError, TimeoutError):
                pass
    return None


async def _master(client: RemotingClient, replicas: Sequence[R], timeout: float = 20.0) -> R:
    deadline = time.monotonic() + timeout
    while True:
        found = await _current_master(client, replicas)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError("no master elected within the timeout")
        await asyncio.sleep(0.1)


class Load:
    """Sends one message at a time to whichever replica is master; keeps what was acknowledged."""

    def __init__(self, client: RemotingClient, replicas: Sequence[Standalone]) -> None:
        self.client = client
        self.replicas = replicas
        self.acked: list[bytes] = []
        self.first_ok_after: dict[float, float] = {}
        self.stop = asyncio.Event()
        self.n = 0

    async def run(self) -> None:
        master = ""
        while not self.stop.is_set():
            if not master:
                found = await _current_master(self.client, self.replicas)
                if found is None:
                    await asyncio.sleep(0.1)
                    continue
                master = found.broker_addr
            body = f"m{self.n}".encode()
            self.n += 1
            started = time.monotonic()
            try:
                resp = await self.client.invoke(master, send_cmd(TOPIC, body, queue_id=self.n % QUEUES), 3)
            except (RemotingError, OSError, TimeoutError):
                master = ""
                continue
            if resp.code == ResponseCode.SUCCESS:
                self.acked.append(body)
                now = time.monotonic()
                for mark in self.first_ok_after:
                    # Only a send made after the kill: an answer already on its way from the dead
                    # master does not count.
                    if self.first_ok_after[mark] == 0 and started > mark:
                        self.first_ok_after[mark] = now - mark
            elif resp.code == ResponseCode.SERVICE_NOT_AVAILABLE:
                master = ""  # a slave, or a fenced old master

    def mark(self) -> float:
        t = time.monotonic()
        self.first_ok_after[t] = 0
        return t


class Consumption:
    """A clustering PushConsumer committing its offsets as it goes, run across failovers; counts what it
    receives per message body."""

    def __init__(self, namesrv_addr: str) -> None:
        self.received: Counter[bytes] = Counter()
        self.consumer = PushConsumer("CtlGroup", namesrv_addr, listener=self._on, pull_batch_size=PULL_BATCH,
                                     consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        self.consumer.subscribe(TOPIC)

    async def _on(self, msgs: list[MessageExt]) -> None:
        self.received.update(bytes(m.body) for m in msgs)

    async def check(self, acked: list[bytes], failovers: int) -> None:
        """The consumer resumed from each new master: it gets every acknowledged message, and what it
        gets twice is at most one pull batch per queue per failover (the batches in flight at a kill)."""
        await _wait(lambda: all(self.received[b] for b in acked), 60, "the consumer got every acknowledged message")
        twice = sum(n - 1 for n in self.received.values())
        assert twice <= failovers * PULL_BATCH * QUEUES, f"{twice} messages received twice over {failovers} failovers"
        print(f"\nconsumer across {failovers} failovers: {len(self.received)} messages, {twice} received twice")


async def _pull_all(client: RemotingClient, addr: str) -> set[bytes]:
    return await pull_bodies(client, addr, TOPIC, QUEUES)


def test_sigkill_the_master_a_replica_from_the_sync_state_set_takes_over_and_the_old_one_truncates(
        tmp_path: Path, etcd: Etcd) -> None:
    with NameServer(tmp_path / "ns") as ns:
        replicas = [Replica(tmp_path / f"r{i}", ns.namesrv_addr, i, etcd) for i in (1, 2, 3)]
        try:
            for r in replicas:
                r.start()
            run(_scenario(replicas, ns.namesrv_addr), 180)
        finally:
            for r in replicas:
                r.kill()


async def _scenario(replicas: list[Replica], namesrv_addr: str) -> None:
    client = RemotingClient()
    consumption = Consumption(namesrv_addr)
    try:
        first = await _master(client, replicas)
        resp = await client.invoke(first.broker_addr, RemotingCommand(
            code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
                "topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"}), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        load = Load(client, replicas)
        sender = asyncio.create_task(load.run())
        await consumption.consumer.start()
        # Round 1: the master dies under load, both slaves alive.
        took1, cut1 = await _failover(client, replicas, load, diverge=False)
        # Round 2: the master (round 1's winner) first appends what no replica has, then dies.
        took2, cut2 = await _failover(client, replicas, load, diverge=True)
        assert cut2 > 0, "the old master had a divergent tail and must have cut it"
        load.stop.set()
        await sender
        await consumption.check(load.acked, failovers=2)
        print(f"\nfailover: a send acknowledged by the new master {took1:.2f} s after the SIGKILL "
              f"(round 2, slaves restarted: {took2:.2f} s); {len(load.acked)} acknowledged, 0 lost; "
              f"old masters truncated {cut1} and {cut2} bytes")
    finally:
        await consumption.consumer.shutdown()
        await client.close()


async def _failover(client: RemotingClient, replicas: list[Replica], load: Load, *, diverge: bool) -> tuple[float, int]:
    """SIGKILL the master under load; returns (seconds to the first send the new master acknowledged,
    bytes the old master cut when it rejoined). Checks that no acknowledged message is lost and that
    every replica ends with the new master's CommitLog, byte for byte."""
    old = await _master(client, replicas)
    await wait_info(client, old.broker_addr, "SyncStateSet {1,2,3}",
                    lambda t: t.get("controllerSyncStateSet") == "1,2,3", 30)
    others = [r for r in replicas if r is not old]
    n0 = len(load.acked)
    await _wait(lambda: len(load.acked) >= n0 + 200, 30, "200 acknowledged sends")
    if diverge:
        # Both slaves die (SIGKILL), the master appends what no replica has (answered
        # FLUSH_SLAVE_TIMEOUT, not SEND_OK), then dies too — well within the lease TTL, so the
        # SyncStateSet still holds the slaves. They restart and elect one of themselves.
        for r in others:
            r.kill()
        before = int((await info(client, old.broker_addr))["commitLogMaxOffset"])
        await _wait_info_grows(client, old.broker_addr, before)
    old.kill()
    killed_at = load.mark()
    if diverge:
        for r in others:
            r.start()
    acked_before_kill = len(load.acked)

    new = await _master(client, others, 15)
    await _wait(lambda: load.first_ok_after[killed_at] > 0, 15, "a send acknowledged by the new master")
    took = load.first_ok_after[killed_at]
    assert took < 10.0, f"the new master took {took:.1f} s to acknowledge a send"
    await _wait(lambda: len(load.acked) >= acked_before_kill + 100, 30, "100 sends on the new master")

    # Every acknowledged message so far is readable from the new master (once its reput has queued
    # the newest: a pull may come before them).
    acked = list(load.acked)
    deadline = time.monotonic() + 10
    while True:
        got = await _pull_all(client, new.broker_addr)
        lost = [b for b in acked if b not in got]
        if not lost or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages missing: {lost[:5]}"

    # The old master restarts and rejoins as a slave: any tail of its own cut, then a byte-for-byte copy.
    old.start()
    t = await wait_info(client, old.broker_addr, "the old master rejoined as a slave",
                        lambda t: t.get("controllerMasterBrokerId") == new.settings["brokerId"]
                        and t.get("haConnectedToMaster") == "true", 30)
    assert t["controllerIsMaster"] == "false" and t["brokerRole"] == "SLAVE"
    end = int((await info(client, new.broker_addr))["commitLogMaxOffset"])
    for r in others + [old]:
        if r is not new:
            await wait_info(client, r.broker_addr, "caught up with the new master",
                            lambda t: int(t["commitLogMaxOffset"]) >= end, 30)
            assert commit_log_bytes(r.data_dir, end) == commit_log_bytes(new.data_dir, end)
    return took, int(t["controllerTruncatedBytes"])


async def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def _wait_info_grows(client: RemotingClient, addr: str, before: int) -> None:
    await wait_info(client, addr, "an append no slave has", lambda t: int(t["commitLogMaxOffset"]) > before, 10)
