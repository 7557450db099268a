"""What security costs on the send path: ACL on vs off and TLS vs plain, against ``tidalmq standalone``,
in one run.

Four brokers, one after the other, each measured the same way (1 KiB bodies, ASYNC_FLUSH, loopback, the
load generator in this process):

- ``plain``: TLS disabled, ACL off (the default standalone);
- ``acl``: ``aclEnable=true``, every request signed by a non-admin account (docs/acl.md);
- ``tls``: ``tls.server.mode=enforcing``, a TLS client (docs/tls.md);
- ``permissive``: ``tls.server.mode=permissive``, a plain client (the first-byte peek costs per connection).

Figures per broker: pipelined single-message sends (512 in flight) and 64-message batches, built and
signed before the clock starts (so the figures are the broker's, not the load generator's), msgs/s, the
broker's CPU per message (µs, the standalone's with its children's; steadier than throughput on a shared
machine), the event loop's CPU per message (the standalone's main thread: what limits a broker with cores
to spare), and sync send latency. The whole sequence runs ``--rounds`` times, interleaved, each round
starting with the next config; each figure is the median over rounds, and each ratio to plain is taken
within a round (the machine's speed drifts between rounds) and given as the median with its spread.

    .venv/bin/python bench/security_bench.py [--messages 50000] [--rounds 3] [--configs plain,acl]
        [--compare bench/out/security-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
from tests.security_transport.conftest import make_certs  # noqa: E402
from tests.support import Standalone  # noqa: E402

import bench.broker_bench as bb  # noqa: E402
from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.acl import RequestSigner, SessionCredentials  # noqa: E402
from tidalmq.acl.permission import BROKER_ADMIN_CODES  # noqa: E402
from tidalmq.acl.validator import PlainAccessValidator  # noqa: E402
from tidalmq.remoting.tls import client_context  # noqa: E402
from tidalmq.remoting.transport import Connection, RemotingClient  # noqa: E402

SMALL = {"mappedFileSizeCommitLog": str(256 * 1024 * 1024)}
CONFIGS = ("plain", "acl", "tls", "permissive")


@contextmanager
def signing(acl: bool) -> Iterator[None]:
    """broker_bench's requests signed (admin for the topic, a non-admin account for sends) or not."""
    before = bb.ADMIN_SIGNER, bb.USER_SIGNER
    if acl:
        bb.ADMIN_SIGNER = RequestSigner(SessionCredentials("benchAdmin", "benchAdminSecret"))
        bb.USER_SIGNER = RequestSigner(SessionCredentials("benchUser", "benchUserSecret"))
    try:
        yield
    finally:
        bb.ADMIN_SIGNER, bb.USER_SIGNER = before


def loop_cpu(proc: psutil.Process) -> float:
    """CPU seconds of the standalone's main thread, its event loop."""
    for t in proc.threads():
        if t.id == proc.pid:
            return t.user_time + t.system_time
    raise RuntimeError("no main thread")


