"""NATS JetStream (nats-server from Debian, nats-py).

W1 only: a file-storage stream, ``js.publish`` with 256 awaiting their PubAck, a durable pull consumer
(fetch 256, explicit ack). nats-server 2.9.10 has no delayed or scheduled delivery (no per-message delay
header; consumer-side ``nak(delay=...)`` is a redelivery back-off, not a schedule), so W2..W5 are marked
unsupported rather than emulated.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

from bench.compare.base import ClientBase, ServerBase, free_port, wait_port

WINDOW = 256
NO_DELAY = "nats-server 2.9.10 (Debian) has no delayed/scheduled delivery"


class Server(ServerBase):
    name = "nats"
    packages = ("nats-server",)
    binary = "/usr/sbin/nats-server"
    unsupported = {"W2": NO_DELAY, "W3": NO_DELAY, "W4": NO_DELAY, "W5": NO_DELAY}

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.port = free_port()

    @classmethod
    def version(cls) -> str:
        v = subprocess.run([cls.binary, "--version"], capture_output=True, text=True).stdout.strip()
        return f"{v}, nats-py {getattr(nats, '__version__', '2.16.0')}"

    def settings(self) -> dict[str, str]:
        return {"jetstream": "enabled, file storage (stream per destination), defaults otherwise",
                "publish": f"js.publish, {WINDOW} awaiting PubAck",
                "consume": "durable pull consumer, fetch 256, AckExplicit"}

    def start(self) -> None:
        sd = self.workdir / "js"
        sd.mkdir(parents=True, exist_ok=True)
        proc = self.popen([self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(sd)])
        wait_port(self.port, 60, proc, "nats-server")

    def conn(self) -> dict[str, Any]:
        return {"port": self.port}


class Client(ClientBase):
    def __init__(self, conn: dict[str, Any]) -> None:
        super().__init__(conn)
        self.loop = asyncio.new_event_loop()
        self.nc: Any = None

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _js(self) -> Any:
        if self.nc is None:
            self.nc = await nats.connect(f"nats://127.0.0.1:{self.c['port']}", max_reconnect_attempts=-1,
                                         reconnect_time_wait=0.2)
        return self.nc.jetstream()

    def setup(self, dest: str, scheduled: bool) -> None:
        async def go() -> None:
            js = await self._js()
            await js.add_stream(name=dest.upper(), subjects=[dest], storage=StorageType.FILE)

        self._run(go())

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        async def go() -> int:
            js = await self._js()
            sem = asyncio.Semaphore(WINDOW)
            errors: list[BaseException] = []
            n = 0

            async def one(b: bytes) -> None:
                try:
                    await js.publish(dest, b)
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
                finally:
                    sem.release()

            tasks = set()
            for b in bodies:
                if b is None:
                    for _ in range(3):
                        await asyncio.sleep(0)
                    continue
                await sem.acquire()
                t = asyncio.ensure_future(one(b))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
                n += 1
            if tasks:
                await asyncio.gather(*tasks)
            if errors:
                raise RuntimeError(f"nats: {len(errors)} publishes failed: {errors[0]!r}")
            return n

        return self._run(go())

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        raise NotImplementedError(NO_DELAY)

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        async def go() -> None:
            js = await self._js()
            sub = await js.pull_subscribe(dest, durable="c", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
            if self.on_ready:
                self.on_ready()
            while not stop():
                try:
                    msgs = await sub.fetch(256, timeout=0.2)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                except nats.errors.Error:
                    await asyncio.sleep(0.2)
                    continue
                for m in msgs:
                    on_body(m.data)
                    await m.ack()

        self._run(go())

    def close(self) -> None:
        if self.nc is not None:
            self._run(self.nc.close())
        self.loop.close()
