"""The Spark source's partition reader in a plain process (no Spark): ``--messages`` messages of
``--body-size`` bytes with tags and keys in ``--queues`` queues of a ``tidalmq standalone`` at its defaults
(a pull capped at 32 messages), each queue read by ``tidalmq.spark.fetch.read_range`` into Arrow record
batches as a Spark task reads its partition, ``--parallel`` queues at a time in threads (``local[2]`` runs
two tasks). Prints rows/s, the reader's CPU a row and the broker's, the figures to profile the source's
Python work with (``py-spy record -- python bench/spark_source_reader.py``).

    .venv/bin/python bench/spark_source_reader.py [--messages 1000000] [--compare bench/out/spark-reader-latest.json]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import Standalone  # noqa: E402

from bench.common import compare, cpu_s, print_machine, save  # noqa: E402


def _fill(ns: str, topic: str, n: int, body_size: int) -> None:
    from tidalmq.client.message import Message
    from tidalmq.client.sync import Producer

    pad = "x" * max(0, body_size - 12)
    with Producer("spark_reader_bench_fill", ns) as producer:
        for s in range(0, n, 256):
            msgs = [Message(topic, f"{i:012d}{pad}".encode(), tags="bench", keys=f"k{i}") for i in range(s, min(n, s + 256))]
            producer.send_batch(msgs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="reads of the whole topic; the best is reported")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting (RocketMQ's key), e.g. --set checkPropCRCOnRead=false")
    ap.add_argument("--compare", help="a previous JSON result (bench/out/spark-reader-*.json)")
    args = ap.parse_args()
    print_machine()
    from tidalmq.client.sync import Admin
    from tidalmq.spark import fetch
    from tidalmq.spark.options import parse_read_options
    from tidalmq.spark.records import ARROW_SCHEMA

    tmp = Path(tempfile.mkdtemp(prefix="spark-source-reader-"))
    settings = {"mappedFileSizeCommitLog": str(1 << 30), "flushDiskType": "ASYNC_FLUSH",
                **dict(kv.split("=", 1) for kv in args.set)}
    results: dict[str, float] = {}
    try:
        with Standalone(tmp / "data", settings) as broker, Admin(broker.namesrv_addr) as admin:
            ns = broker.namesrv_addr
            topic = f"SourceReader_{uuid.uuid4().hex[:6]}"
            admin.create_topic(topic, args.queues)
            _fill(ns, topic, args.messages, args.body_size)
            deadline = time.monotonic() + 120
            while (ends := {q.queue_id: q.max_offset for q in admin.topic_status(topic)}) and \
                    sum(ends.values()) < args.messages:
                if time.monotonic() > deadline:
                    raise SystemExit("the topic did not reach the written count")
                time.sleep(0.2)
            opts = parse_read_options({"nameserver": ns, "topic": topic}, streaming=False)
            broker_name = admin.topic_status(topic)[0].broker_name

            def read(qid: int) -> int:
                spec = fetch.RangeSpec(topic, broker_name, qid, 0, ends[qid])
                return sum(b.num_rows for b in fetch.read_range(opts, spec, schema=ARROW_SCHEMA))

            assert broker.proc is not None
            best = None
            for r in range(args.rounds):
                t0, c0, b0 = time.perf_counter(), time.process_time(), cpu_s(broker.proc.pid)
                with ThreadPoolExecutor(args.parallel) as pool:
                    rows = sum(pool.map(read, sorted(ends)))
                dt, cpu, bcpu = time.perf_counter() - t0, time.process_time() - c0, cpu_s(broker.proc.pid) - b0
                if rows != args.messages:
                    raise SystemExit(f"round {r}: read {rows} rows, expected {args.messages}")
                print(f"round {r}: {rows:,} rows in {dt:.2f} s = {rows / dt:,.0f} rows/s, reader CPU "
                      f"{cpu / rows * 1e6:.2f} µs a row, broker {bcpu / rows * 1e6:.2f} µs a row", flush=True)
                if best is None or rows / dt > best[0]:
                    best = (rows / dt, cpu / rows * 1e6, bcpu / rows * 1e6)
            assert best is not None
            results = {"read_rows_per_s": best[0], "reader_cpu_us_per_row": best[1], "broker_cpu_us_per_row": best[2],
                       "messages": args.messages, "parallel": args.parallel, "settings": " ".join(args.set)}
            print(f"best: {best[0]:,.0f} rows/s, reader {best[1]:.2f} µs a row, broker {best[2]:.2f} µs a row")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"saved {save('spark-reader', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
