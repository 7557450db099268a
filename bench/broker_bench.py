"""Broker benchmark: sends and pulls over loopback against ``tidalmq standalone``.

The broker runs in its own process; this process is the load generator (its CPU is reported too:
the machine may have only 2 cores). Figures: single-message async send msgs/s, sync send latency
p50/p99 under ASYNC_FLUSH and SYNC_FLUSH, SYNC_FLUSH throughput with concurrent senders (group
commit), batched send (64 a batch) msgs/s, and pull msgs/s.

With ``--acl`` the broker runs with ``aclEnable=true`` and every request is signed (docs/acl.md): sends
and pulls by a non-admin account whose topic and group permissions are checked, so the figures show what
ACL costs per request (compare with a run without it).

    .venv/bin/python bench/broker_bench.py [--messages 200000] [--acl] [--compare bench/out/broker-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.common import compare, cpu_s, percentile, print_machine, save  # noqa: E402
from tidalmq.acl import RequestSigner, SessionCredentials  # noqa: E402
from tidalmq.common.message import encode_properties  # noqa: E402
from tidalmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from tidalmq.remoting.command import RemotingCommand, SerializeType  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402

BODY = os.urandom(1024)
QUEUES = 8

# --acl: the accounts of the broker's plain_acl.yml, and who signs what (None: ACL off, nothing signed).
ACL_YML = """accounts:
  - accessKey: benchAdmin
    secretKey: benchAdminSecret
    admin: true
  - accessKey: benchUser
    secretKey: benchUserSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Bench_async_flush=PUB|SUB
      - Bench_sync_flush=PUB|SUB
