"""Apache Kafka 4 (kafka_2.13, pinned in scripts/reference/kafka/pom.xml, fetched from Maven Central into the
reference cache), one KRaft node (broker and controller in one JVM) on loopback, driven by aiokafka.

W1 only: Kafka has no delayed or scheduled delivery (a record is readable once appended), so W2..W5 are
marked unsupported rather than emulated. The producer sends with acks=all, 256 sends awaiting their
acknowledgement; the consumer is a group member reading from the earliest offset, committing automatically.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.compare.base import ClientBase, ServerBase, free_port, wait_port
from bench.compare.peers.jvm import fetch_lib, java_cmd, live_heap, missing_java, pinned

WINDOW = 256
HEAP = ["-Xms1g", "-Xmx1g"]  # as the RocketMQ broker's
PARTITIONS = 4  # as TidalMQ's topic has 4 queues
NO_DELAY = "Apache Kafka has no delayed/scheduled delivery"


class Server(ServerBase):
    name = "kafka"
    unsupported = {"W2": NO_DELAY, "W3": NO_DELAY, "W4": NO_DELAY, "W5": NO_DELAY}

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.port, self.controller_port = free_port(), free_port()

    @classmethod
    def available(cls) -> str | None:
        why = missing_java()
        if why:
            return why
        try:
            import aiokafka  # noqa: F401
        except ImportError:
            return "not installed (aiokafka): run bench/compare/install.sh"
        return None

    @classmethod
    def version(cls) -> str:
        import aiokafka

        return f"Apache Kafka {pinned('kafka', 'kafka.version')} (Maven Central, KRaft), aiokafka {aiokafka.__version__}"

    def props(self) -> dict[str, str]:
        return {"process.roles": "broker,controller", "node.id": "1",
                "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": str(self.workdir / "data"), "num.partitions": str(PARTITIONS),
                "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0"}

    def settings(self) -> dict[str, str]:
        return {"mode": "KRaft, one node (broker + controller), defaults otherwise (flush left to the OS)",
                "JVM": " ".join(HEAP) + ", G1 and the JIT at their defaults",
                "client": f"aiokafka: producer acks=all, {WINDOW} sends in flight; group consumer from the "
                f"earliest offset, auto-commit; topic of {PARTITIONS} partitions"}

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        lib = fetch_lib("kafka", f"kafka-{pinned('kafka', 'kafka.version')}")
        conf = self.workdir / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.props().items()))
        if not (self.workdir / "data" / "meta.properties").exists():
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            fmt = subprocess.run(java_cmd(lib, ["-Xmx256m"], "kafka.tools.StorageTool",
                                          ["format", "-t", cluster, "-c", str(conf)]),
                                 capture_output=True, text=True, timeout=180)
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed: {fmt.stdout[-1500:]}{fmt.stderr[-1500:]}")
        proc = self.popen(java_cmd(lib, HEAP, "kafka.Kafka", [str(conf)]))
        wait_port(self.port, 180, proc, "kafka")

    def conn(self) -> dict[str, Any]:
        return {"bootstrap": f"127.0.0.1:{self.port}"}

    def live_memory(self) -> dict[str, Any]:
        return live_heap(self.server_pid())


class Client(ClientBase):
    def __init__(self, conn: dict[str, Any]) -> None:
        super().__init__(conn)
        self.loop = asyncio.new_event_loop()
        self.producer: Any = None

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def setup(self, dest: str, scheduled: bool) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def go() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.c["bootstrap"])
            await admin.start()
            try:
                if dest not in await admin.list_topics():
                    await admin.create_topics([NewTopic(dest, PARTITIONS, 1)])
            finally:
                await admin.close()

        self._run(go())

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        from aiokafka import AIOKafkaProducer

        async def go() -> int:
            if self.producer is None:
                self.producer = AIOKafkaProducer(bootstrap_servers=self.c["bootstrap"], acks="all")
                await self.producer.start()
            sem = asyncio.Semaphore(WINDOW)
            errors: list[BaseException] = []
            n = 0

            def done(fut: asyncio.Future[Any]) -> None:
                sem.release()
                if not fut.cancelled() and fut.exception() is not None:
                    errors.append(fut.exception())  # type: ignore[arg-type]

            for b in bodies:
                if b is None:
                    for _ in range(3):
                        await asyncio.sleep(0)
                    continue
                await sem.acquire()
                (await self.producer.send(dest, b)).add_done_callback(done)
                n += 1
            for _ in range(WINDOW):
                await sem.acquire()
            if errors:
                raise RuntimeError(f"kafka: {len(errors)} sends failed: {errors[0]!r}")
            return n

        return self._run(go())

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        raise NotImplementedError(NO_DELAY)

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        from aiokafka import AIOKafkaConsumer

        async def go() -> None:
            c = AIOKafkaConsumer(dest, bootstrap_servers=self.c["bootstrap"], group_id=f"bench_{dest}",
                                 auto_offset_reset="earliest", enable_auto_commit=True)
            await c.start()
            try:
                if self.on_ready:
                    self.on_ready()
                while not stop():
                    for records in (await c.getmany(timeout_ms=200, max_records=256)).values():
                        for r in records:
                            on_body(r.value)
            finally:
                await c.stop()

        self._run(go())

    def close(self) -> None:
        if self.producer is not None:
            self._run(self.producer.stop())
        self.loop.close()
