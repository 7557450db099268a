"""beanstalkd: delayed jobs (``put`` with ``delay``, in whole seconds), greenstalk.

A tube per destination; the consumer ``reserve``s and ``delete``s each job. Persistence: the binlog (``-b``),
``-f 50`` (fsync at most every 50 ms, the documented default when -b is given); W4: ``-f 0`` (fsync on every
write, the most durable setting). Delays are whole seconds: a deliver time is rounded *up* to the next second
from the send (never early, up to 1 s late by construction). greenstalk is synchronous: one request, one
answer (no pipelining), so the producer is not "async".
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import greenstalk

from bench.compare.base import ClientBase, ServerBase, free_port, wait_port


class Server(ServerBase):
    name = "beanstalkd"
    packages = ("beanstalkd",)
    binary = "/usr/bin/beanstalkd"
    unsupported: dict[str, str] = {}

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.port = free_port()

    @classmethod
    def version(cls) -> str:
        v = subprocess.run([cls.binary, "-v"], capture_output=True, text=True).stdout.strip()
        return f"{v}, greenstalk {getattr(greenstalk, '__version__', '2.1.1')}"

    def settings(self) -> dict[str, str]:
        return {"binlog": f"-b <dir> -f {0 if self.durable else 50}", "delay": "put(delay=ceil(seconds))",
                "client": "greenstalk (synchronous: put / reserve + delete, one round trip each)",
                "ttr": "60 s"}

    def start(self) -> None:
        b = self.workdir / "binlog"
        b.mkdir(parents=True, exist_ok=True)
        proc = self.popen([self.binary, "-l", "127.0.0.1", "-p", str(self.port), "-b", str(b),
                           "-f", "0" if self.durable else "50"])
        wait_port(self.port, 60, proc, "beanstalkd")

    def conn(self) -> dict[str, Any]:
        return {"port": self.port}


class Client(ClientBase):
    def __init__(self, conn: dict[str, Any]) -> None:
        super().__init__(conn)
        self.cl: greenstalk.Client | None = None

    def _client(self, tube: str) -> greenstalk.Client:
        return greenstalk.Client(("127.0.0.1", self.c["port"]), encoding=None, use=tube, watch=tube)

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        cl = self._client(dest)
        n = 0
        for b in bodies:
            if b is not None:
                cl.put(b, ttr=60)
                n += 1
        cl.close()
        return n

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        cl = self._client(dest)
        n = 0
        for d, b, _k in items:
            delay = max(0, math.ceil((d - time.time() * 1000) / 1000))
            cl.put(b, delay=delay, ttr=60)
            n += 1
        cl.close()
        return n

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        ready = False
        cl = None
        while not stop():
            try:
                if cl is None:
                    cl = self._client(dest)
                    if not ready and self.on_ready:
                        self.on_ready()
                        ready = True
                try:
                    job = cl.reserve(timeout=1)
                except greenstalk.TimedOutError:
                    continue
                on_body(job.body)
                cl.delete(job)
            except (greenstalk.Error, OSError, ConnectionError):
                cl = None
                time.sleep(0.2)
        if cl is not None:
            cl.close()
