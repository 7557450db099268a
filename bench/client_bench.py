"""Client benchmark: TidalMQ's Python client against the official RocketMQ client (rocketmq==0.4.4,
C++ core) on the same broker in the same run, as ratios (ours / official), with the CPU each side used.

Figures: single-message async sends (msgs/s, ``--window`` in flight); timer messages (``deliver_time_ms`` 1 h
ahead) against plain ones, both single async sends with ``--timer-window`` in flight (256, as bench/compare),
alternated ``--timer-rounds`` times, the best of each, as the ratio timer / plain (goal >= 0.8, issue #47); batched sends (``--batch`` messages a
request; ours with ``--batch-window`` requests in flight, the official client one request at a time, as its
API sends batches synchronously), and push-consumer throughput (msgs/s from start() until all of a
pre-filled topic was consumed; listener batch ``--consume-batch``, 1 as RocketMQ's default). Each client
runs in its own process (ours in this one, the official one in bench/official_client_agent.py); the broker
is a ``tidalmq standalone`` in a third. For every figure the CPU seconds of the load generator (the client's
process) and of the broker (from the kernel's accounting, psutil) are reported, also per 1,000 messages:
the machine is shared and has few cores, so CPU per message is the steadier figure.

    .venv/bin/python bench/client_bench.py [--messages 20000] [--compare bench/out/client-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.common import compare, cpu_s, print_machine, save  # noqa: E402
from tidalmq.client import Admin, ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer  # noqa: E402

AGENT = ROOT / "bench" / "official_client_agent.py"
# rocketmq==0.4.4 lives in its own venv (scripts/setup.sh): the 5.x client in .venv owns the `rocketmq` name
OFFICIAL_PYTHON = ROOT / ".venv-rmq4" / "bin" / "python"


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def official(op: str, **cfg: object) -> dict[str, float]:
    """Run the official client's agent; adds ``cpu``: the agent process's CPU seconds (whole run)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([str(OFFICIAL_PYTHON), str(AGENT), json.dumps({"op": op, **cfg})], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"official agent failed ({r.returncode}): {r.stderr[-2000:]}")
    out: dict[str, float] = json.loads(lines[-1])
    out["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def cpu_seconds(proc: psutil.Process | None, *, children: bool = True) -> float:
    """CPU seconds of a process so far, with the live processes under it unless ``children=False``
    (0.0 without one)."""
    return 0.0 if proc is None else cpu_s(proc.pid, children=children)


class Meter:
    """CPU seconds of this process (our client) and of the broker over one figure."""

    def __init__(self, broker: psutil.Process | None) -> None:
        self.broker = broker
        self.me = psutil.Process()

    def __enter__(self) -> Meter:
        self.c0, self.b0 = cpu_seconds(self.me, children=False), cpu_seconds(self.broker)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client = cpu_seconds(self.me, children=False) - self.c0
        self.broker_cpu = cpu_seconds(self.broker) - self.b0


async def create_topic(ns: str, topic: str, queues: int) -> None:
    async with Admin(ns) as admin:
        for _ in range(300):
            try:
                await admin.create_topic(topic, queues)
                if (await admin.route(topic)).get("queueDatas"):
                    return
            except Exception:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"could not create {topic}")


async def ours_async(ns: str, topic: str, n: int, body: bytes, window: int, timer: bool = False) -> float:
    """Single async sends, ``window`` in flight; ``timer``: each with a deliver time 1 h ahead."""
    async with Producer(uniq("benchPG"), ns) as p:
        await p.send(Message(topic, body))  # warm up
        far = int(time.time() * 1000) + 3_600_000

        def message(i: int) -> Message:
            return Message(topic, body, deliver_time_ms=far + i % 60_000) if timer else Message(topic, body)

        sem = asyncio.Semaphore(window)
        done = asyncio.get_running_loop().create_future()
        count = [0]

        def finished(_f: object) -> None:
            sem.release()
            count[0] += 1
            if count[0] == n and not done.done():
                done.set_result(None)

        t0 = time.perf_counter()
        for i in range(n):
            await sem.acquire()
            p.send_async(message(i)).add_done_callback(finished)
        await done
        return n / (time.perf_counter() - t0)


