"""Scheduled messages across a failover in static mode: the master is SIGKILLed, its slave restarted as master
delivers what was pending — timer messages (arbitrary deliver times) and delay levels — on time, never early,
and nothing the old master had delivered (and replicated) a second time (docs/replication.md, "Scheduled
messages across a failover")."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from tests.broker.rawclient import pull_cmd, records, run, send_cmd
from tests.ha.support import NameServer, Slave, info, wait_caught_up, wait_info
from tidalmq.common import message as mc
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

TOPIC = "TimerHa"
PRECISION_MS = 100
# Level 1 falls due before the kill, level 2 after the promotion; the late timer messages from LATE_MS on.
LATE_MS = 7000
SCHEDULE = {"timerWheelEnable": "true", "timerPrecisionMs": str(PRECISION_MS), "messageDelayLevel": "1s 10s"}
# A loaded 2-core machine: a delivery may come this much later than one precision tick.
SLACK_MS = 700


def _master(data_dir: Path, namesrv: str, role: str) -> Slave:
    """A ``tidalmq broker`` master (the Slave helper with a master's role)."""
    return Slave(data_dir, namesrv, {"brokerRole": role, "brokerId": "0", "haListenPort": "0", **SCHEDULE})


def test_slave_restarted_as_master_delivers_pending_scheduled_messages_on_time_once(tmp_path: Path) -> None:
    with NameServer(tmp_path / "ns") as ns:
        master = _master(tmp_path / "m", ns.namesrv_addr, "SYNC_MASTER").start()
        try:
            run(_create_topic(master.broker_addr), 20)
            with Slave(tmp_path / "s", ns.namesrv_addr, SCHEDULE) as slave:
                sent = run(before_the_crash(master.broker_addr, [slave.broker_addr], LATE_MS, 10000), 60)
                master.kill()
            promoted = _master(tmp_path / "s", ns.namesrv_addr, "ASYNC_MASTER")
            with promoted:
                run(after_the_promotion(promoted.broker_addr, sent), 60)
        finally:
            master.kill()


async def _create_topic(addr: str) -> None:
    client = RemotingClient()
    try:
        resp = await client.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": TOPIC, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await client.close()


async def _send(client: RemotingClient, addr: str, body: bytes, props: dict[str, str]) -> None:
    props = {mc.UNIQ_KEY: uuid.uuid4().hex.upper(), **props}
    resp = await client.invoke(addr, send_cmd(TOPIC, body, props=props), 10)
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)


async def before_the_crash(master: str, slaves: list[str], late_ms: int, level2_ms: int) -> dict[bytes, int]:
    """Sends early (due before the kill) and late (due after the promotion, from ``late_ms`` on) messages;
    waits until the early ones are delivered and everything is on the slaves. Returns each body's due time."""
    client = RemotingClient()
    try:
        await wait_info(client, master, "the slave to connect", lambda t: int(t.get("haConnections", 0)) >= 1)
        now = int(time.time() * 1000)
        due: dict[bytes, int] = {}
        for i in range(10):
            due[b"t-early-%d" % i] = now + 300 + 100 * i
            due[b"t-late-%d" % i] = now + late_ms + 300 * i
        for body, at in due.items():
            await _send(client, master, body, {mc.TIMER_DELIVER_MS: str(at)})
        for i in range(5):
            sent = int(time.time() * 1000)
            await _send(client, master, b"d-early-%d" % i, {mc.DELAY: "1"})
            due[b"d-early-%d" % i] = sent + 1000
            await _send(client, master, b"d-late-%d" % i, {mc.DELAY: "2"})
            due[b"d-late-%d" % i] = sent + level2_ms
        early = sum(1 for b in due if b"early" in b)
        await _wait_delivered(client, master, early, 10)
        for slave in slaves:
            await wait_caught_up(client, master, slave)
            # The slave holds the copies the master delivered, and has delivered nothing of its own (it
            # serves the topic once SlaveSynchronize copied its config: at its start, then every 10 s).
            early_bodies = sorted(b for b in due if b"early" in b)
            deadline = asyncio.get_running_loop().time() + 15
            while (got := sorted(await _pull_bodies(client, slave))) != early_bodies:
                assert asyncio.get_running_loop().time() < deadline, f"the slave holds {got}"
                await asyncio.sleep(0.1)
            assert (await info(client, slave))["brokerRole"] == "SLAVE"
        late = min(at for b, at in due.items() if b"late" in b)
        assert int(time.time() * 1000) < late - late_ms // 2, "the early half took too long: nothing left to test"
        return due
    finally:
        await client.close()


async def after_the_promotion(addr: str, due: dict[bytes, int]) -> None:
    """Every message delivered exactly once by the new master (or before, by the old one), each late one
    within a precision tick (plus SLACK_MS) of its due time, never early."""
    client = RemotingClient()
    try:
        assert int(time.time() * 1000) < min(at for b, at in due.items() if b"late" in b), "promotion too slow"
        got = await _wait_delivered(client, addr, len(due), 20)
        bodies = [bytes(m.body) for m in got]
        assert sorted(bodies) == sorted(due), "every message delivered exactly once"
        for m in got:
            body = bytes(m.body)
            if b"late" in body:
                lateness = m.store_timestamp - due[body]
                assert 0 <= lateness <= PRECISION_MS + SLACK_MS, (body, lateness)
    finally:
        await client.close()


async def _pull_bodies(client: RemotingClient, addr: str) -> list[bytes]:
    return [bytes(m.body) for m in await _pull(client, addr)]


async def _pull(client: RemotingClient, addr: str) -> list:
    out: list = []
    offset = 0
    while True:
        resp = await client.invoke(addr, pull_cmd(TOPIC, 0, offset, max_nums=32), 10)
        if resp.code != ResponseCode.SUCCESS:
            return out
        out += records(resp.body_bytes())
        offset = int(resp.ext_fields["nextBeginOffset"])


async def _wait_delivered(client: RemotingClient, addr: str, n: int, timeout: float) -> list:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await _pull(client, addr)
        if len(got) >= n:
            # Deliveries go out in deliver order: a duplicate of an early message would come before the
            # last late one, so it is in ``got`` (one too many, or a message missing) by now.
            return got
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{len(got)} of {n} delivered within {timeout}s: {sorted(bytes(m.body) for m in got)}")
        await asyncio.sleep(0.05)
