"""Replication benchmark: send throughput of a master alone, an ASYNC_MASTER with a slave and a
SYNC_MASTER with a slave, in the same run, and how far behind the slave is when the sends end.

Each phase starts a ``tidalmq standalone`` master (and a ``tidalmq broker`` slave) in temp dirs, keeps
``--window`` sends in flight on one connection (singles, then batches of 64), and after the last
acknowledgement measures how long the slave takes to hold the master's whole CommitLog.

    .venv/bin/python bench/ha_bench.py [--messages 40000] [--window 256]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.broker.rawclient import runtime_info  # noqa: E402
from tests.ha.support import Slave, master_settings  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.broker_bench import build_sends, create_topic, pipelined_sends  # noqa: E402
from bench.common import print_machine, save  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402


async def _caught_up_after(c: RemotingClient, master: str, slave: str) -> float:
    """Seconds until the slave's CommitLog reaches the master's end (from now)."""
    end = int((await runtime_info(c, master))["commitLogMaxOffset"])
    t0 = time.perf_counter()
    while int((await runtime_info(c, slave))["commitLogMaxOffset"]) < end:
        if time.perf_counter() - t0 > 120:
            raise RuntimeError("the slave did not catch up in 120 s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - t0


async def phase(name: str, role: str, with_slave: bool, n: int, window: int, results: dict[str, float]) -> None:
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as tmp:
        settings = master_settings(role, mappedFileSizeCommitLog=str(256 * 1024 * 1024))
        with Standalone(Path(tmp) / "m", settings) as master:
            c = RemotingClient()
            try:
                await create_topic(c, master.broker_addr, "HaBench")
                slave = Slave(Path(tmp) / "s", master.namesrv_addr,
                              {"mappedFileSizeCommitLog": str(256 * 1024 * 1024)}) if with_slave else None
                try:
                    if slave is not None:
                        slave.start()
                        while (await runtime_info(c, master.broker_addr)).get("haConnections") != "1":
                            await asyncio.sleep(0.05)
                    for batch in (1, 64):
                        sends = build_sends("HaBench", n, batch)
                        rate = await pipelined_sends(c, master.broker_addr, "HaBench", n, window, batch, sends)
                        key = f"{name}.{'single' if batch == 1 else 'batch64'}_msgs_per_s"
                        results[key] = round(rate)
                        line = f"  {key}: {rate:,.0f}"
                        if slave is not None:
                            lag = await _caught_up_after(c, master.broker_addr, slave.broker_addr)
                            results[f"{name}.{'single' if batch == 1 else 'batch64'}_slave_lag_s"] = round(lag, 3)
                            line += f"  (slave caught up {lag * 1000:.0f} ms after the last ack)"
                        print(line, flush=True)
                finally:
                    if slave is not None:
                        slave.stop()
            finally:
                await c.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=40000)
    ap.add_argument("--window", type=int, default=256)
    args = ap.parse_args()
    print_machine()
    results: dict[str, float] = {}
    for name, role, with_slave in (("alone", "ASYNC_MASTER", False), ("async_master", "ASYNC_MASTER", True),
                                   ("sync_master", "SYNC_MASTER", True)):
        print(f"{name}:", flush=True)
        await phase(name, role, with_slave, args.messages, args.window, results)
    for kind in ("single", "batch64"):
        alone = results[f"alone.{kind}_msgs_per_s"]
        for name in ("async_master", "sync_master"):
            print(f"{name} {kind}: {results[f'{name}.{kind}_msgs_per_s'] / alone:.0%} of the master alone")
    print(f"saved {save('ha', results)}")


if __name__ == "__main__":
    asyncio.run(main())
