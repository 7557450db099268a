"""Pop benchmark: pop + ack throughput against pull throughput of the same pre-filled topic, on one
``tidalmq standalone`` in the same run, and the lateness of redelivery after the invisible time.

Figures: ``pop_ack_msgs_per_s`` (``--consumers`` PopConsumers popping 32 at a time and acking each
message), ``pop_batch_ack_msgs_per_s`` (the same, acking each pop's messages in one BATCH_ACK_MESSAGE),
``pop_only_msgs_per_s`` (the same without acks, invisible for 60 s), ``pull_msgs_per_s`` (a PullConsumer reading the same topic, as the reference), and the
redelivery lateness of ``--revive`` unacked messages (time from popTime + invisibleTime until they were
popped again: the timer's round, the revive service's 500 ms margin and its 100 ms period).

    .venv/bin/python bench/pop_bench.py [--messages 5000] [--consumers 2] [--compare bench/out/pop-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.client.helpers import create_topic  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.common import compare, percentile, print_machine, save  # noqa: E402
from tidalmq.client import Message, PopConsumer, Producer, PullConsumer  # noqa: E402


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def fill(ns: str, topic: str, n: int) -> None:
    await create_topic(ns, topic, 4)
    async with Producer(uniq("PG"), ns) as p:
        for i in range(0, n, 64):
            await p.send_batch([Message(topic, b"x" * 256) for _ in range(min(64, n - i))])


async def pop_ack(ns: str, topic: str, n: int, consumers: int, ack: str = "single") -> float:
    group = uniq("CG")
    done = 0
    start = time.perf_counter()

    async def one() -> None:
        nonlocal done
        async with PopConsumer(group, ns) as c:
            while done < n:
                # No long polling: a consumer waiting at the end would count its poll time.
                msgs = await c.receive(topic, 32, invisible_time=60.0)
                if ack == "single":
                    await asyncio.gather(*(c.ack(m) for m in msgs))
                elif ack == "batch" and msgs:
                    await c.ack_many(msgs)
                done += len(msgs)

    await asyncio.gather(*(one() for _ in range(consumers)))
    return n / (time.perf_counter() - start)


async def pull_all(ns: str, topic: str, n: int) -> float:
    start = time.perf_counter()
    got = 0
    async with PullConsumer(uniq("CG"), ns) as c:
        for mq in await c.fetch_queues(topic):
            got += len(await c.pull_range(mq, 0, 1 << 30, batch=32))
    assert got == n, (got, n)
    return n / (time.perf_counter() - start)


async def revive_lateness(ns: str, n: int, invisible: float) -> list[float]:
    topic = uniq("PopRevive")
    await fill(ns, topic, n)
    group = uniq("CG")
    deadlines: dict[int, float] = {}
    late: list[float] = []
    async with PopConsumer(group, ns) as c:
        while len(deadlines) < n:
            for m in await c.receive(topic, 32, invisible_time=invisible, block_timeout=1.0):
                deadlines[m.commit_log_offset] = 0.0
        while len(late) < n:
            for m in await c.receive(topic, 32, invisible_time=60.0, block_timeout=2.0):
                first = int(m.properties["1ST_POP_TIME"]) / 1000 + invisible
                late.append(time.time() - first)
                await c.ack(m)
    return sorted(late)


async def main(args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, Standalone(Path(tmp) / "data") as s:
        ns = s.namesrv_addr
        topic = uniq("PopBench")
        await fill(ns, topic, args.messages)
        pull = await pull_all(ns, topic, args.messages)
        pop = await pop_ack(ns, topic, args.messages, args.consumers)
        pop_batch = await pop_ack(ns, topic, args.messages, args.consumers, ack="batch")
        pop_only = await pop_ack(ns, topic, args.messages, args.consumers, ack="none")
        late = await revive_lateness(ns, args.revive, 2.0)
    return {"pop_ack_msgs_per_s": round(pop), "pop_batch_ack_msgs_per_s": round(pop_batch),
            "pop_only_msgs_per_s": round(pop_only), "pull_msgs_per_s": round(pull),
            "pop_only_vs_pull": round(pop_only / pull, 3),
            "revive_late_ms_p50": round(percentile(late, 50) * 1000),
            "revive_late_ms_p99": round(percentile(late, 99) * 1000)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--revive", type=int, default=200)
    ap.add_argument("--compare")
    a = ap.parse_args()
    print_machine()
    res = asyncio.run(main(a))
    for k, v in res.items():
        print(f"{k:24} {v}")
    save("pop", res)
    compare(a.compare, res)
