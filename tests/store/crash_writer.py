"""Subprocess for the SIGKILL test: appends from several threads and prints what was acknowledged.

Usage: python crash_writer.py ROOT SYNC_FLUSH|ASYNC_FLUSH RUN_ID
Prints ``READY``, then ``ACK <key>`` for every message whose flush was confirmed (SYNC_FLUSH) or whose
put returned (ASYNC_FLUSH), until it is killed.
"""

from __future__ import annotations

import sys
import threading

from tidalmq.common.record import encode_record
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.message_store import DefaultMessageStore, PutRequest, PutStatus

THREADS = 4
QUEUES = 4


def main() -> None:
    root, mode, run_id = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024,
                             mapped_file_size_consume_queue=20 * 1000, flush_disk_type=mode,
                             flush_interval_commit_log=10, flush_interval_consume_queue=20,
                             flush_consume_queue_thorough_interval=200)
    store = DefaultMessageStore(cfg)
    assert store.load()
    store.start()
    out_lock = threading.Lock()

    def emit(keys: list[str]) -> None:
        with out_lock:
            sys.stdout.write("".join(f"ACK {k}\n" for k in keys))
            sys.stdout.flush()

    def worker(t: int) -> None:
        i = 0
        while True:
            batch = []
            for _ in range(1 + i % 3):
                key = f"{run_id}-{t}-{i}"
                q = i % QUEUES
                batch.append((key, PutRequest("CRASH", q, [encode_record(
                    topic="CRASH", queue_id=q, body=key.encode() * 20, properties={"KEYS": key})])))
                i += 1
            results = store.put_messages([r for _, r in batch])
            keys = [k for (k, _), res in zip(batch, results, strict=True) if res.status is PutStatus.PUT_OK]
            end = max(r.wrote_offset + r.wrote_bytes for r in results)
            done = threading.Event()

            def cb(ok: bool, keys: list[str] = keys, done: threading.Event = done) -> None:
                if ok:
                    emit(keys)
                done.set()

            store.request_flush(end, cb)
            if mode == "SYNC_FLUSH":
                done.wait(10)

    print("READY", flush=True)
    for t in range(THREADS):
        threading.Thread(target=worker, args=(t,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
