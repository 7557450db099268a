"""TidalMQ: ``tidalmq standalone`` (tests/support.Standalone) driven by our asyncio client (tidalmq.client).

Scheduled messages use RocketMQ 5's arbitrary delivery time (``deliver_time_ms`` -> TIMER_DELIVER_MS); the
timer store releases them at ``timerPrecisionMs`` (5 ms here: at 1,000 due/s it halved W2's p99 against 10 ms, and 1-2 ms
made 10,000 due/s no better, docs/benchmarks.md; the broker's default is 100 ms, docs/scheduled-delivery.md allows
1 .. 1000). Durable setting (W4): ``flushDiskType=SYNC_FLUSH`` (a
send is acknowledged once fsynced).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.support import Standalone

from bench.compare.base import ClientBase, ServerBase
from tidalmq.client import Admin, ConsumeFromWhere, Message, Producer, PushConsumer, select_by_hash
from tidalmq.common.message import TIMER_DELIVER_MS

WINDOW = 256  # async sends in flight (keyed scheduled messages, W5, go one by one to their key's queue)
BATCH = 512  # messages a SEND_BATCH_MESSAGE request, as the Redis peer pipelines 500; timer messages too
BATCH_WINDOW = 16  # batch requests in flight: 8,192 messages (see docs/benchmarks.md, "Requests in flight")
# Messages a pull brings, as the Redis peer reads COUNT 256; the broker's per-pull caps raised to match
# (RocketMQ's maxTransferCountOnMessageInMemory / maxTransferBytesOnMessageInMemory, 32 and 256 KiB by default).
PULL_BATCH = 256
QUEUES = 4


def _loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class Server(ServerBase):
    name = "tidalmq"
    unsupported: dict[str, str] = {}
    start_timeout = 60.0  # seconds; bench/pending_bench.py allows more for a restart with N pending

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.sa: Standalone | None = None

    @classmethod
    def available(cls) -> str | None:
        return None

    @classmethod
    def version(cls) -> str:
        import tidalmq

        return f"tidalmq {getattr(tidalmq, '__version__', '0.1.0')} (this tree)"

    def _settings(self) -> dict[str, str]:
        s = {"timerPrecisionMs": "5", "mappedFileSizeCommitLog": str(256 * 1024 * 1024),
             "flushDiskType": "SYNC_FLUSH" if self.durable else "ASYNC_FLUSH",
             "maxTransferCountOnMessageInMemory": str(PULL_BATCH),
             "maxTransferBytesOnMessageInMemory": str(PULL_BATCH * 1536)}
        return s

    def settings(self) -> dict[str, str]:
        return {**self._settings(), "timer": "timerPrecisionMs=5 (the default is 100; 1 is the finest allowed)",
                "client": f"tidalmq.client Producer.send_batch ({BATCH} a request, {BATCH_WINDOW} in flight) for "
                f"plain and scheduled messages (timer messages in batches: beyond RocketMQ, which refuses delays "
                f"in batches), send_async ({WINDOW} in flight) for keyed ones (W5), PushConsumer (pulls of {PULL_BATCH}, listener batch 32, "
                f"orderly for W5), topic of {QUEUES} queues"}

    def start(self) -> None:
        if self.sa is None:
            self.sa = Standalone(self.workdir / "data", self._settings(), log_path=self.log_path)
            self.workdir.mkdir(parents=True, exist_ok=True)
        self.sa.start(self.start_timeout)
        self.proc = self.sa.proc  # type: ignore[assignment]

    def stop(self, timeout: float = 30.0) -> None:
        if self.sa is not None:
            try:
                self.sa.stop(timeout)
            except RuntimeError:
                pass
        self.proc = None

    def kill(self) -> None:
        if self.sa is not None:
            self.sa.kill()

    def server_pid(self) -> int | None:
        return self.sa.proc.pid if self.sa is not None and self.sa.proc is not None else None

    def conn(self) -> dict[str, Any]:
        assert self.sa is not None
        return {"namesrv": self.sa.namesrv_addr}


class Client(ClientBase):
    def __init__(self, conn: dict[str, Any]) -> None:
        super().__init__(conn)
        self.loop = _loop()
        self.producer: Producer | None = None
        self.on_ready: Callable[[], None] | None = None

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def setup(self, dest: str, scheduled: bool) -> None:
        async def create() -> None:
            admin = Admin(self.c["namesrv"])
            try:
                await admin.create_topic(dest, QUEUES)
            finally:
                await admin.close()

        self._run(create())

    async def _producer(self) -> Producer:
        if self.producer is None:
            self.producer = Producer(f"bench_pg_{int(time.time() * 1000) % 10**9}", self.c["namesrv"])
            await self.producer.start()
        return self.producer

    async def _send_all(self, msgs: Iterable[tuple[Message, str] | None]) -> int:
        p = await self._producer()
        sem = asyncio.Semaphore(WINDOW)
        errors: list[BaseException] = []
        n = 0

        def done(fut: asyncio.Future[Any]) -> None:
            sem.release()
            if not fut.cancelled() and fut.exception() is not None:
                errors.append(fut.exception())  # type: ignore[arg-type]

        for item in msgs:
            if item is None:  # a pause in a paced stream: let the sends started so far go out
                for _ in range(3):
                    await asyncio.sleep(0)
                continue
            msg, key = item
            await sem.acquire()
            if key:
                f = p.send_async(msg, selector=select_by_hash, arg=key)
            else:
                f = p.send_async(msg)
            f.add_done_callback(done)
            n += 1
        for _ in range(WINDOW):
            await sem.acquire()
        if errors:
            raise RuntimeError(f"{len(errors)} sends failed: {errors[0]!r}")
        return n

    async def _send_batches(self, msgs: Iterable[Message | None]) -> int:
        """The batch idiom: up to BATCH messages a request, BATCH_WINDOW requests in flight; a pause in a
        paced stream (``None``) sends what is held at once. Timer and plain messages never share a batch
        (the broker's rule): a change of kind sends what is held."""
        p = await self._producer()
        sem = asyncio.Semaphore(BATCH_WINDOW)
        errors: list[BaseException] = []
        held: list[Message] = []
        held_timed = False
        n = 0

        def done(fut: asyncio.Future[Any]) -> None:
            sem.release()
            if not fut.cancelled() and fut.exception() is not None:
                errors.append(fut.exception())  # type: ignore[arg-type]

        async def flush() -> None:
            nonlocal held
            if held:
                await sem.acquire()
                asyncio.ensure_future(p.send_batch(held)).add_done_callback(done)
                held = []

        for m in msgs:
            if m is None:
                await flush()
                for _ in range(3):
                    await asyncio.sleep(0)
                continue
            timed = TIMER_DELIVER_MS in m.properties
            if timed != held_timed:
                await flush()
                held_timed = timed
            held.append(m)
            n += 1
            if len(held) >= BATCH:
                await flush()
        await flush()
        for _ in range(BATCH_WINDOW):
            await sem.acquire()
        if errors:
            raise RuntimeError(f"{len(errors)} batch sends failed: {errors[0]!r}")
        return n

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        return self._run(self._send_batches(None if b is None else Message(dest, b) for b in bodies))

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        now = time.time() * 1000

        def msg(d: int, b: bytes) -> Message:
            if d <= now + 1:  # already due: an ordinary send (the client refuses past times)
                return Message(dest, b)
            return Message(dest, b, deliver_time_ms=d)

        items = list(items)
        if any(k for _d, _b, k in items):  # keyed (W5): each to its key's queue, one by one
            return self._run(self._send_all((msg(d, b), k) for d, b, k in items))
        return self._run(self._send_batches(msg(d, b) for d, b, _k in items))

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        async def listener(msgs: list[Any]) -> None:
            for m in msgs:
                on_body(m.body)

        async def run() -> None:
            c = PushConsumer(f"bench_cg_{dest}", self.c["namesrv"], listener=listener, orderly=ordered,
                             consume_from_where=ConsumeFromWhere.FIRST_OFFSET, consume_message_batch_max_size=32,
                             pull_batch_size=PULL_BATCH,
                             rebalance_interval=2.0, listener_inline=True)
            c.subscribe(dest, "*")
            await c.start()
            if self.on_ready:
                self.on_ready()
            try:
                while not stop():
                    await asyncio.sleep(0.05)
            finally:
                await c.shutdown()

        self._run(run())

    def close(self) -> None:
        if self.producer is not None:
            self._run(self.producer.shutdown())
        self.loop.close()