"""
ADMIN_SIGNER: RequestSigner | None = None
USER_SIGNER: RequestSigner | None = None


def signed(cmd: RemotingCommand, signer: RequestSigner | None) -> RemotingCommand:
    if signer is not None:
        signer.sign(cmd.ext_fields, cmd.body)
    return cmd


def send_req(topic: str, qid: int, i: int, *, batch: bytes | None = None) -> RemotingCommand:
    ext = {"a": "benchPG", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": str(qid), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0",
           "i": encode_properties({"UNIQ_KEY": f"{os.getpid():08X}{i:024X}", "WAIT": "true"}),
           "j": "0", "k": "false"}
    if batch is not None:
        ext["m"] = "true"
    return signed(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=ext,
                                  body=batch if batch is not None else BODY, serialize_type=SerializeType.ROCKETMQ),
                  USER_SIGNER)


def batch_body(n: int, base: int, extra: Callable[[int], dict[str, str]] | None = None) -> bytes:
    """A SEND_BATCH_MESSAGE body of ``n`` messages; ``extra(i)`` adds properties to message ``i``."""
    parts = []
    for i in range(n):
        props = encode_properties({"UNIQ_KEY": f"{base + i:032X}", **(extra(i) if extra else {})}).encode()
        total = 20 + len(BODY) + 2 + len(props)
        parts.append(struct.pack(">iiiii", total, 0, 0, 0, len(BODY)) + BODY + struct.pack(">h", len(props)) + props)
    return b"".join(parts)


class BatchBodies:
    """Batch bodies of ``n`` messages with distinct UNIQ_KEYs, stamped into a template with numpy, so
    the load generator spends its CPU on sending rather than on building messages."""

    _HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)

    def __init__(self, n: int) -> None:
        self.n = n
        self.template = np.frombuffer(batch_body(n, 0), dtype=np.uint8)
        marker = encode_properties({"UNIQ_KEY": ""}).encode()[:-1]  # the key's name and separator
        raw = self.template.tobytes()
        starts, pos = [], 0
        for _ in range(n):
            pos = raw.index(marker, pos) + len(marker)
            starts.append(pos)
        self.key_pos = np.array(starts, dtype=np.int64)[:, None] + np.arange(32)

    def body(self, base: int) -> bytes:
        out = self.template.copy()
        keys = (base + np.arange(self.n, dtype=np.uint64)).astype(">u8").view(np.uint8).reshape(self.n, 8)
        digits = np.zeros((self.n, 32), dtype=np.uint8) + ord("0")
        digits[:, 16::2] = self._HEX[keys >> 4]
        digits[:, 17::2] = self._HEX[keys & 0x0F]
        out[self.key_pos] = digits
        return out.tobytes()


async def create_topic(c: RemotingClient, addr: str, topic: str) -> None:
    ext = {"topic": topic, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"}
    r = await c.invoke(addr, signed(RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=ext),
                                    ADMIN_SIGNER), 10)
    assert r.code == ResponseCode.SUCCESS, r.remark


def build_sends(topic: str, n: int, batch: int = 1) -> list[RemotingCommand]:
    """The requests ``pipelined_sends`` would make for ``n`` messages, built (and signed) ahead."""
    bodies = BatchBodies(batch) if batch > 1 else None
    return [send_req(topic, i % QUEUES, i, batch=bodies.body(i * batch) if bodies is not None else None)
            for i in range(n // batch)]


async def pipelined_sends(c: RemotingClient, addr: str, topic: str, n: int, window: int, batch: int = 1,
                          prebuilt: list[RemotingCommand] | None = None) -> float:
    """Keep ``window`` sends in flight on one connection until ``n`` messages are acknowledged; with
    ``prebuilt`` (``build_sends``), the load generator only encodes and writes them."""
    conn = await c.connection(addr)
    loop = asyncio.get_running_loop()
    total = n // batch
    bodies = BatchBodies(batch) if batch > 1 and prebuilt is None else None
    state = {"sent": 0, "acked": 0, "errors": 0}
    done = loop.create_future()

    def on_response(fut: asyncio.Future[RemotingCommand]) -> None:
        state["acked"] += 1
        if fut.exception() is not None or fut.result().code != ResponseCode.SUCCESS:
            state["errors"] += 1
        if state["acked"] == total:
            if not done.done():
                done.set_result(None)
        elif state["sent"] < total:
            send_one()

    def send_one() -> None:
        i = state["sent"]
        state["sent"] += 1
        if prebuilt is not None:
            req = prebuilt[i]
        else:
            req = send_req(topic, i % QUEUES, i, batch=bodies.body(i * batch) if bodies is not None else None)
        conn.request(req).add_done_callback(on_response)

    t0 = time.perf_counter()
    for _ in range(min(window, total)):
        send_one()
    await asyncio.wait_for(done, 300)
    dt = time.perf_counter() - t0
    if state["errors"]:
        print(f"  !! {state['errors']} sends failed")
    return total * batch / dt


async def sync_latency(c: RemotingClient, addr: str, topic: str, n: int) -> tuple[float, float]:
    conn = await c.connection(addr)
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        r = await conn.invoke(send_req(topic, i % QUEUES, i), 10)
        lat.append((time.perf_counter() - t0) * 1000)
        assert r.code == ResponseCode.SUCCESS, r.remark
    lat.sort()
    return percentile(lat, 50), percentile(lat, 99)


async def pull_all(c: RemotingClient, addr: str, topic: str, expected: int, max_nums: int = 32) -> float:
    conn = await c.connection(addr)
    got = 0

    async def drain(qid: int) -> None:
        nonlocal got
        offset = 0
        while True:
            ext = {"consumerGroup": "benchCG", "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
                   "maxMsgNums": str(max_nums), "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                   "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
            r = await conn.invoke(signed(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext,
                                                         serialize_type=SerializeType.ROCKETMQ), USER_SIGNER), 30)
            if r.code != ResponseCode.SUCCESS:
                return
            nxt = int(r.ext_fields["nextBeginOffset"])
            got += nxt - offset
            offset = nxt

    t0 = time.perf_counter()
    await asyncio.gather(*(drain(q) for q in range(QUEUES)))
    dt = time.perf_counter() - t0
    if got < expected:
        print(f"  !! pulled {got} of {expected}")
    return got / dt


def cpu_of(proc: psutil.Process, *, children: bool = True) -> float:
    """CPU seconds of a process so far, with the live processes under it unless ``children=False``."""
    return cpu_s(proc.pid, children=children)


def scrape_every(url: str, interval: float, stop: threading.Event) -> None:
    """A Prometheus stand-in: scrapes the broker's endpoint while the load runs (docs/metrics.md)."""
    while not stop.wait(interval):
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()


