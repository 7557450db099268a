"""Replication benchmark: send throughput of a master alone, an ASYNC_MASTER with a slave and a
SYNC_MASTER with a slave, in the same run, and how far behind the slave is when the sends end.

Each phase starts a ``tidalmq standalone`` master (and a ``tidalmq broker`` slave) in temp dirs, keeps
``--window`` sends in flight on one connection (singles, then batches of 64), and after the last
acknowledgement measures how long the slave takes to hold the master's whole CommitLog. During the sends
a second connection samples the master's runtime info every 5 ms (its CommitLog end and the slave's
acked offset) for the replication lag's p50/p99/max in bytes and in ms. Then, for each
master role, the master is SIGKILLed under load and the acknowledged messages missing on the slave are
counted (ASYNC_MASTER's loss window; SYNC_MASTER must lose none).

    .venv/bin/python bench/ha_bench.py [--messages 40000] [--window 256]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.broker.rawclient import runtime_info  # noqa: E402
from tests.ha.support import Slave, master_settings  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.broker_bench import (  # noqa: E402
    QUEUES,
    build_sends,
    cpu_of,
    create_topic,
    pipelined_sends,
    send_req,
)
from bench.common import print_machine, save  # noqa: E402
from tidalmq.remoting.codes import ResponseCode  # noqa: E402
from tidalmq.remoting.command import RemotingCommand  # noqa: E402
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


LagSample = tuple[float, int, int]  # (seconds, master's CommitLog end, the slave's acked offset)


async def _sample_lag(c: RemotingClient, master: str, every_s: float, out: list[LagSample]) -> None:
    """Poll the master's runtime info until cancelled: its CommitLog end and the slave's reported ack
    come from one response, so each sample compares the two at the same instant."""
    while True:
        info = await runtime_info(c, master)
        acks = [int(v.rsplit(" ack ", 1)[1]) for k, v in info.items() if k[len("haSlave"):].isdigit()]
        if acks:
            out.append((time.perf_counter(), int(info["commitLogMaxOffset"]), max(acks)))
        await asyncio.sleep(every_s)


def lag_figures(samples: list[LagSample]) -> dict[str, float]:
    """p50/p99/max of the replication lag in bytes (master end - slave ack) and in ms: for each sample,
    how long ago the master's end first passed the slave's ack, i.e. the age of the oldest byte the
    slave has not acknowledged. Its resolution is the sampling period, which the master's busy event loop
    stretches (``lag_sample_every_ms_p50``); a lag younger than one period counts as 0 ms."""
    if not samples:
        return {}
    by_bytes = [end - ack for _, end, ack in samples]
    by_ms: list[float] = []
    first = 0  # samples are in time order and acks only grow, so the search resumes where it stopped
    for t, end, ack in samples:
        if ack >= end:
            by_ms.append(0.0)
            continue
        while samples[first][1] <= ack:
            first += 1
        by_ms.append((t - samples[first][0]) * 1000)

    def pct(xs: list[float], q: int) -> float:
        return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]

    gaps = [(b[0] - a[0]) * 1000 for a, b in zip(samples, samples[1:], strict=False)] or [0.0]
    return {"lag_samples": len(samples), "lag_sample_every_ms_p50": round(statistics.median(gaps), 1),
            "lag_bytes_p50": round(pct([float(b) for b in by_bytes], 50)),
            "lag_bytes_p99": round(pct([float(b) for b in by_bytes], 99)), "lag_bytes_max": max(by_bytes),
            "lag_ms_p50": round(pct(by_ms, 50), 1), "lag_ms_p99": round(pct(by_ms, 99), 1),
            "lag_ms_max": round(max(by_ms), 1)}


async def phase(name: str, role: str, with_slave: bool, n: int, window: int, results: dict[str, float],
                batches: tuple[int, ...] = (1, 64), extra: dict[str, str] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as tmp:
        settings = master_settings(role, mappedFileSizeCommitLog=str(256 * 1024 * 1024), **(extra or {}))
        with Standalone(Path(tmp) / "m", settings) as master:
            c = RemotingClient()
            try:
                await create_topic(c, master.broker_addr, "HaBench")
                slave = Slave(Path(tmp) / "s", master.namesrv_addr,
                              {"mappedFileSizeCommitLog": str(256 * 1024 * 1024), **(extra or {})}) if with_slave else None
                try:
                    if slave is not None:
                        slave.start()
                        while (await runtime_info(c, master.broker_addr)).get("haConnections") != "1":
                            await asyncio.sleep(0.05)
                    if slave is not None and master.proc is not None and slave.proc is not None:
                        print(f"  pids (for py-spy): master {master.proc.pid}, slave {slave.proc.pid}", flush=True)
                    procs = [psutil.Process(p.proc.pid) for p in (master, slave) if p is not None and p.proc is not None]
                    for batch in batches:
                        sends = build_sends("HaBench", n, batch)
                        cpu0 = [cpu_of(p) for p in procs]
                        samples: list[LagSample] = []
                        # Its own connection, so the polls do not queue behind the pipelined sends.
                        sampler_client = RemotingClient()
                        sampler = asyncio.create_task(
                            _sample_lag(sampler_client, master.broker_addr, 0.005, samples)) if slave is not None else None
                        try:
                            rate = await pipelined_sends(c, master.broker_addr, "HaBench", n, window, batch, sends)
                        finally:
                            if sampler is not None:
                                sampler.cancel()
                                err = (await asyncio.gather(sampler, return_exceptions=True))[0]
                                if not isinstance(err, asyncio.CancelledError):
                                    raise RuntimeError("the lag sampler failed") from err
                            await sampler_client.close()
                        kind = "single" if batch == 1 else "batch64"
                        key = f"{name}.{kind}_msgs_per_s"
                        results[key] = round(rate)
                        line = f"  {key}: {rate:,.0f}"
                        if slave is not None:
                            lag = await _caught_up_after(c, master.broker_addr, slave.broker_addr)
                            results[f"{name}.{kind}_slave_lag_s"] = round(lag, 3)
                            line += f"  (slave caught up {lag * 1000:.0f} ms after the last ack)"
                            figs = lag_figures(samples)
                            results.update({f"{name}.{kind}_{k}": v for k, v in figs.items()})
                            if figs:
                                line += (f"\n    replication lag during the sends ({figs['lag_samples']} samples, every "
                                         f"{figs['lag_sample_every_ms_p50']} ms): "
                                         f"bytes p50 {figs['lag_bytes_p50']:,} p99 {figs['lag_bytes_p99']:,} "
                                         f"max {figs['lag_bytes_max']:,}; ms p50 {figs['lag_ms_p50']} "
                                         f"p99 {figs['lag_ms_p99']} max {figs['lag_ms_max']}")
                        # CPU per message (the kernel's accounting): steadier than a rate on a shared machine.
                        us = [(cpu_of(p) - c0) / n * 1e6 for p, c0 in zip(procs, cpu0, strict=True)]
                        results[f"{name}.{kind}_master_cpu_us_per_msg"] = round(us[0], 2)
                        line += f"  CPU/msg: master {us[0]:.2f} us"
                        if len(us) > 1:
                            results[f"{name}.{kind}_slave_cpu_us_per_msg"] = round(us[1], 2)
                            line += f", slave {us[1]:.2f} us"
                        print(line, flush=True)
                finally:
                    if slave is not None:
                        slave.stop()
            finally:
                await c.close()


async def loss_on_master_kill(role: str, acked_before_kill: int, window: int) -> dict[str, int]:
    """SIGKILL the master while ``window`` sends are in flight, after ``acked_before_kill`` acks; count the
    acknowledged (SEND_OK) messages the slave does not hold. Each ack's msgId carries the message's
    CommitLog offset; the slave holds whole records only, so one starting below its end is there."""
    with tempfile.TemporaryDirectory(prefix="ha-bench-") as tmp:
        with Standalone(Path(tmp) / "m", master_settings(role)) as master:
            c = RemotingClient()
            slave = Slave(Path(tmp) / "s", master.namesrv_addr)
            try:
                await create_topic(c, master.broker_addr, "HaKill")
                slave.start()
                while (await runtime_info(c, master.broker_addr)).get("haConnections") != "1":
                    await asyncio.sleep(0.05)
                conn = await c.connection(master.broker_addr)
                acked: list[int] = []
                in_flight: set[asyncio.Future[RemotingCommand]] = set()
                i = 0
                while len(acked) < acked_before_kill:
                    while len(in_flight) < window:
                        fut = conn.request(send_req("HaKill", i % QUEUES, i))
                        in_flight.add(fut)
                        i += 1
                    done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    for f in done:
                        if f.exception() is None and f.result().code == ResponseCode.SUCCESS:
                            acked.append(int(f.result().ext_fields["msgId"][-16:], 16))
                master.kill()
                done = (await asyncio.wait(in_flight, timeout=10))[0] if in_flight else set()
                for f in done:
                    if f.exception() is None and f.result().code == ResponseCode.SUCCESS:
                        acked.append(int(f.result().ext_fields["msgId"][-16:], 16))
                slave_end = int((await runtime_info(c, slave.broker_addr))["commitLogMaxOffset"])
                lost = sum(1 for phys in acked if phys >= slave_end)
                return {"acked": len(acked), "lost": lost}
            finally:
                slave.stop()
                await c.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=40000)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--phases", default="alone,async_master,sync_master",
                    help="which throughput phases to run (comma-separated), e.g. alone,sync_master")
    ap.add_argument("--batch-only", action="store_true", help="batches of 64 only (no single sends)")
    ap.add_argument("--no-kill", action="store_true", help="skip the SIGKILL loss measurements")
    ap.add_argument("--slave-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for master and slave (e.g. haTransferBatchSize=262144); repeatable")
    args = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.slave_set)
    print_machine()
    results: dict[str, float] = {}
    wanted = set(args.phases.split(","))
    for name, role, with_slave in (("alone", "ASYNC_MASTER", False), ("async_master", "ASYNC_MASTER", True),
                                   ("sync_master", "SYNC_MASTER", True)):
        if name not in wanted:
            continue
        print(f"{name}:", flush=True)
        await phase(name, role, with_slave, args.messages, args.window, results,
                    (64,) if args.batch_only else (1, 64), extra)
    for role in () if args.no_kill else ("ASYNC_MASTER", "SYNC_MASTER"):
        r = await loss_on_master_kill(role, args.messages // 2, args.window)
        results[f"{role.lower()}.kill_acked"], results[f"{role.lower()}.kill_lost"] = r["acked"], r["lost"]
        print(f"{role}: master SIGKILLed under load: {r['lost']} of {r['acked']} acknowledged messages "
              f"not on the slave", flush=True)
    for kind in ("single", "batch64"):
        alone = results.get(f"alone.{kind}_msgs_per_s")
        for name in ("async_master", "sync_master"):
            if not alone or f"{name}.{kind}_msgs_per_s" not in results:
                continue
            print(f"{name} {kind}: {results[f'{name}.{kind}_msgs_per_s'] / alone:.0%} of the master alone")
    print(f"saved {save('ha', results)}")


if __name__ == "__main__":
    asyncio.run(main())
