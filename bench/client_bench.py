"""Client benchmark: TidalMQ's Python client against the official RocketMQ client (rocketmq==0.4.4,
C++ core) on the same broker in the same run, as ratios (ours / official).

Figures: single-message async sends (msgs/s, ``--window`` in flight), batched sends (``--batch`` a
request, one request at a time), and push-consumer throughput (msgs/s from start() until all of a
pre-filled topic was consumed). Each client runs in its own process (the official one in
bench/official_client_agent.py); the broker is a ``tidalmq standalone`` in a third.

    .venv/bin/python bench/client_bench.py [--messages 20000] [--compare bench/out/client-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import Standalone  # noqa: E402

from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.client import Admin, ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer  # noqa: E402

AGENT = ROOT / "bench" / "official_client_agent.py"


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def official(op: str, **cfg: object) -> dict[str, float]:
    r = subprocess.run([sys.executable, str(AGENT), json.dumps({"op": op, **cfg})], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"official agent failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(lines[-1])


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


async def ours_async(ns: str, topic: str, n: int, body: bytes, window: int) -> float:
    async with Producer(uniq("benchPG"), ns) as p:
        await p.send(Message(topic, body))  # warm up
        sem = asyncio.Semaphore(window)
        done = asyncio.get_running_loop().create_future()
        count = [0]

        def finished(_f: object) -> None:
            sem.release()
            count[0] += 1
            if count[0] == n and not done.done():
                done.set_result(None)

        t0 = time.perf_counter()
        for _ in range(n):
            await sem.acquire()
            p.send_async(Message(topic, body)).add_done_callback(finished)
        await done
        return n / (time.perf_counter() - t0)


async def ours_batch(ns: str, topic: str, n: int, body: bytes, size: int) -> float:
    async with Producer(uniq("benchPG"), ns) as p:
        await p.send(Message(topic, body))
        t0 = time.perf_counter()
        for _ in range(n // size):
            await p.send_batch([Message(topic, body) for _ in range(size)])
        return n // size * size / (time.perf_counter() - t0)


async def fill(ns: str, topic: str, n: int, body: bytes) -> None:
    async with Producer(uniq("fillPG"), ns) as p:
        for _ in range(n // 64):
            await p.send_batch([Message(topic, body) for _ in range(64)])


async def ours_consume(ns: str, topic: str, n: int) -> float:
    done = asyncio.Event()
    count = [0]

    async def on(msgs: list[MessageExt]) -> None:
        count[0] += len(msgs)
        if count[0] >= n:
            done.set()

    c = PushConsumer(uniq("benchCG"), ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
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
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--queues", type=int, default=8)
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
    if args.namesrv:
        ns = args.namesrv
    else:
        s = Standalone(Path(tempfile.mkdtemp(prefix="client-bench-")) / "data",
                       {"mappedFileSizeCommitLog": str(256 * 1024 * 1024)})
        s.start()
        ns = s.namesrv_addr
    results: dict[str, float] = {}
    try:
        topics = {k: uniq(f"bench_{k}") for k in ("ours_async", "off_async", "ours_batch", "off_batch", "consume")}
        for t in topics.values():
            asyncio.run(create_topic(ns, t, args.queues))
        common = {"namesrv": ns, "n": n, "body_hex": body.hex()}

        r = official("async", topic=topics["off_async"], group=uniq("offPG"), window=args.window, **common)
        results["official_async_msgs_per_s"] = r["count"] / r["seconds"]
        results["ours_async_msgs_per_s"] = asyncio.run(ours_async(ns, topics["ours_async"], n, body, args.window))

        r = official("batch", topic=topics["off_batch"], group=uniq("offPG"), batch=args.batch, **common)
        results["official_batch_msgs_per_s"] = r["count"] / r["seconds"]
        results["ours_batch_msgs_per_s"] = asyncio.run(ours_batch(ns, topics["ours_batch"], n, body, args.batch))

        filled = n // 64 * 64
        asyncio.run(fill(ns, topics["consume"], filled, body))
        r = official("consume", topic=topics["consume"], group=uniq("offCG"), **{**common, "n": filled})
        if r["count"] < filled:
            print(f"  !! the official consumer got {r['count']} of {filled} messages")
        results["official_consume_msgs_per_s"] = r["count"] / r["seconds"]
        results["ours_consume_msgs_per_s"] = asyncio.run(ours_consume(ns, topics["consume"], filled))
    finally:
        if s is not None:
            s.stop()
    for k in ("async", "batch", "consume"):
        results[f"ratio_{k}"] = results[f"ours_{k}_msgs_per_s"] / results[f"official_{k}_msgs_per_s"]
    print(f"\n{n} messages of {args.size} bytes, {args.queues} queues, async window {args.window}, batch {args.batch}")
    print(f"{'':22s}{'ours':>12s}{'official':>12s}{'ratio':>8s}  target")
    for k, target in (("async", 0.8), ("batch", 1.0), ("consume", 1.0)):
        o, f, ratio = results[f"ours_{k}_msgs_per_s"], results[f"official_{k}_msgs_per_s"], results[f"ratio_{k}"]
        print(f"{k + ' msgs/s':22s}{o:12.0f}{f:12.0f}{ratio:8.2f}  >= {target}  {'ok' if ratio >= target else 'MISSED'}")
    print(f"saved {save('client', results)}")
    compare(args.compare, results)
    os._exit(0)  # nothing to wait for (a hung official client would be in its own process anyway)


if __name__ == "__main__":
    main()
