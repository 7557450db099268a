"""gRPC endpoint benchmark: the official 5.x client (rocketmq-python-client) against the remoting path
(tidalmq.client) on one ``tidalmq standalone``, in the same run, and the lateness of delay messages sent
through gRPC.

Figures: ``grpc_send_msgs_per_s`` (a 5.x Producer, ``--window`` send_async calls in flight),
``remoting_send_msgs_per_s`` (tidalmq.client's Producer, the same number of sends in flight);
``grpc_receive_msgs_per_s`` (a 5.x SimpleConsumer receiving 32 at a time and acking each, async) and
``remoting_pop_msgs_per_s`` (tidalmq.client's PopConsumer doing the same over remoting: what the endpoint
does underneath); delay lateness at ``--rate`` messages due per second for ``--seconds`` seconds (5.x
``delivery_timestamp``, whole seconds as the 5.1.2 client sends it), measured as receive time minus due
time by ``--receivers`` threads of one SimpleConsumer polling all along: p50, p99, max, and how many came early (must be 0).

    .venv/bin/python bench/grpc_bench.py [--messages 5000] [--rate 1000] [--seconds 5] [--permissive]
        [--compare bench/out/grpc-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import logging
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocketmq import (  # noqa: E402
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Producer,
    SimpleConsumer,
)
from rocketmq import Message as Message5  # noqa: E402
from tests.client.helpers import create_topic  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.common import compare, percentile, print_machine, save  # noqa: E402
from tidalmq.client import Message, PopConsumer  # noqa: E402
from tidalmq.client import Producer as RemotingProducer  # noqa: E402

BODY = b"x" * 256
logging.getLogger("rocketmqClient").setLevel(logging.WARNING)


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def config(endpoint: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(), request_timeout=10)


def message5(topic: str, deliver_s: int | None = None) -> Message5:
    """A delay message's body names its due second (a delivered one also carries it as its
    delivery_timestamp; the body keeps the lateness independent of that conversion)."""
    m = Message5()
    m.topic, m.body = topic, BODY
    if deliver_s is not None:
        m.delivery_timestamp = deliver_s
        m.body = str(deliver_s).encode().ljust(len(BODY))
    return m


def grpc_send(endpoint: str, topic: str, n: int, window: int) -> float:
    p = Producer(config(endpoint), (topic,))
    p.startup()
    try:
        p.send(message5(topic))  # route and settings before the clock starts
        sem = threading.Semaphore(window)
        futures = []
        start = time.perf_counter()
        for _ in range(n):
            sem.acquire()
            f = p.send_async(message5(topic))
            f.add_done_callback(lambda _f: sem.release())
            futures.append(f)
        for f in futures:
            f.result(timeout=60)
        return n / (time.perf_counter() - start)
    finally:
        p.shutdown()


async def remoting_send(ns: str, topic: str, n: int, window: int) -> float:
    async with RemotingProducer(uniq("PG"), ns) as p:
        await p.send(Message(topic, BODY))
        sem = asyncio.Semaphore(window)

        async def one() -> None:
            async with sem:
                await p.send(Message(topic, BODY))

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - start)


def grpc_receive(endpoint: str, topic: str, n: int) -> float:
    c = SimpleConsumer(config(endpoint), uniq("g5bench"), {topic: FilterExpression("*")}, await_duration=1)
    c.startup()
    # The client's ack_async needs an asyncio loop in the caller's thread: sync acks from a pool instead.
    pool = concurrent.futures.ThreadPoolExecutor(16)
    try:
        done, acks = 0, []
        start = time.perf_counter()
        while done < n:
            msgs = c.receive(32, 60) or []
            acks += [pool.submit(c.ack, m) for m in msgs]
            done += len(msgs)
        concurrent.futures.wait(acks, timeout=60)
        return done / (time.perf_counter() - start)
    finally:
        pool.shutdown()
        c.shutdown()


async def remoting_pop(ns: str, topic: str, n: int) -> float:
    async with PopConsumer(uniq("CG"), ns) as c:
        done = 0
        start = time.perf_counter()
        while done < n:
            msgs = await c.receive(topic, 32, invisible_time=60.0, block_timeout=1.0)
            await asyncio.gather(*(c.ack(m) for m in msgs))
            done += len(msgs)
        return done / (time.perf_counter() - start)


def delay_lateness(endpoint: str, topic: str, rate: int, seconds: int, receivers: int) -> dict[str, float]:
    """``rate`` messages due in each of ``seconds`` consecutive whole seconds, starting far enough ahead
    for every send to be done first; lateness = when received minus when due."""
    n = rate * seconds
    p = Producer(config(endpoint), (topic,))
    p.startup()
    c = SimpleConsumer(config(endpoint), uniq("g5delay"), {topic: FilterExpression("*")}, await_duration=1)
    c.startup()
    pool = concurrent.futures.ThreadPoolExecutor(16)
    try:
        first_due = int(time.time()) + 3 + n // 400  # gRPC sends run at several hundred a second at least
        sem = threading.Semaphore(64)
        futures = []
        for i in range(n):
            sem.acquire()
            f = p.send_async(message5(topic, first_due + i // rate))
            f.add_done_callback(lambda _f: sem.release())
            futures.append(f)
        for f in futures:
            f.result(timeout=60)
        if time.time() > first_due:
            raise SystemExit(f"sending took past the first due time: lower --rate or --seconds ({n} messages)")
        late: list[float] = []
        deadline = first_due + seconds + 60

        def receiver() -> None:  # several: one SimpleConsumer's receive rate is below 1,000/s here
            while len(late) < n and time.time() < deadline:
                msgs = c.receive(32, 60) or []
                now = time.time()
                late.extend(now - int(m.body.strip()) for m in msgs)
                for m in msgs:
                    pool.submit(c.ack, m)

        threads = [threading.Thread(target=receiver) for _ in range(receivers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        late.sort()
        return {"delay_received": len(late), "delay_sent": n, "delay_early": sum(1 for x in late if x < 0),
                "delay_lateness_p50_ms": percentile(late, 50) * 1000, "delay_lateness_p99_ms": percentile(late, 99) * 1000,
                "delay_lateness_max_ms": (late[-1] if late else float("nan")) * 1000}
    finally:
        pool.shutdown()
        c.shutdown()
        p.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=5000, help="messages per send/receive figure (default 5000)")
    ap.add_argument("--window", type=int, default=64, help="sends in flight (default 64)")
    ap.add_argument("--rate", type=int, default=1000, help="delay messages due per second (default 1000)")
    ap.add_argument("--seconds", type=int, default=5, help="seconds of due delay messages (default 5)")
    ap.add_argument("--receivers", type=int, default=4, help="threads receiving delay messages (default 4)")
    ap.add_argument("--permissive", action="store_true",
                    help="serve the gRPC port with tls.server.mode=permissive and a throwaway certificate: the "
                         "5.x client (plain) goes through the splice that puts plain and TLS on one port")
    ap.add_argument("--compare", help="a previous bench/out/grpc-*.json to compare with")
    args = ap.parse_args()
    print_machine()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as tmp:
        settings = {"mappedFileSizeCommitLog": str(256 * 1024 * 1024), "timerPrecisionMs": "100"}
        if args.permissive:
            from tests.security_transport.conftest import make_certs, server_tls

            settings |= server_tls(make_certs(Path(tmp) / "certs"), "permissive")
        with Standalone(Path(tmp) / "data", settings) as s:
            t5, t4 = uniq("B5"), uniq("B4")
            for t in (t5, t4):
                asyncio.run(create_topic(s.namesrv_addr, t, 4))
            results["grpc_send_msgs_per_s"] = grpc_send(s.grpc_endpoint, t5, args.messages, args.window)
            results["remoting_send_msgs_per_s"] = asyncio.run(remoting_send(s.namesrv_addr, t4, args.messages, args.window))
            results["grpc_receive_msgs_per_s"] = grpc_receive(s.grpc_endpoint, t5, args.messages)
            results["remoting_pop_msgs_per_s"] = asyncio.run(remoting_pop(s.namesrv_addr, t4, args.messages))
            td = uniq("BD")  # a DELAY topic: the route accepts delay messages only there (send_async checks)
            asyncio.run(create_topic(s.namesrv_addr, td, 4, attributes={"message.type": "DELAY"}))
            results.update(delay_lateness(s.grpc_endpoint, td, args.rate, args.seconds, args.receivers))
    for k, v in results.items():
        print(f"{k:32s} {v:>12.1f}")
    print(f"saved {save('grpc-permissive' if args.permissive else 'grpc', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
