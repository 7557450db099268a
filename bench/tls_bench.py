"""TLS cost on the send path: plain vs TLS sends against ``tidalmq standalone`` in one run.

Three clients on loopback, 1 KiB bodies, ASYNC_FLUSH: plain against a TLS-disabled broker (the
create_server path), plain and TLS against a permissive broker (plain and TLS told apart by the first
byte on the same port). Figures: pipelined single-message send msgs/s (512 in flight) and sync send
latency p50/p99, each with the broker's CPU.

    .venv/bin/python bench/tls_bench.py [--messages 50000] [--compare bench/out/tls-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
from tests.security_transport.conftest import make_certs  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.broker_bench import cpu_of, create_topic, pipelined_sends, sync_latency  # noqa: E402
from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.remoting.tls import client_context  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402


async def measure(s: Standalone, c: RemotingClient, tag: str, n: int, results: dict[str, float]) -> None:
    broker = psutil.Process(s.proc.pid)  # type: ignore[union-attr]
    addr, topic = s.broker_addr, "Bench_" + tag.replace(".", "_")
    await create_topic(c, addr, topic)
    await pipelined_sends(c, addr, topic, 2000, 64)  # warm-up
    p50, p99 = await sync_latency(c, addr, topic, 2000)
    b0, t0 = cpu_of(broker), time.perf_counter()
    rate = await pipelined_sends(c, addr, topic, n, 512)
    cpu = (cpu_of(broker) - b0) / (time.perf_counter() - t0)
    results.update({f"{tag}.async_send_msgs_per_s": rate, f"{tag}.sync_send_p50_ms": p50,
                    f"{tag}.sync_send_p99_ms": p99, f"{tag}.broker_cpu": cpu})
    print(f"[{tag}] async send {rate:,.0f} msg/s (broker CPU {cpu:.0%}); sync send p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    await c.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--compare", help="a previous bench/out/tls-*.json to compare with")
    args = ap.parse_args()
    print_machine()
    results: dict[str, float] = {}
    small = {"mappedFileSizeCommitLog": str(256 * 1024 * 1024)}
    with tempfile.TemporaryDirectory() as d:
        certs = make_certs(Path(d) / "certs")
        with Standalone(Path(d) / "plain", small) as s:
            await measure(s, RemotingClient(), "disabled.plain", args.messages, results)
        tls = {"tls.server.mode": "permissive", "tls.server.certPath": str(certs.server_cert),
               "tls.server.keyPath": str(certs.server_key)}
        with Standalone(Path(d) / "tls", {**small, **tls}) as s:
            await measure(s, RemotingClient(), "permissive.plain", args.messages, results)
            await measure(s, RemotingClient(ssl_context=client_context()), "permissive.tls", args.messages, results)
    base = results["permissive.plain.async_send_msgs_per_s"]
    print(f"TLS send throughput: {results['permissive.tls.async_send_msgs_per_s'] / base:.0%} of plain")
    print(f"saved {save('tls', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    asyncio.run(main())
