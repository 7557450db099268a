"""Where W1's end-to-end latency goes: 1 KiB messages paced at --rate through tidalmq.client (single async sends,
or one-message batches as bench/compare's TidalMQ peer sends a paced stream), a push consumer in its own
process, and each message's time split at the broker's store timestamp:

- send -> store: the producer's stamp (in the body) to the broker's append (STORE_TIMESTAMP, ms): the
  client's send path, loopback, the broker's decode and group commit;
- store -> receive: the append to the consumer's listener: reput, long polling's notify, the pull response,
  the consumer's decode and hand-off.

``--vs KEY=VALUE`` alternates the baseline broker with one whose setting differs (``--rounds`` times each),
so that a suspected cause (the flush interval, say) is measured in the same minutes as the baseline.

    .venv/bin/python bench/w1_latency_bench.py [--n 5000] [--rate 1000] [--mode async|batch] [--warmup-s 3]
        [--vs flushIntervalCommitLog=10000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from tests.support import Standalone  # noqa: E402

from bench.common import percentile, print_machine, save  # noqa: E402
from tidalmq.client import Admin, ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer  # noqa: E402

TOPIC = "w1lat"


def _consumer(ns: str, n: int, q: Any, ready: Any) -> None:
    """(id, sent ms, store ms, received ms) of every message, put on ``q`` once n arrived (or 120 s)."""
    got: list[tuple[int, float, int, float]] = []

    async def run() -> None:
        done = asyncio.Event()

        async def on(msgs: list[MessageExt]) -> None:
            t = time.time() * 1000
            for m in msgs:
                i, sent = m.body.split(b"|", 2)[:2]
                if int(i) >= 0:  # not a warm-up message
                    got.append((int(i), float(sent), m.store_timestamp, t))
            if len(got) >= n:
                done.set()

        c = PushConsumer("w1lat_cg", ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         consume_message_batch_max_size=32, pull_batch_size=256, listener_inline=True)
        c.subscribe(TOPIC, "*")
        await c.start()
        ready.set()
        try:
            await asyncio.wait_for(done.wait(), 120)
        finally:
            await c.shutdown()

    try:
        import uvloop

        uvloop.run(run())
    except ImportError:
        asyncio.run(run())
    q.put(got)


async def _produce(ns: str, n: int, rate: float, mode: str, warmup: int = 0) -> int:
    """The paced sends; the count the broker refused (SYSTEM_BUSY: a send queued past
    waitTimeMillsInSendQueue, which a stall of the broker's loop shows as well)."""
    async with Producer("w1lat_pg", ns) as p:
        await p.send(Message(TOPIC, b"-1|0|"))  # the route cached, the connection open
        start = time.time()
        sends: list[asyncio.Future[Any]] = []
        # the first ``warmup`` messages (ids below 0, not measured): a broker just started is still busy
        for i in range(-warmup, n):
            d = start + (i + warmup) / rate - time.time()
            if d > 0:
                await asyncio.sleep(d)
            body = f"{i}|{time.time() * 1000:.3f}|".encode().ljust(1024, b"x")
            if mode == "batch":
                sends.append(asyncio.ensure_future(p.send_batch([Message(TOPIC, body)])))
            else:
                sends.append(p.send_async(Message(TOPIC, body)))
        done = (await asyncio.gather(*sends, return_exceptions=True))[warmup:]
        bad = [i for i, r in enumerate(done) if isinstance(r, BaseException)]
        if bad:
            print(f"  refused: {len(bad)}, the first at {bad[0] / rate:.2f} s, the last at {bad[-1] / rate:.2f} s "
                  f"({done[bad[0]]})", flush=True)
        return len(bad)


def one(n: int, rate: float, mode: str, settings: dict[str, str], warmup: int = 0) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="w1-latency-"))
    s = Standalone(work / "data", {"mappedFileSizeCommitLog": str(256 * 1024 * 1024), **settings})
    proc: Any = None
    got: list[tuple[int, float, int, float]] = []
    try:
        s.start()

        async def create() -> None:
            async with Admin(s.namesrv_addr) as a:
                await a.create_topic(TOPIC, 4)

        asyncio.run(create())
        ctx = mp.get_context("spawn")
        q, ready = ctx.Queue(), ctx.Event()
        proc = ctx.Process(target=_consumer, args=(s.namesrv_addr, n, q, ready), daemon=True)
        proc.start()
        if not ready.wait(90):
            raise RuntimeError("the consumer did not start")
        refused = asyncio.run(_produce(s.namesrv_addr, n, rate, mode, warmup))
        if not refused:  # else the consumer waits for messages that never came
            got = [g for g in q.get(timeout=180) if g[0] >= 0]
    finally:
        if proc is not None and proc.is_alive():
            proc.kill()
        s.stop()
        shutil.rmtree(work, ignore_errors=True)
    e2e = sorted(r - t for _, t, _, r in got)
    to_store = sorted(st - t for _, t, st, _ in got)
    from_store = sorted(r - st for _, _, st, r in got)
    out = {"received": float(len(got)), "refused": float(refused)}
    if refused:  # the consumer waits for n: the round says so and goes on
        return {**out, **{f"{k}_{p}_ms": float("nan") for k in ("e2e", "send_to_store", "store_to_receive")
                          for p in ("p50", "p99", "max")}}
    for name, v in (("e2e", e2e), ("send_to_store", to_store), ("store_to_receive", from_store)):
        out.update({f"{name}_p50_ms": percentile(v, 50), f"{name}_p99_ms": percentile(v, 99),
                    f"{name}_max_ms": v[-1] if v else float("nan")})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--mode", choices=("async", "batch"), default="batch")
    ap.add_argument("--vs", action="append", default=[], metavar="KEY=VALUE", help="a broker setting to compare")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--warmup-s", type=float, default=3.0, help="seconds of paced sends before the measured ones")
    args = ap.parse_args(argv)
    variant = dict(kv.split("=", 1) for kv in args.vs)
    print_machine()
    results: dict[str, Any] = {}
    for r in range(args.rounds):
        for name, settings in (("baseline", {}), ("variant", variant)) if variant else (("baseline", {}),):
            res = one(args.n, args.rate, args.mode, settings, int(args.warmup_s * args.rate))
            results[f"{name}_{r}"] = res
            print(f"{name} {settings or ''} round {r + 1}: e2e p50/p99/max {res['e2e_p50_ms']:.2f} / "
                  f"{res['e2e_p99_ms']:.2f} / {res['e2e_max_ms']:.1f} ms; send->store p50/p99 "
                  f"{res['send_to_store_p50_ms']:.1f} / {res['send_to_store_p99_ms']:.1f}; store->receive p50/p99 "
                  f"{res['store_to_receive_p50_ms']:.1f} / {res['store_to_receive_p99_ms']:.1f} "
                  f"({res['received']:.0f} of {args.n}, {res['refused']:.0f} sends refused)", flush=True)
    print(f"results: {save('w1-latency', results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
