"""The official client's side of bench/client_bench.py, in its own process (the C++ client may hang on
shutdown, so the process leaves through os._exit). Usage: ``python official_client_agent.py '<json>'``;
prints one JSON line ``{"seconds": ..., "count": ...}``."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer
from rocketmq.ffi import dll

dll.SetByteMessageBody.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]


def message(topic: str, body: bytes) -> Message:
    m = Message(topic)
    dll.SetByteMessageBody(m._handle, body, len(body))
    return m


def main() -> None:
    cfg = json.loads(sys.argv[1])
    topic, n, body = cfg["topic"], int(cfg["n"]), bytes.fromhex(cfg["body_hex"])
    out: dict[str, float] = {"count": 0}
    if cfg["op"] in ("async", "batch"):
        p = Producer(cfg["group"])
        p.set_namesrv_addr(cfg["namesrv"])
        p.start()
        p.send_sync(message(topic, body))  # warm up: route and connection
        if cfg["op"] == "async":
            window = threading.Semaphore(int(cfg.get("window", 2000)))
            done = threading.Event()
            count = [0]
            lock = threading.Lock()

            def ok(_r: object) -> None:
                window.release()
                with lock:
                    count[0] += 1
                    if count[0] == n:
                        done.set()

            def failed(_e: Exception) -> None:
                ok(None)

            keep = []
            t0 = time.perf_counter()
            for _ in range(n):
                window.acquire()
                m = message(topic, body)
                keep.append(m)
                p.send_async(m, ok, failed)
            done.wait(300)
            out["seconds"] = time.perf_counter() - t0
            out["count"] = count[0]
        else:
            size = int(cfg["batch"])
            t0 = time.perf_counter()
            for _ in range(n // size):
                p.send_batch([message(topic, body) for _ in range(size)])
            out["seconds"] = time.perf_counter() - t0
            out["count"] = n // size * size
    elif cfg["op"] == "consume":
        got = [0]
        lock = threading.Lock()
        done = threading.Event()
        first = [0.0]

        def on(_m: object) -> None:
            with lock:
                if got[0] == 0:
                    first[0] = time.perf_counter()
                got[0] += 1
                if got[0] >= n:
                    done.set()

        c = PushConsumer(cfg["group"])
        c.set_namesrv_addr(cfg["namesrv"])
        c.set_thread_count(int(cfg.get("threads", 4)))
        c.subscribe(topic, on, "*")
        t0 = time.perf_counter()
        c.start()
        done.wait(300)
        out["seconds"] = time.perf_counter() - t0
        out["from_first"] = time.perf_counter() - first[0]
        out["count"] = got[0]
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
