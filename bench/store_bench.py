"""Store micro-benchmark: DefaultMessageStore append, group commit, dispatch and read throughput.

Figures (1 KiB bodies, records pre-encoded by the caller as the broker does):

* ``async_put_msgs_s``      ASYNC_FLUSH, ``--batch`` single-record requests per ``put_messages`` call
* ``async_dispatch_msgs_s`` the same run until reput has built every ConsumeQueue entry (put + reput)
* ``sync_gc_<N>t_msgs_s``   SYNC_FLUSH, N threads each putting one message and waiting for its flush
                            callback (group commit); with p50/p99 latency in ms
* ``get_msgs_s`` / ``get_mib_s``  get_message, 32 messages a call, over every queue

With ``--lite-topics N`` the ASYNC run's messages are lite messages (``__LITE_TOPIC``, N lite topics in
turn), so the dispatch figure includes each record's second entry in its lite topic's LMQ (docs/grpc.md,
"Lite topics"); the figures' names end in ``_liteN``.

    .venv/bin/python bench/store_bench.py [--messages 200000] [--threads 8,32] [--lite-topics 0] [--compare bench/out/store-latest.json]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import compare, percentile, print_machine, save  # noqa: E402
from tidalmq.common.record import encode_record  # noqa: E402
from tidalmq.store.config import MessageStoreConfig  # noqa: E402
from tidalmq.store.message_store import DefaultMessageStore, GetStatus, PutRequest  # noqa: E402

TOPIC = "BenchTopic"
QUEUES = 8


def make_records(n: int, body_size: int, lite_topics: int = 0) -> list[PutRequest]:
    body = b"x" * body_size
    kinds = max(1, lite_topics)
    proto = [encode_record(topic=TOPIC, queue_id=k % QUEUES, body=body,
                           properties={"TAGS": "TagA", "KEYS": "k", "UNIQ_KEY": "0" * 32,
                                       **({"__LITE_TOPIC": f"lite{k}"} if lite_topics else {})})
             for k in range(QUEUES * kinds)]
    return [PutRequest(TOPIC, i % QUEUES, [bytearray(proto[i % len(proto)])]) for i in range(n)]


def new_store(root: str, mode: str, file_size: int) -> DefaultMessageStore:
    cfg = MessageStoreConfig(store_path_root_dir=root, flush_disk_type=mode, mapped_file_size_commit_log=file_size)
    store = DefaultMessageStore(cfg)
    assert store.load()
    store.start()
    return store


def bench_async(root: str, n: int, batch: int, body: int, file_size: int, lite_topics: int = 0
                ) -> tuple[dict[str, float], DefaultMessageStore]:
    reqs = make_records(n, body, lite_topics)
    store = new_store(root, "ASYNC_FLUSH", file_size)
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        store.put_messages(reqs[i : i + batch])
    t_put = time.perf_counter() - t0
    assert store.wait_reput(store.max_phy_offset, 300)
    t_all = time.perf_counter() - t0
    suffix = f"_lite{lite_topics}" if lite_topics else ""
    return {f"async_put_msgs_s{suffix}": n / t_put, f"async_dispatch_msgs_s{suffix}": n / t_all,
            f"async_put_mib_s{suffix}": n * (body + 100) / t_put / 2**20}, store


def bench_get(store: DefaultMessageStore, rounds: int = 1) -> dict[str, float]:
    count = size = 0
    t0 = time.perf_counter()
    for _ in range(rounds):
        for q in range(QUEUES):
            off = 0
            while True:
                r = store.get_message("g", TOPIC, q, off, 32)
                if r.status is not GetStatus.FOUND:
                    break
                count += r.message_count
                size += r.buffer_total_size
                off = r.next_begin_offset
    dt = time.perf_counter() - t0
    return {"get_msgs_s": count / dt, "get_mib_s": size / dt / 2**20}


def bench_sync(root: str, threads: int, per_thread: int, body: int, file_size: int) -> dict[str, float]:
    store = new_store(root, "SYNC_FLUSH", file_size)
    lat: list[float] = []
    lock = threading.Lock()
    protos = [encode_record(topic=TOPIC, queue_id=q, body=b"x" * body, properties={"KEYS": "k"}) for q in range(QUEUES)]

    def worker(t: int) -> None:
        mine = []
        ev = threading.Event()
        ok_box = [False]

        def cb(ok: bool) -> None:
            ok_box[0] = ok
            ev.set()

        for _ in range(per_thread):
            ev.clear()
            s = time.perf_counter()
            r = store.put_messages([PutRequest(TOPIC, t % QUEUES, [bytearray(protos[t % QUEUES])])])[0]
            store.request_flush(r.wrote_offset + r.wrote_bytes, cb)
            ev.wait(10)
            mine.append(time.perf_counter() - s)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    store.shutdown()
    lat.sort()
    return {f"sync_gc_{threads}t_msgs_s": threads * per_thread / dt,
            f"sync_gc_{threads}t_p50_ms": percentile(lat, 50) * 1000,
            f"sync_gc_{threads}t_p99_ms": percentile(lat, 99) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=64, help="requests per put_messages call (ASYNC run)")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--threads", default="8,32")
    ap.add_argument("--sync-messages", type=int, default=20_000, help="total messages per SYNC_FLUSH run")
    ap.add_argument("--file-size", type=int, default=1024 * 1024 * 1024)
    ap.add_argument("--dir", default=None, help="where to put the data (default: a temp dir)")
    ap.add_argument("--compare", default=None, help="a previous JSON result to compare with")
    ap.add_argument("--lite-topics", type=int, default=0, help="ASYNC run: lite messages over this many lite topics")
    args = ap.parse_args()
    print_machine()
    base = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
    results: dict[str, float] = {}
    try:
        r, store = bench_async(str(base / "async"), args.messages, args.batch, args.body, args.file_size,
                               args.lite_topics)
        results.update(r)
        results.update(bench_get(store))
        store.shutdown()
        for t in (int(x) for x in args.threads.split(",") if x):
            results.update(bench_sync(str(base / f"sync{t}"), t, max(1, args.sync_messages // t), args.body,
                                      args.file_size))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for k, v in results.items():
        print(f"  {k:32s} {v:>14.1f}")
    path = save("store", results)
    print(f"wrote {path}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()
