"""Filter benchmark: pull throughput with a SQL92 filter selecting 10 % of the messages against a tag
filter selecting the same 10 %, in the same run, against ``tidalmq standalone`` (enablePropertyFilter).

Every message carries ``TAGS = T<i % 10>``, ``a = <i % 10>`` and ``price = <i % 100>`` (and a 1 KiB
body); each mode drains the whole topic (8 queues in parallel, 32 messages a pull, the subscription
sent with each pull) and reports matched messages per second and ConsumeQueue entries scanned per
second. Modes: no filter (everything), the tag filter ``T3``, SQL92 ``a = 3``, and a compound SQL92
``price >= 30 AND price < 40 AND TAGS IS NOT NULL``. Also the in-process cost of one evaluation on a
stored record (no network), to say what a bloom-filter bitmap could save at best.

    .venv/bin/python bench/filter_bench.py [--messages 200000] [--rounds 2] [--compare bench/out/filter-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.common import compare, cpu_s, print_machine, save  # noqa: E402
from tidalmq.common.message import encode_properties  # noqa: E402
from tidalmq.common.record import encode_record  # noqa: E402
from tidalmq.filter import compile_sql92  # noqa: E402
from tidalmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from tidalmq.remoting.command import RemotingCommand, SerializeType  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402

BODY = os.urandom(1024)
QUEUES = 8
TOPIC = "FilterBench"
MODES = {
    "all": ("*", "TAG"),
    "tag_10pct": ("T3", "TAG"),
    "sql_eq_10pct": ("a = 3", "SQL92"),
    "sql_compound_10pct": ("price >= 30 AND price < 40 AND TAGS IS NOT NULL", "SQL92"),
}


def props_of(i: int) -> dict[str, str]:
    return {"TAGS": f"T{i % 10}", "a": str(i % 10), "price": str(i % 100), "UNIQ_KEY": f"{i:032X}",
            "KEYS": f"order-{i}"}


def batch_body(base: int, n: int) -> bytes:
    parts = []
    for i in range(base, base + n):
        props = encode_properties(props_of(i)).encode()
        total = 20 + len(BODY) + 2 + len(props)
        parts.append(struct.pack(">iiiii", total, 0, 0, 0, len(BODY)) + BODY + struct.pack(">h", len(props)) + props)
    return b"".join(parts)


async def fill(c: RemotingClient, addr: str, n: int, batch: int = 64) -> None:
    ext = {"topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"}
    r = await c.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=ext), 10)
    assert r.code == ResponseCode.SUCCESS, r.remark
    sem = asyncio.Semaphore(16)

    async def one(k: int) -> None:
        async with sem:
            qid = k % QUEUES
            ext = {"a": "benchPG", "b": TOPIC, "c": "TBW102", "d": str(QUEUES), "e": str(qid), "f": "0",
                   "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}
            r = await c.invoke(addr, RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=ext,
                                                     body=batch_body(k * batch, batch),
                                                     serialize_type=SerializeType.ROCKETMQ), 30)
            assert r.code == ResponseCode.SUCCESS, r.remark

    # Batches go round-robin over the queues, so message i has the same properties in every mode.
    await asyncio.gather(*(one(k) for k in range(n // batch)))
    per_queue = n // batch // QUEUES * batch
    for q in range(QUEUES):
        while True:
            r = await c.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET,
                                                     ext_fields={"topic": TOPIC, "queueId": str(q)}), 5)
            if int(r.ext_fields.get("offset", "0")) >= per_queue:
                break
            await asyncio.sleep(0.05)


async def drain(c: RemotingClient, addr: str, group: str, sub: str, expression_type: str) -> tuple[int, int, float]:
    """Pull every queue to its end; (matched messages, entries scanned, seconds)."""
    matched = scanned = 0

    async def one(q: int) -> None:
        nonlocal matched, scanned
        conn = await c.connection(addr)
        offset = 0
        while True:
            ext = {"consumerGroup": group, "topic": TOPIC, "queueId": str(q), "queueOffset": str(offset),
                   "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                   "subscription": sub, "subVersion": "0", "expressionType": expression_type}
            r = await conn.invoke(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext,
                                                  serialize_type=SerializeType.ROCKETMQ), 30)
            if r.code == ResponseCode.SUCCESS:
                body = r.body_bytes()
                pos = 0
                while pos < len(body):
                    pos += struct.unpack_from(">i", body, pos)[0]
                    matched += 1
            elif r.code != ResponseCode.PULL_RETRY_IMMEDIATELY:
                assert r.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED), (r.code, r.remark)
                return
            nxt = int(r.ext_fields["nextBeginOffset"])
            scanned += nxt - offset
            if nxt <= offset:
                return
            offset = nxt

    t0 = time.perf_counter()
    await asyncio.gather(*(one(q) for q in range(QUEUES)))
    return matched, scanned, time.perf_counter() - t0


def eval_cost_ns(expression: str, n: int = 20000) -> float:
    """One record_filter call on a stored record, in-process."""
    recs = [memoryview(bytes(encode_record(topic=TOPIC, queue_id=0, body=BODY, properties=props_of(i))))
            for i in range(100)]
    f = compile_sql92(expression).record_filter
    t0 = time.perf_counter()
    for i in range(n):
        f(0, recs[i % 100])
    return (time.perf_counter() - t0) / n * 1e9


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2, help="drain each mode this many times, keep the best")
    ap.add_argument("--compare", help="a previous bench/out/filter-*.json to compare with")
    args = ap.parse_args()
    print_machine()
    results: dict[str, float] = {}
    unit = 12800  # whole batches on every queue, and a multiple of 100 so that each filter selects exactly 10 %
    n = max(1, args.messages // unit) * unit
    with tempfile.TemporaryDirectory() as d:
        s = Standalone(Path(d) / "data", {"enablePropertyFilter": "true",
                                          "mappedFileSizeCommitLog": str(1024 * 1024 * 1024)})
        s.start()
        try:
            broker = psutil.Process(s.proc.pid)  # type: ignore[union-attr]
            c = RemotingClient()
            addr = s.broker_addr
            t0 = time.perf_counter()
            await fill(c, addr, n)
            print(f"{n:,} messages of {len(BODY)} B stored in {time.perf_counter() - t0:.1f}s")
            for rnd in range(args.rounds):
                for mode, (sub, etype) in MODES.items():
                    b0, t0 = cpu_s(broker.pid), time.perf_counter()
                    matched, scanned, dt = await drain(c, addr, f"G_{mode}_{rnd}", sub, etype)
                    bcpu = (cpu_s(broker.pid) - b0) / (time.perf_counter() - t0)
                    expected = n if mode == "all" else n // 10
                    assert matched == expected, f"{mode}: matched {matched}, expected {expected}"
                    assert scanned == n, f"{mode}: scanned {scanned} of {n}"
                    key = f"{mode}.matched_msgs_per_s"
                    if matched / dt > results.get(key, 0):
                        results[key] = matched / dt
                        results[f"{mode}.scanned_entries_per_s"] = scanned / dt
                        results[f"{mode}.seconds"] = dt
                        results[f"{mode}.broker_cpu"] = bcpu
                    print(f"[round {rnd + 1}] {mode:20s} {etype:5s} {sub!r:52s} matched {matched:>7,} in {dt:6.2f}s: "
                          f"{matched / dt:>9,.0f} matched msg/s, {scanned / dt:>9,.0f} entries/s scanned "
                          f"(broker CPU {bcpu:.0%})")
            await c.close()
        finally:
            s.stop()
    for mode, (sub, etype) in MODES.items():
        if etype == "SQL92":
            ns = eval_cost_ns(sub)
            results[f"{mode}.eval_ns_per_record"] = ns
            print(f"in-process SQL92 evaluation {sub!r}: {ns:,.0f} ns per record (properties read + evaluation)")
    ratio = results["sql_eq_10pct.matched_msgs_per_s"] / results["tag_10pct.matched_msgs_per_s"]
    results["sql_eq_vs_tag"] = ratio
    print(f"\nSQL92 (a = 3) vs tag (T3), both 10 %: {ratio:.2f}x the tag filter's throughput")
    print(f"compound SQL92 vs tag: "
          f"{results['sql_compound_10pct.matched_msgs_per_s'] / results['tag_10pct.matched_msgs_per_s']:.2f}x")
    print(f"saved {save('filter', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    asyncio.run(main())