async def run_phase(flush: str, n: int, results: dict[str, float], acl: bool = False, metrics: str = "PROM",
                    scrape_interval: float = 15.0) -> None:
    with tempfile.TemporaryDirectory() as d:
        settings = {"flushDiskType": flush, "mappedFileSizeCommitLog": str(256 * 1024 * 1024),
                    "metricsExporterType": metrics}
        if acl:
            (Path(d) / "acl.yml").write_text(ACL_YML)
            settings |= {"aclEnable": "true", "rocketmq.acl.plain.file": str(Path(d) / "acl.yml")}
        s = Standalone(Path(d) / "data", settings)
        s.start()
        stop_scraping = threading.Event()
        if metrics == "PROM":  # scraped as Prometheus would while the load runs
            threading.Thread(target=scrape_every, args=(s.metrics_url, scrape_interval, stop_scraping),
                             daemon=True).start()
        try:
            broker = psutil.Process(s.proc.pid)  # type: ignore[union-attr]
            me = psutil.Process()
            c = RemotingClient()
            addr = s.broker_addr
            tag = flush.lower()
            topic = f"Bench_{tag}"
            await create_topic(c, addr, topic)
            await pipelined_sends(c, addr, topic, 2000, 64)  # warm-up
            p50, p99 = await sync_latency(c, addr, topic, 2000)
            results[f"{tag}.sync_send_p50_ms"] = p50
            results[f"{tag}.sync_send_p99_ms"] = p99
            print(f"[{flush}] sync send latency: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
            b0, m0, t0 = cpu_of(broker), cpu_of(me, children=False), time.perf_counter()
            rate = await pipelined_sends(c, addr, topic, n, 512)
            wall = time.perf_counter() - t0
            results[f"{tag}.async_send_msgs_per_s"] = rate
            print(f"[{flush}] single-message async send: {rate:,.0f} msg/s "
                  f"(broker CPU {(cpu_of(broker) - b0) / wall:.0%}, load generator CPU {(cpu_of(me, children=False) - m0) / wall:.0%})")
            b0, m0, t0 = cpu_of(broker), cpu_of(me, children=False), time.perf_counter()
            rate = await pipelined_sends(c, addr, topic, n * 2 // 64 * 64, 16, batch=64)
            wall = time.perf_counter() - t0
            results[f"{tag}.batch64_send_msgs_per_s"] = rate
            print(f"[{flush}] batched send (64 a batch): {rate:,.0f} msg/s "
                  f"(broker CPU {(cpu_of(broker) - b0) / wall:.0%}, load generator CPU {(cpu_of(me, children=False) - m0) / wall:.0%})")
            if flush == "ASYNC_FLUSH":
                total = 2000 + 2000 + n + n * 2 // 64 * 64
                b0, m0, t0 = cpu_of(broker), cpu_of(me, children=False), time.perf_counter()
                rate = await pull_all(c, addr, topic, total)
                wall = time.perf_counter() - t0
                results["pull_msgs_per_s"] = rate
                print(f"pull (32 a request, 8 queues in parallel): {rate:,.0f} msg/s "
                      f"(broker CPU {(cpu_of(broker) - b0) / wall:.0%}, load generator CPU {(cpu_of(me, children=False) - m0) / wall:.0%})")
            await c.close()
        finally:
            stop_scraping.set()
            s.stop()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--compare", help="a previous bench/out/broker-*.json to compare with")
    ap.add_argument("--acl", action="store_true", help="aclEnable=true on the broker, every request signed")
    ap.add_argument("--metrics", choices=("PROM", "DISABLE"), default="PROM",
                    help="metricsExporterType of the broker (PROM: scraped during the run, see --scrape-interval)")
    ap.add_argument("--scrape-interval", type=float, default=15.0, help="seconds between scrapes (Prometheus: 15)")
    ap.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), action="append",
                    help="run only this flushDiskType's phase (repeatable; default both)")
    args = ap.parse_args()
    print_machine()
    if args.acl:
        global ADMIN_SIGNER, USER_SIGNER
        ADMIN_SIGNER = RequestSigner(SessionCredentials("benchAdmin", "benchAdminSecret"))
        USER_SIGNER = RequestSigner(SessionCredentials("benchUser", "benchUserSecret"))
        print("ACL on: every request signed, sends and pulls by a non-admin account")
    results: dict[str, float] = {}
    print(f"metricsExporterType={args.metrics}")
    for flush in args.flush or ("ASYNC_FLUSH", "SYNC_FLUSH"):
        await run_phase(flush, args.messages, results, acl=args.acl, metrics=args.metrics,
                        scrape_interval=args.scrape_interval)
    path = save("broker-acl" if args.acl else "broker", results)
    print(f"\nresults written to {path}")
    compare(args.compare, results)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
