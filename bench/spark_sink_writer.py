"""The Spark sink's partition writer in a plain process (no Spark): ``--messages`` rows of ``--body-size``
bytes with tags and keys, in 10,000-row Arrow batches as Spark hands them, sent to a ``tidalmq standalone``
on the same machine. Prints rows/s and the writer's CPU a row (the broker runs in its own process), the
figure to profile the sink's Python work with (``py-spy record -- python bench/spark_sink_writer.py``).

    .venv/bin/python bench/spark_sink_writer.py [--messages 300000] [--random-keys]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import Standalone  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--random-keys", action="store_true", help="no deterministic UNIQ_KEYs (a batch write "
                    "without writeId); the default uses them, as a streaming write or a writeId does")
    args = ap.parse_args()
    import pyarrow as pa

    from tidalmq.client.sync import Admin
    from tidalmq.spark import sink
    from tidalmq.spark.options import parse_write_options

    tmp = Path(tempfile.mkdtemp(prefix="spark-sink-writer-"))
    settings = {"mappedFileSizeCommitLog": str(512 << 20), "flushDiskType": "ASYNC_FLUSH"}
    try:
        with Standalone(tmp / "data", settings) as broker, Admin(broker.namesrv_addr) as admin:
            topic = f"SinkWriter_{uuid.uuid4().hex[:6]}"
            admin.create_topic(topic, 8)
            opts = parse_write_options({"nameserver": broker.namesrv_addr, "topic": topic}, streaming=False)
            pad = "x" * max(0, args.body_size - 12)
            batches = [pa.record_batch([pa.array([f"{i:012d}{pad}" for i in ids]), pa.array(["bench"] * len(ids)),
                                        pa.array([f"k{i}" for i in ids])], names=["body", "tags", "keys"])
                       for ids in (range(s, min(args.messages, s + 10_000)) for s in range(0, args.messages, 10_000))]
            keys = None if args.random_keys else "ABCDEF0123456789ABCDEF01"
            t0, c0 = time.perf_counter(), time.process_time()
            done = asyncio.run(sink._send_all(opts, {"body": "body", "tags": "tags", "keys": "keys"}, iter(batches),
                                              keys))
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"sink writer {done.rows:,} rows in {dt:.2f} s = {done.rows / dt:,.0f} rows/s, "
                  f"writer CPU {cpu / done.rows * 1e6:.2f} us a row")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