async def measure(s: Standalone, c: RemotingClient, n: int) -> dict[str, float]:
    broker = psutil.Process(s.proc.pid)  # type: ignore[union-attr]
    addr, topic = s.broker_addr, "Bench_async_flush"  # a topic the ACL file grants PUB|SUB
    out: dict[str, float] = {}
    try:
        await bb.create_topic(c, addr, topic)
        await bb.pipelined_sends(c, addr, topic, 2000, 64)  # warm-up
        out["sync_send_p50_ms"], out["sync_send_p99_ms"] = await bb.sync_latency(c, addr, topic, 2000)
        # batches: six times the messages, so that the phase lasts about as long as the singles'
        for name, count, window, batch in (("single", n, 512, 1), ("batch64", n * 6 // 64 * 64, 16, 64)):
            # Built and signed before the clock starts: the figures are the broker's (the load generator
            # shares the two cores, and a slower generator would mean smaller group commits).
            prebuilt = bb.build_sends(topic, count, batch)
            b0, l0, t0 = bb.cpu_of(broker), loop_cpu(broker), time.perf_counter()
            rate = await bb.pipelined_sends(c, addr, topic, count, window, batch=batch, prebuilt=prebuilt)
            busy, loop_busy = bb.cpu_of(broker) - b0, loop_cpu(broker) - l0
            out[f"{name}_send_msgs_per_s"] = rate
            out[f"{name}_broker_cpu_us_per_msg"] = busy / count * 1e6
            out[f"{name}_loop_cpu_us_per_msg"] = loop_busy / count * 1e6
            out[f"{name}_broker_cpu"] = busy / (time.perf_counter() - t0)
    finally:
        await c.close()
    return out


def check_cost(root: Path) -> dict[str, float]:
    """In this process, what the broker's ACL check costs on one signed 64-message batch request as the
    load generator sends it, and the part of it that is HMAC-SHA1 over the body (ACL 1.0 signs the whole
    body, so that part is the floor: docs/acl.md#cost), in us per request."""
    (root / "acl.yml").write_text(bb.ACL_YML)
    v = PlainAccessValidator(lambda: [root / "acl.yml"], admin_codes=BROKER_ADMIN_CODES)
    v.load()
    conn = Connection(None)
    conn.remote = ("127.0.0.1", 40000)
    with signing(True):
        cmd = bb.build_sends("Bench_async_flush", 64, 64)[0]
    body = cmd.body_bytes()
    assert v(conn, cmd) is None, "the bench's batch is refused by its own ACL"
    sha1 = hashlib.sha1()
    out: dict[str, float] = {"batch64_body_bytes": len(body)}
    for name, fn in (("check", lambda: v(conn, cmd)), ("sha1", lambda: sha1.copy().update(body))):
        best = min(timeit.repeat(fn, number=500, repeat=5)) / 500
        out[f"batch64_{name}_us"] = best * 1e6
    return out


async def run_config(name: str, root: Path, certs, n: int) -> dict[str, float]:  # noqa: ANN001
    settings = dict(SMALL)
    tls = {"tls.server.certPath": str(certs.server_cert), "tls.server.keyPath": str(certs.server_key)}
    if name == "acl":
        (root / "acl.yml").write_text(bb.ACL_YML)
        settings |= {"aclEnable": "true", "rocketmq.acl.plain.file": str(root / "acl.yml")}
    elif name == "tls":
        settings |= {"tls.server.mode": "enforcing", **tls}
    elif name == "permissive":
        settings |= {"tls.server.mode": "permissive", **tls}
    client = RemotingClient(ssl_context=client_context(trust_cert_path=str(certs.ca)) if name == "tls" else None)
    with Standalone(root / "data", settings) as s, signing(name == "acl"):
        return await measure(s, client, n)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", help="a previous bench/out/security-*.json to compare with")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"which brokers, comma-separated, plain first (default {','.join(CONFIGS)})")
    args = ap.parse_args()
    configs = tuple(args.configs.split(","))
    if configs[0] != "plain" or not set(configs) <= set(CONFIGS):
        ap.error(f"--configs: plain first, then any of {', '.join(CONFIGS[1:])}")
    print_machine()
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as d:
        certs = make_certs(Path(d) / "certs")
        for r in range(args.rounds):
            # Each round starts one config later: no config always runs first (right after the
            # certificates, on a cooler machine) or always right after another.
            for name in configs[r % len(configs):] + configs[:r % len(configs)]:
                root = Path(d) / f"{name}-{r}"
                root.mkdir()
                fig = await run_config(name, root, certs, args.messages)
                shutil.rmtree(root)  # a CommitLog file per broker: 12 of them would fill a small disk
                runs[name].append(fig)
                print(f"round {r + 1} [{name:10}] single {fig['single_send_msgs_per_s']:>9,.0f} msg/s "
                      f"({fig['single_broker_cpu_us_per_msg']:.1f} us broker / "
                      f"{fig['single_loop_cpu_us_per_msg']:.1f} us loop CPU/msg), "
                      f"batch64 {fig['batch64_send_msgs_per_s']:>9,.0f} msg/s "
                      f"({fig['batch64_broker_cpu_us_per_msg']:.2f} / {fig['batch64_loop_cpu_us_per_msg']:.2f} us/msg), "
                      f"sync p50/p99 {fig['sync_send_p50_ms']:.3f}/{fig['sync_send_p99_ms']:.3f} ms", flush=True)
        cost = check_cost(Path(d)) if "acl" in configs else {}
    results = {f"{name}.{key}": statistics.median(run[key] for run in runs[name])
               for name in configs for key in runs[name][0]}
    if cost:
        plain_us = results["plain.batch64_broker_cpu_us_per_msg"] * 64
        results |= {f"acl.{k}": v for k, v in cost.items()}
        results["acl.batch64_check_vs_plain_cpu"] = cost["batch64_check_us"] / plain_us
        print(f"ACL check of one 64-message batch ({cost['batch64_body_bytes']:,.0f} B body), in this process: "
              f"{cost['batch64_check_us']:.1f} us, of which HMAC-SHA1 over the body {cost['batch64_sha1_us']:.1f} us; "
              f"{cost['batch64_check_us'] / plain_us:.1%} of plain's broker CPU per batch ({plain_us:.0f} us)")
    print(f"\nagainst plain, round by round (each round's figure over that round's plain): median [min-max] "
          f"of {args.rounds} rounds")
    for name in configs[1:]:
        for kind in ("single", "batch64"):
            line = f"  {name:10} {kind:8}"
            for what, key in (("throughput", "send_msgs_per_s"), ("broker CPU/msg", "broker_cpu_us_per_msg"),
                              ("loop CPU/msg", "loop_cpu_us_per_msg")):
                ratios = [a[f"{kind}_{key}"] / p[f"{kind}_{key}"] for a, p in zip(runs[name], runs["plain"], strict=True)]
                results[f"{name}.{kind}_{key}_vs_plain"] = statistics.median(ratios)
                line += f"  {what} {statistics.median(ratios):5.0%} [{min(ratios):.0%}-{max(ratios):.0%}]"
            print(line)
    print(f"saved {save('security', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    asyncio.run(main())
