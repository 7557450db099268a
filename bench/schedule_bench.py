"""Scheduled delivery benchmark against a running standalone, over raw remoting (no client library).

Figures:
- enqueue: timer messages sent with many requests in flight; send rate (acks/s) and the rate at which the timer
  service indexes them (runtime info ``timer.enqueued``);
- burst: N messages due at the same millisecond; delivery throughput from that moment to the last delivery;
- lateness at a steady 1,000 and 20,000 messages due per second: p50 / p99 / max of (store time of the delivered
  copy - deliver time), and early deliveries (must be 0), measured on the delivered messages themselves;
- loaded: messages due at 1,000 and 10,000 a second while a burst of (far-future) timer sends runs: their lateness
  (what a GIL shared by sends and deliveries makes late; docs/multicore.md);
- CPU seconds of the broker and of its schedule process (timerProcessEnable) over the runs above;
- restart: many pending (far future) + a batch due while the broker is down, SIGKILL, restart; seconds until the
  broker answers, until the first overdue message is delivered, until all are.
- enqueue vs plain (``--enqueue-only`` runs just this): timer messages against plain sends in the same broker with
  the same load generator (``broker_bench.pipelined_sends``: requests built ahead, 1 KiB bodies, 512 single sends
  or 16 batches of 64 in flight), alternated over rounds; acks/s, the broker's CPU µs per message, the schedule
  process's (from the run's start until it has indexed the run: it works after the acknowledgements), and
  the ratio timer / plain. A broker that refuses timer batches (before they were supported) reports 0 for them.
Writes bench/out/schedule-*.json and a lateness plot bench/out/schedule-lateness.png.

    .venv/bin/python bench/schedule_bench.py [--quick] [--enqueue-only] [--set timerProcessEnable=false]
        [--compare bench/out/schedule-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import psutil  # noqa: E402
from tests.broker.rawclient import pull_cmd, runtime_info, send_cmd  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.broker_bench import BODY, batch_body, create_topic, pipelined_sends  # noqa: E402
from bench.common import OUT, compare, cpu_s, percentile, print_machine, save, settled_cpu_s  # noqa: E402
from tidalmq.common.message import encode_properties  # noqa: E402
from tidalmq.common.record import decode_record  # noqa: E402
from tidalmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from tidalmq.remoting.command import RemotingCommand, SerializeType  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402

QUEUES = 4
INFLIGHT = 256


def now_ms() -> int:
    return int(time.time() * 1000)


async def send_all(c: RemotingClient, addr: str, topic: str, deliver: list[int], body_pad: int = 0) -> float:
    """Send one timer message per deliver time (body "deliver:uniq"), INFLIGHT at a time. Returns seconds."""
    sem = asyncio.Semaphore(INFLIGHT)
    failures = 0

    async def one(i: int, d: int) -> None:
        nonlocal failures
        u = uuid.uuid4().hex.upper()
        cmd = send_cmd(topic, f"{d}:{u}".encode() + b"x" * body_pad, queue_id=i % QUEUES,
                       props={"TIMER_DELIVER_MS": str(d), "UNIQ_KEY": u})
        async with sem:
            r = await c.invoke(addr, cmd, 30)
        if r.code != ResponseCode.SUCCESS:
            failures += 1

    t0 = time.perf_counter()
    await one(0, deliver[0])  # connect once before the crowd
    for lo in range(1, len(deliver), 20_000):  # bounded numbers of tasks
        await asyncio.gather(*(one(i, d) for i, d in enumerate(deliver[lo : lo + 20_000], start=lo)))
    if failures:
        raise RuntimeError(f"{failures} sends failed")
    return time.perf_counter() - t0


async def info_int(c: RemotingClient, addr: str, key: str) -> int:
    return int((await runtime_info(c, addr)).get(key, "0"))


async def wait_info(c: RemotingClient, addr: str, key: str, target: int, timeout: float) -> float:
    """Seconds until runtime info ``key`` reaches ``target`` (polled every 20 ms)."""
    t0 = time.perf_counter()
    while await info_int(c, addr, key) < target:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{key} did not reach {target}")
        await asyncio.sleep(0.02)
    return time.perf_counter() - t0


async def queue_total(c: RemotingClient, addr: str, topic: str) -> int:
    n = 0
    for q in range(QUEUES):
        r = await c.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET,
                                                 ext_fields={"topic": topic, "queueId": str(q)}), 5)
        n += int(r.ext_fields.get("offset", "0")) if r.code == ResponseCode.SUCCESS else 0
    return n


async def lateness_of(c: RemotingClient, addr: str, topic: str) -> list[tuple[int, int]]:
    """(deliver time, lateness ms) of every message delivered into ``topic``."""
    out = []
    for q in range(QUEUES):
        off = 0
        while True:
            r = await c.invoke(addr, pull_cmd(topic, q, off, max_nums=32), 10)
            if r.code != ResponseCode.SUCCESS:
                break
            body, pos, n = r.body_bytes(), 0, 0
            while pos < len(body):
                m = decode_record(body, pos)
                pos += m.store_size
                n += 1
                d = int(m.body.split(b":", 1)[0])
                out.append((d, m.store_timestamp - d))
            off += n
    return out


def summary(lat: list[tuple[int, int]]) -> dict[str, float]:
    v = sorted(x for _, x in lat)
    return {"n": len(v), "p50_ms": percentile(v, 50), "p99_ms": percentile(v, 99), "max_ms": v[-1] if v else 0,
            "early": sum(1 for x in v if x < 0)}


async def bench_enqueue(c: RemotingClient, addr: str, n: int) -> dict[str, float]:
    base = await info_int(c, addr, "timer.enqueued")
    far = now_ms() + 3_600_000
    deliver = [far + random.randrange(3_600_000) for _ in range(n)]
    t0 = time.perf_counter()
    took = await send_all(c, addr, "BenchEnq", deliver)
    await wait_info(c, addr, "timer.enqueued", base + n, 60)
    all_in = time.perf_counter() - t0
    return {"enqueue_n": n, "enqueue_send_per_s": n / took, "enqueue_indexed_per_s": n / all_in}


ENQ_QUEUES = 8
ENQ_BATCH = 64


def enqueue_requests(topic: str, n: int, *, timer: bool, batch: int) -> list[RemotingCommand]:
    """``n`` messages (1 KiB bodies) as SEND_MESSAGE_V2 requests, single or ``batch`` a request; with ``timer``
    each carries TIMER_DELIVER_MS one to two hours ahead (so the timer service only enqueues them)."""
    far = now_ms() + 3_600_000
    reqs = []
    for r in range(n // batch):
        if batch == 1:
            props = {"UNIQ_KEY": f"{os.getpid():08X}{r:024X}", "WAIT": "true"}
            if timer:
                props["TIMER_DELIVER_MS"] = str(far + random.randrange(3_600_000))
            body = BODY
        else:
            props = {"WAIT": "true"}
            body = batch_body(batch, r * batch, lambda i: {"TIMER_DELIVER_MS": str(far + random.randrange(3_600_000))}
                              if timer else {})
        ext = {"a": "benchPG", "b": topic, "c": "TBW102", "d": str(ENQ_QUEUES), "e": str(r % ENQ_QUEUES), "f": "0",
               "g": str(now_ms()), "h": "0", "i": encode_properties(props), "j": "0", "k": "false"}
        if batch > 1:
            ext["m"] = "true"
        reqs.append(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=body,
                                    serialize_type=SerializeType.ROCKETMQ))
    return reqs


def tree_cpu_s(procs: list[psutil.Process]) -> float:
    """CPU seconds of ``procs`` (the schedule process) and the processes under them."""
    return sum(cpu_s(p.pid) for p in procs)


async def bench_enqueue_vs_plain(c: RemotingClient, addr: str, broker: psutil.Process, n: int,
                                 rounds: int) -> dict[str, float]:
    """Timer vs plain sends, single and batched, alternated ``rounds`` times; the best round of each kind."""
    kinds = {"plain": (False, 1, 512), "timer": (True, 1, 512),
             "plain_batch64": (False, ENQ_BATCH, 16), "timer_batch64": (True, ENQ_BATCH, 16)}
    best: dict[str, tuple[float, float, float]] = {}
    for r in range(rounds):
        for kind, (timer, batch, window) in kinds.items():
            topic = f"BenchEnq_{kind}"
            if r == 0:
                await create_topic(c, addr, topic)
            reqs = enqueue_requests(topic, n, timer=timer, batch=batch)
            probe = await c.invoke(addr, reqs[0], 10)
            if probe.code != ResponseCode.SUCCESS:  # e.g. a broker that refuses timer batches
                print(f"  {kind}: refused ({probe.code}: {probe.remark})")
                best[kind] = (0.0, 0.0, 0.0)
                continue
            schedule = broker.children()  # the schedule process (timerProcessEnable), if there is one
            cpu0 = cpu_s(broker.pid, children=False)
            sched0 = tree_cpu_s(schedule)
            rate = await pipelined_sends(c, addr, topic, len(reqs[1:]) * batch, window, batch, prebuilt=reqs[1:])
            cpu_us = (cpu_s(broker.pid, children=False) - cpu0) / ((len(reqs) - 1) * batch) * 1e6
            # the schedule process files what the broker acknowledged after the acknowledgement
            settled, _ = await asyncio.to_thread(settled_cpu_s, functools.partial(tree_cpu_s, schedule),
                                                 0.01, 0.3, 30.0)
            sched_us = (settled - sched0) / ((len(reqs) - 1) * batch) * 1e6
            print(f"  round {r + 1} {kind}: {rate:,.0f} msg/s acknowledged, broker CPU {cpu_us:.1f} us/msg, "
                  f"schedule process {sched_us:.1f} us/msg")
            if rate > best.get(kind, (0.0, 0.0, 0.0))[0]:
                best[kind] = (rate, cpu_us, sched_us)
    out: dict[str, float] = {}
    for kind, (rate, cpu_us, sched_us) in best.items():
        out[f"enq_{kind}_per_s"] = rate
        out[f"enq_{kind}_cpu_us"] = cpu_us
        out[f"enq_{kind}_schedule_cpu_us"] = sched_us
    out["enq_ratio_single"] = best["timer"][0] / best["plain"][0]
    out["enq_ratio_batch64"] = best["timer_batch64"][0] / best["plain_batch64"][0]
    return out


async def bench_burst(c: RemotingClient, addr: str, n: int, send_rate: float) -> dict[str, float]:
    topic = "BenchBurst"
    when = now_ms() + int(n / send_rate * 1000 * 1.3) + 2000
    await send_all(c, addr, topic, [when] * n)
    assert now_ms() < when, "sending took longer than planned"
    await asyncio.sleep((when - now_ms()) / 1000)
    t0 = time.perf_counter()
    while await queue_total(c, addr, topic) < n:
        if time.perf_counter() - t0 > 120:
            raise TimeoutError("burst not delivered")
        await asyncio.sleep(0.01)
    took = time.perf_counter() - t0
    s = summary(await lateness_of(c, addr, topic))
    return {"burst_n": n, "burst_deliver_per_s": n / took, "burst_last_lateness_ms": s["max_ms"], "burst_early": s["early"]}


async def bench_rate(c: RemotingClient, addr: str, rate: int, seconds: float, send_rate: float) -> tuple[dict[str, float], list]:
    topic = f"BenchRate{rate}"
    n = int(rate * seconds)
    start = now_ms() + int(n / send_rate * 1000 * 1.3) + 2000
    deliver = [start + int(i * 1000 / rate) for i in range(n)]
    random.shuffle(deliver)  # sent in random order, due in time order
    await send_all(c, addr, topic, deliver)
    assert now_ms() < start, "sending took longer than planned"
    end = max(deliver)
    await asyncio.sleep(max(0.0, (end - now_ms()) / 1000) + 1.0)
    deadline = time.perf_counter() + 60
    while await queue_total(c, addr, topic) < n and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    lat = await lateness_of(c, addr, topic)
    s = summary(lat)
    key = f"rate{rate}"
    return {f"{key}_n": s["n"], f"{key}_p50_ms": s["p50_ms"], f"{key}_p99_ms": s["p99_ms"],
            f"{key}_max_ms": s["max_ms"], f"{key}_early": s["early"], f"{key}_missing": n - s["n"]}, lat


async def bench_loaded(c: RemotingClient, addr: str, rate: int, seconds: float, send_rate: float) -> tuple[dict[str, float], list]:
    """``rate`` messages a second fall due while timer sends (due in an hour) keep the broker busy."""
    topic = f"BenchLoaded{rate}"
    n = int(rate * seconds)
    start = now_ms() + int(n / send_rate * 1000 * 1.3) + 2000
    deliver = [start + int(i * 1000 / rate) for i in range(n)]
    random.shuffle(deliver)
    await send_all(c, addr, topic, deliver)
    assert now_ms() < start, "sending took longer than planned"
    end = max(deliver)
    await asyncio.sleep(max(0.0, (start - now_ms()) / 1000))
    far = now_ms() + 3_600_000
    burst = 0
    while now_ms() < end:  # the burst covers the whole due window
        await send_all(c, addr, "BenchLoadedFar", [far + random.randrange(3_600_000) for _ in range(2_000)])
        burst += 2_000
    await asyncio.sleep(1.0)
    deadline = time.perf_counter() + 60
    while await queue_total(c, addr, topic) < n and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    lat = await lateness_of(c, addr, topic)
    s = summary(lat)
    key = f"loaded{rate}"
    return {f"{key}_n": s["n"], f"{key}_p50_ms": s["p50_ms"], f"{key}_p99_ms": s["p99_ms"], f"{key}_max_ms": s["max_ms"],
            f"{key}_early": s["early"], f"{key}_missing": n - s["n"], f"{key}_burst_sends": burst}, lat


def bench_restart(data: Path, pending: int, overdue: int, extra: dict[str, str]) -> dict[str, float]:
    """Many pending, some falling due while the broker is down: SIGKILL, restart, time deliveries resuming."""
    s = Standalone(data, {"timerPrecisionMs": "10", "mappedFileSizeCommitLog": str(256 * 1024 * 1024), **extra})
    s.start()
    topic = "BenchRestart"

    async def fill() -> int:
        c = RemotingClient()
        try:
            far = now_ms() + 3_600_000
            await send_all(c, s.broker_addr, "BenchRestartFar", [far + random.randrange(86_400_000) for _ in range(pending)])
            due = now_ms() + 1500
            await send_all(c, s.broker_addr, topic, [due] * overdue)
            await wait_info(c, s.broker_addr, "timer.enqueued", pending + overdue, 120)
            return due
        finally:
            await c.close()

    try:
        due = asyncio.run(fill())
    except BaseException:
        s.kill()
        raise
    s.kill()
    time.sleep(max(0.0, (due - now_ms()) / 1000) + 0.5)  # they fall due while the broker is down
    t0 = time.perf_counter()
    s.start()
    ready = time.perf_counter() - t0

    async def watch() -> tuple[float, float]:
        c = RemotingClient()
        first = -1.0
        try:
            while True:
                n = await queue_total(c, s.broker_addr, topic)
                if n and first < 0:
                    first = time.perf_counter() - t0
                if n >= overdue:
                    return first, time.perf_counter() - t0
                if time.perf_counter() - t0 > 120:
                    raise TimeoutError("overdue messages not delivered after restart")
                await asyncio.sleep(0.005)
        finally:
            await c.close()

    try:
        first, everything = asyncio.run(watch())
    except BaseException:
        s.kill()
        raise

    async def pending_now() -> int:
        c = RemotingClient()
        try:
            return await info_int(c, s.broker_addr, "timer.pending")
        finally:
            await c.close()

    left = asyncio.run(pending_now())
    s.stop()
    return {"restart_pending": pending, "restart_overdue": overdue, "restart_to_ready_s": ready,
            "restart_to_first_delivery_s": first, "restart_to_all_overdue_s": everything,
            "restart_pending_after": left}


def run_enqueue_vs_plain(precision: str, n: int, rounds: int, extra: dict[str, str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tidalmq-schedbench-") as tmp:
        s = Standalone(Path(tmp) / "data", {"timerPrecisionMs": precision,
                                            "mappedFileSizeCommitLog": str(256 * 1024 * 1024), **extra})
        s.start()
        try:
            async def run() -> dict[str, float]:
                c = RemotingClient()
                try:
                    assert s.proc is not None
                    return await bench_enqueue_vs_plain(c, s.broker_addr, psutil.Process(s.proc.pid), n, rounds)
                finally:
                    await c.close()

            r = asyncio.run(run())
        finally:
            s.stop()
    print(f"enqueue vs plain ({n} messages a run, best of {rounds}): single {r['enq_timer_per_s']:,.0f} vs "
          f"{r['enq_plain_per_s']:,.0f}/s = {r['enq_ratio_single']:.0%}; batch64 {r['enq_timer_batch64_per_s']:,.0f} vs "
          f"{r['enq_plain_batch64_per_s']:,.0f}/s = {r['enq_ratio_batch64']:.0%}")
    return r


def plot(series: dict[str, list[tuple[int, int]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, lat in series.items():
        if not lat:
            continue
        lat = sorted(lat)
        t0 = lat[0][0]
        axes[0].plot([(d - t0) / 1000 for d, _ in lat], [x for _, x in lat], ".", ms=1, label=name)
        v = sorted(x for _, x in lat)
        axes[1].plot(v, [i / len(v) for i in range(len(v))], label=name)
    axes[0].set_xlabel("deliver time (s from the first)")
    axes[0].set_ylabel("lateness (ms)")
    axes[0].set_title("lateness of each delivery")
    axes[1].set_xlabel("lateness (ms)")
    axes[1].set_ylabel("fraction delivered")
    axes[1].set_title("lateness CDF (never < 0: never early)")
    for a in axes:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test of the bench itself)")
    ap.add_argument("--precision", default="10", help="timerPrecisionMs of the broker (default 10)")
    ap.add_argument("--compare", help="a previous bench/out/schedule-*.json to compare with")
    ap.add_argument("--enqueue-only", action="store_true", help="only timer enqueue vs plain sends")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the enqueue-vs-plain figure (default 3)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting, e.g. timerProcessEnable=false (repeatable)")
    args = ap.parse_args()
    print_machine()
    q = args.quick
    extra = dict(kv.split("=", 1) for kv in args.set)
    results: dict[str, Any] = {"precision_ms": int(args.precision), "settings": extra}
    if args.enqueue_only:
        results.update(run_enqueue_vs_plain(args.precision, 10_000 if q else 40_000, args.rounds, extra))
        print(f"saved {save('schedule-enqueue', results)}")
        compare(args.compare, results)
        return
    series: dict[str, list[tuple[int, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="tidalmq-schedbench-") as tmp:
        s = Standalone(Path(tmp) / "data", {"timerPrecisionMs": args.precision,
                                            "mappedFileSizeCommitLog": str(256 * 1024 * 1024), **extra})
        s.start()
        try:
            async def run() -> None:
                c = RemotingClient()
                try:
                    r = await bench_enqueue(c, s.broker_addr, 5_000 if q else 40_000)
                    results.update(r)
                    print(f"enqueue: {r['enqueue_n']} sent at {r['enqueue_send_per_s']:.0f}/s, indexed at "
                          f"{r['enqueue_indexed_per_s']:.0f}/s")
                    rate = r["enqueue_send_per_s"]
                    r = await bench_burst(c, s.broker_addr, 5_000 if q else 50_000, rate)
                    results.update(r)
                    print(f"burst: {r['burst_n']} due together delivered at {r['burst_deliver_per_s']:.0f}/s "
                          f"(last {r['burst_last_lateness_ms']} ms late, early {r['burst_early']})")
                    for due_rate, secs in ((1_000, 5 if q else 10), (20_000, 1 if q else 3)):
                        r, lat = await bench_rate(c, s.broker_addr, due_rate, secs, rate)
                        results.update(r)
                        series[f"{due_rate}/s due"] = lat
                        k = f"rate{due_rate}"
                        print(f"{due_rate}/s due for {secs}s: lateness p50 {r[k + '_p50_ms']} p99 {r[k + '_p99_ms']} "
                              f"max {r[k + '_max_ms']} ms, early {r[k + '_early']}, missing {r[k + '_missing']}")
                    for due_rate in (1_000, 10_000):
                        r, lat = await bench_loaded(c, s.broker_addr, due_rate, 2 if q else 5, rate)
                        results.update(r)
                        series[f"{due_rate}/s due during sends"] = lat
                        k = f"loaded{due_rate}"
                        print(f"{due_rate}/s due during {r[k + '_burst_sends']} timer sends: lateness p50 {r[k + '_p50_ms']} "
                              f"p99 {r[k + '_p99_ms']} max {r[k + '_max_ms']} ms, early {r[k + '_early']}, "
                              f"missing {r[k + '_missing']}")
                    results["broker_timer_early"] = await info_int(c, s.broker_addr, "timer.early")
                    info = await runtime_info(c, s.broker_addr)
                    results["broker_cpu_s"] = cpu_s(int(info.get("pid", "-1")), children=False)
                    results["timer_process_cpu_s"] = cpu_s(int(info.get("timer.processPid", "-1")))
                    print(f"CPU seconds so far: broker {results['broker_cpu_s']:.1f}, "
                          f"schedule process {results['timer_process_cpu_s']:.1f}")
                finally:
                    await c.close()

            asyncio.run(run())
        finally:
            s.stop()
        r = bench_restart(Path(tmp) / "restart", 20_000 if q else 200_000, 2_000 if q else 10_000, extra)
        results.update(r)
        print(f"restart after SIGKILL with {r['restart_pending']} pending + {r['restart_overdue']} overdue: ready "
              f"{r['restart_to_ready_s']:.2f} s, first delivery {r['restart_to_first_delivery_s']:.2f} s, all overdue "
              f"{r['restart_to_all_overdue_s']:.2f} s (pending after: {r['restart_pending_after']})")
    png = OUT / "schedule-lateness.png"
    OUT.mkdir(parents=True, exist_ok=True)
    plot(series, png)
    print(f"plot: {png}")
    print(f"saved {save('schedule', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
