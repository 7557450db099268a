"""Controller mode failover under load (docs/replication.md, "Controller mode"): three replicas, a
NameServer and a real etcd; ``--inflight`` senders each keep one send in flight to whichever replica is
master; the master is SIGKILLed; counted: seconds until a send made after the kill is acknowledged, and
the acknowledged messages the new master does not have. Run once per master role (``--roles``).

    .venv/bin/python bench/controller_bench.py [--rounds 3] [--inflight 64] [--roles ASYNC_MASTER,SYNC_MASTER]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.controller.support import Etcd  # noqa: E402
from tests.controller.test_failover import TOPIC, Load, Replica, _master, _pull_all  # noqa: E402
from tests.ha.support import NameServer, wait_info  # noqa: E402

from tidalmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from tidalmq.remoting.command import RemotingCommand  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402


async def _round(replicas: list[Replica], inflight: int, load_s: float) -> tuple[int, int, float]:
    c = RemotingClient()
    try:
        old = await _master(c, replicas)
        resp = await c.invoke(old.broker_addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": TOPIC, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        await wait_info(c, old.broker_addr, "SyncStateSet {1,2,3}",
                        lambda t: t.get("controllerSyncStateSet") == "1,2,3", 30)
        loads = [Load(c, replicas) for _ in range(inflight)]
        for k, load in enumerate(loads):
            load.n = k * 10_000_000  # distinct bodies per sender
        tasks = [asyncio.create_task(load.run()) for load in loads]
        await asyncio.sleep(load_s)
        old.kill()
        marks = [load.mark() for load in loads]
        new = await _master(c, [r for r in replicas if r is not old], 20)
        deadline = time.monotonic() + 20
        while not any(load.first_ok_after[m] for load, m in zip(loads, marks, strict=True)):
            if time.monotonic() > deadline:
                raise RuntimeError("no send acknowledged after the kill")
            await asyncio.sleep(0.02)
        took = min(load.first_ok_after[m] or 1e9 for load, m in zip(loads, marks, strict=True))
        await asyncio.sleep(1)
        for load in loads:
            load.stop.set()
        await asyncio.gather(*tasks)
        acked = [b for load in loads for b in load.acked]
        got: set[bytes] = set()
        for _ in range(50):  # until reput has queued the newest
            got = await _pull_all(c, new.broker_addr)
            if all(b in got for b in acked[-inflight:]):
                break
            await asyncio.sleep(0.2)
        return len(acked), sum(1 for b in acked if b not in got), took
    finally:
        await c.close()


def one_kill(role: str, inflight: int, load_s: float) -> tuple[int, int, float]:
    """Three fresh replicas of ``role`` with their etcd and NameServer, one ``_round`` against them."""
    with tempfile.TemporaryDirectory(prefix="controller-bench-") as tmp:
        root = Path(tmp)
        etcd = Etcd(root / "etcd").start()
        ns = NameServer(root / "ns").start()
        replicas = [Replica(root / f"r{i}", ns.namesrv_addr, i, etcd) for i in (1, 2, 3)]
        try:
            for r in replicas:
                r.settings["brokerRole"] = role
                r.start()
            return asyncio.run(_round(replicas, inflight, load_s))
        finally:
            for r in replicas:
                r.kill()
            ns.kill()
            etcd.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--load-seconds", type=float, default=3.0)
    ap.add_argument("--roles", default="ASYNC_MASTER,SYNC_MASTER")
    args = ap.parse_args()
    for role in args.roles.split(","):
        for n in range(args.rounds):
            acked, lost, took = one_kill(role, args.inflight, args.load_seconds)
            print(f"{role} round {n + 1}: {acked} acknowledged, {lost} lost; "
                  f"first acknowledgement {took:.2f} s after the SIGKILL", flush=True)


if __name__ == "__main__":
    main()