async def ours_batch(ns: str, topic: str, n: int, body: bytes, size: int, window: int = 1) -> float:
    """Batches of ``size``, ``window`` requests in flight (1: one at a time)."""
    async with Producer(uniq("benchPG"), ns) as p:
        await p.send(Message(topic, body))
        batches = n // size
        todo = iter(range(batches))

        async def lane() -> None:
            for _ in todo:
                await p.send_batch([Message(topic, body) for _ in range(size)])

        t0 = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(max(1, window))))
        return batches * size / (time.perf_counter() - t0)


async def fill(ns: str, topic: str, n: int, body: bytes) -> None:
    async with Producer(uniq("fillPG"), ns) as p:
        for _ in range(n // 64):
            await p.send_batch([Message(topic, body) for _ in range(64)])


async def ours_consume(ns: str, topic: str, n: int, batch: int = 1, pull_batch: int = 32) -> float:
    done = asyncio.Event()
    count = [0]

    async def on(msgs: list[MessageExt]) -> None:
        count[0] += len(msgs)
        if count[0] >= n:
            done.set()

    c = PushConsumer(uniq("benchCG"), ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                     consume_message_batch_max_size=batch, pull_batch_size=pull_batch)
    c.subscribe(topic)
    t0 = time.perf_counter()
    await c.start()
    await asyncio.wait_for(done.wait(), 300)
    dt = time.perf_counter() - t0
    await c.shutdown()
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes (below the 4 KiB compression threshold)")
    ap.add_argument("--window", type=int, default=2000, help="async sends in flight")
    ap.add_argument("--timer-window", type=int, default=256, help="single async sends in flight, timer vs plain")
    ap.add_argument("--timer-rounds", type=int, default=2, help="timer vs plain alternated this many times")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batch-window", type=int, default=4, help="our batch requests in flight")
    ap.add_argument("--consume-batch", type=int, default=1, help="messages per listener call (ours)")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--pull-batch", type=int, default=32,
                    help="our consumer's pullBatchSize; above 32 the broker's maxTransferCountOnMessageInMemory and "
                         "maxTransferBytesOnMessageInMemory are raised to match (RocketMQ's broker caps a pull at 32 "
                         "messages / 256 KiB by default)")
    ap.add_argument("--ours-only", action="store_true", help="skip the official client")
    ap.add_argument("--namesrv", help="use a running NameServer instead of starting a standalone")
    ap.add_argument("--compare", help="a previous bench/out/client-*.json to compare with")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print_machine()
    body = bytes((i * 7 + 1) % 256 or 1 for i in range(args.size))
    n = args.messages
    s = None
    broker: psutil.Process | None = None
    if args.namesrv:
        ns = args.namesrv
    else:
        workdir = Path(tempfile.mkdtemp(prefix="client-bench-"))
        settings = {"mappedFileSizeCommitLog": str(256 * 1024 * 1024)}
        if args.pull_batch > 32:
            settings["maxTransferCountOnMessageInMemory"] = str(args.pull_batch)
            settings["maxTransferBytesOnMessageInMemory"] = str(args.pull_batch * (args.size + 512))
        s = Standalone(workdir / "data", settings)
        s.start()
        ns = s.namesrv_addr
        broker = psutil.Process(s.proc.pid)  # type: ignore[union-attr]
    results: dict[str, float] = {}
    counts: dict[str, int] = {}

    def record(who: str, kind: str, count: int, rate: float, client_cpu: float, m: Meter) -> None:
        results[f"{who}_{kind}_msgs_per_s"] = rate
        results[f"{who}_{kind}_client_cpu_s"] = client_cpu
        results[f"{who}_{kind}_broker_cpu_s"] = m.broker_cpu
        counts[f"{who}_{kind}"] = count

    try:
        topics = {k: uniq(f"bench_{k}") for k in ("ours_async", "off_async", "ours_batch", "off_batch", "consume",
                                                  "plain256", "timer256")}
        for t in topics.values():
            asyncio.run(create_topic(ns, t, args.queues))
        common = {"namesrv": ns, "n": n, "body_hex": body.hex()}
        filled = n // 64 * 64
        asyncio.run(fill(ns, topics["consume"], filled, body))
        for kind in ("async", "batch", "consume"):
            if not args.ours_only:
                with Meter(broker) as m:
                    if kind == "async":
                        r = official("async", topic=topics["off_async"], group=uniq("offPG"), window=args.window,
                                     **common)
                    elif kind == "batch":
                        r = official("batch", topic=topics["off_batch"], group=uniq("offPG"), batch=args.batch,
                                     **common)
                    else:
                        r = official("consume", topic=topics["consume"], group=uniq("offCG"), **{**common, "n": filled})
                        if r["count"] < filled:
                            print(f"  !! the official consumer got {r['count']} of {filled} messages")
                record("official", kind, int(r["count"]), r["count"] / r["seconds"], r["cpu"], m)
            with Meter(broker) as m:
                if kind == "async":
                    rate = asyncio.run(ours_async(ns, topics["ours_async"], n, body, args.window))
                    count = n
                elif kind == "batch":
                    rate = asyncio.run(ours_batch(ns, topics["ours_batch"], n, body, args.batch, args.batch_window))
                    count = n // args.batch * args.batch
                else:
                    rate = asyncio.run(ours_consume(ns, topics["consume"], filled, args.consume_batch, args.pull_batch))
                    count = filled
            record("ours", kind, count, rate, m.client, m)
        for _ in range(args.timer_rounds):
            for kind in ("plain256", "timer256"):
                with Meter(broker) as m:
                    rate = asyncio.run(ours_async(ns, topics[kind], n, body[:100], args.timer_window, kind == "timer256"))
                if rate > results.get(f"ours_{kind}_msgs_per_s", 0.0):
                    record("ours", kind, n, rate, m.client, m)
    finally:
        if s is not None:
            s.stop()
            shutil.rmtree(workdir, ignore_errors=True)  # a 256 MiB CommitLog file and more per run
    print(f"\n{n} messages of {args.size} bytes, {args.queues} queues, async window {args.window}, batch {args.batch} "
          f"(ours: {args.batch_window} in flight, official: 1), our listener batch {args.consume_batch}, "
          f"pull batch {args.pull_batch}")
    print("CPU: seconds of the client's process and of the broker over the figure (the client's include its "
          "start and connection set-up), and per 1,000 messages")
    print(f"{'':16s}{'':10s}{'msgs/s':>10s}{'client s':>10s}{'broker s':>10s}{'client/1k':>11s}{'broker/1k':>11s}")
    for kind in ("async", "batch", "consume", "plain256", "timer256"):
        for who in ("ours", "official"):
            key = f"{who}_{kind}"
            if key not in counts:
                continue
            rate, cc, bc = (results[f"{key}_msgs_per_s"], results[f"{key}_client_cpu_s"],
                            results[f"{key}_broker_cpu_s"])
            per = 1000 / max(1, counts[key])
            results[f"{key}_client_cpu_ms_per_1k"] = cc * per * 1000
            results[f"{key}_broker_cpu_ms_per_1k"] = bc * per * 1000
            print(f"{kind:16s}{who:10s}{rate:10.0f}{cc:10.2f}{bc:10.2f}{cc * per * 1000:9.1f}ms{bc * per * 1000:9.1f}ms")
    if not args.ours_only:
        print(f"\n{'':22s}{'ours':>12s}{'official':>12s}{'ratio':>8s}  target")
        for k, target in (("async", 0.8), ("batch", 1.0), ("consume", 1.0)):
            o, f = results[f"ours_{k}_msgs_per_s"], results[f"official_{k}_msgs_per_s"]
            ratio = results[f"ratio_{k}"] = o / f
            print(f"{k + ' msgs/s':22s}{o:12.0f}{f:12.0f}{ratio:8.2f}  >= {target}  {'ok' if ratio >= target else 'MISSED'}")
    ratio = results["ratio_timer_plain"] = results["ours_timer256_msgs_per_s"] / results["ours_plain256_msgs_per_s"]
    print(f"\ntimer / plain, single async sends of 100 B, {args.timer_window} in flight (best of {args.timer_rounds}): "
          f"{ratio:.2f}  >= 0.8  {'ok' if ratio >= 0.8 else 'MISSED'}")
    print(f"saved {save('client', results)}")
    compare(args.compare, results)
    os._exit(0)  # nothing to wait for (a hung official client would be in its own process anyway)


if __name__ == "__main__":
    main()
