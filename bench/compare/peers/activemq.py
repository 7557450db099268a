"""ActiveMQ "Classic" with its broker scheduler (``schedulerSupport="true"``), over STOMP (stomp.py).

A delayed message carries ``AMQ_SCHEDULED_DELAY`` (ms); the scheduler's job store (KahaDB-based, under the
data dir) holds it until due, then the broker sends it to the queue. Persistent messages, KahaDB with its
default ``journalDiskSyncStrategy=always`` (ActiveMQ's most durable setting, also its default, so W4 runs the
same configuration). Consumers: ``ack:client-individual``, prefetch 500. JVM heap as Debian's package sets it
(``-Xms512M -Xmx512M``).
"""

from __future__ import annotations

import itertools
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import stomp

from bench.compare.base import ClientBase, ServerBase, free_port, wait_port
from bench.compare.peers.jvm import live_heap

HOME = Path("/usr/share/activemq")
RECEIPT_EVERY = 1000  # a receipt (the broker's answer) every N sends and on the last one
RECEIPT_EVERY_DURABLE = 100
PREFETCH = 500
JAVA_OPENS = ["--add-reads=java.xml=java.logging"] + [
    f"--add-opens={m}=ALL-UNNAMED" for m in (
        "java.base/java.security", "java.base/java.net", "java.base/java.lang", "java.base/java.util",
        "java.naming/javax.naming.spi", "java.rmi/sun.rmi.transport.tcp", "java.base/java.util.concurrent",
        "java.base/java.util.concurrent.atomic")]


def _stomp_version() -> str:
    v = getattr(stomp, "__version__", "?")
    return v if isinstance(v, str) else ".".join(map(str, v))


class Server(ServerBase):
    name = "activemq"
    packages = ("activemq",)
    binary = str(HOME / "bin" / "activemq.jar")
    unsupported: dict[str, str] = {}

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.port = free_port()

    @classmethod
    def version(cls) -> str:
        v = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "activemq"], capture_output=True, text=True).stdout
        j = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
        return f"activemq {v} ({j[0] if j else 'java ?'}), stomp.py {_stomp_version()}"

    def settings(self) -> dict[str, str]:
        return {"scheduler": 'schedulerSupport="true" (KahaDB job scheduler store), AMQ_SCHEDULED_DELAY header',
                "persistence": "KahaDB, journalDiskSyncStrategy=always (default), persistent messages",
                "jvm": "-Xms512M -Xmx512M (Debian's activemq-options)",
                "transport": "STOMP 1.2 on loopback (transport.tcpNoDelay=true; TCP_NODELAY on stomp.py's socket too)",
                "publish": f"async SENDs, a receipt every {RECEIPT_EVERY_DURABLE if self.durable else RECEIPT_EVERY} "
                           "and on the last (the run waits for it)",
                "consume": f"ack:client-individual, activemq.prefetchSize {PREFETCH}"}

    def start(self) -> None:
        w = self.workdir
        conf, data = w / "conf", w / "data"
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        (conf / "activemq.xml").write_text(f"""<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="bench" persistent="true"
          dataDirectory="{data}" schedulerSupport="true" advisorySupport="false">
    <persistenceAdapter><kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="always"/></persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{self.port}?transport.closeAsync=false&amp;transport.tcpNoDelay=true"/>
    </transportConnectors>
  </broker>
</beans>
""")
        cmd = ["java", "-Xms512M", "-Xmx512M", *JAVA_OPENS, f"-Dactivemq.classpath={conf}",
               f"-Dactivemq.home={HOME}", f"-Dactivemq.base={w}", f"-Dactivemq.conf={conf}",
               f"-Dactivemq.data={data}", f"-Djava.io.tmpdir={w}", "-jar", self.binary, "start",
               f"xbean:file:{conf / 'activemq.xml'}"]
        proc = self.popen(cmd)
        wait_port(self.port, 120, proc, "activemq")
        deadline = time.monotonic() + 60
        while True:
            try:
                c = stomp.Connection12([("127.0.0.1", self.port)], heartbeats=(0, 0))
                c.connect(wait=True)
                c.disconnect()
                break
            except stomp.exception.StompException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def conn(self) -> dict[str, Any]:
        return {"port": self.port, "durable": self.durable}

    def live_memory(self) -> dict[str, Any]:
        return live_heap(self.server_pid())


class _Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.receipts: dict[str, threading.Event] = {}
        self.messages: queue.Queue[Any] = queue.Queue()
        self.errors: list[str] = []

    def on_receipt(self, frame: Any) -> None:
        ev = self.receipts.get(frame.headers.get("receipt-id", ""))
        if ev is not None:
            ev.set()

    def on_error(self, frame: Any) -> None:
        self.errors.append(f"{frame.headers.get('message')}: {frame.body!r}"[:300])

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)


class Client(ClientBase):
    def __init__(self, conn: dict[str, Any]) -> None:
        super().__init__(conn)
        self.listener = _Listener()
        self.conn: Any = None
        self.receipt_ids = itertools.count()

    def _connect(self) -> Any:
        c = stomp.Connection12([("127.0.0.1", self.c["port"])], heartbeats=(0, 0), auto_decode=False,
                               reconnect_attempts_max=1)
        c.set_listener("l", self.listener)
        c.connect(wait=True)
        sock = getattr(c.transport, "socket", None)
        if sock is not None:  # stomp.py leaves Nagle on; small frames would wait for delayed ACKs
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c

    def _conn(self) -> Any:
        if self.conn is None or not self.conn.is_connected():
            self.conn = self._connect()
        return self.conn

    def _send_all(self, items: Iterable[tuple[bytes, dict[str, str]] | None], dest: str) -> int:
        c = self._conn()
        every = RECEIPT_EVERY_DURABLE if self.c["durable"] else RECEIPT_EVERY
        pending: threading.Event | None = None
        n = 0
        last: tuple[bytes, dict[str, str]] | None = None
        for item in items:
            if item is None:
                continue
            if last is not None:
                pending = self._send(c, dest, *last, receipt=(n % every == 0), wait_for=pending)
                n += 1
            last = item
        if last is not None:
            ev = self._send(c, dest, *last, receipt=True, wait_for=pending)
            n += 1
            if ev is not None and not ev.wait(120):
                raise RuntimeError("activemq: no receipt for the last send")
        if self.listener.errors:
            raise RuntimeError(f"activemq: {self.listener.errors[0]}")
        return n

    def _send(self, c: Any, dest: str, body: bytes, headers: dict[str, str], receipt: bool,
              wait_for: threading.Event | None) -> threading.Event | None:
        if not receipt:
            c.send(f"/queue/{dest}", body, headers=headers)
            return wait_for
        if wait_for is not None and not wait_for.wait(120):  # at most one receipt outstanding
            raise RuntimeError("activemq: no receipt")
        rid = f"r{next(self.receipt_ids)}"
        ev = threading.Event()
        self.listener.receipts[rid] = ev
        c.send(f"/queue/{dest}", body, headers={**headers, "receipt": rid})
        return ev

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        h = {"persistent": "true"}
        return self._send_all((None if b is None else (b, h) for b in bodies), dest)

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        def gen() -> Iterable[tuple[bytes, dict[str, str]]]:
            for d, b, _k in items:
                delay = int(d - time.time() * 1000)
                h = {"persistent": "true"}
                if delay > 0:
                    h["AMQ_SCHEDULED_DELAY"] = str(delay)
                yield b, h

        return self._send_all(gen(), dest)

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        ready = False
        subscribed_on: Any = None
        while not stop():
            try:
                c = self._conn()
                if subscribed_on is not c:
                    c.subscribe(f"/queue/{dest}", id="1", ack="client-individual",
                                headers={"activemq.prefetchSize": str(PREFETCH)})
                    subscribed_on = c
                    if not ready and self.on_ready:
                        self.on_ready()
                        ready = True
                try:
                    frame = self.listener.messages.get(timeout=0.1)
                except queue.Empty:
                    continue
                on_body(frame.body)
                try:
                    c.ack(frame.headers["ack"])
                except stomp.exception.StompException:
                    pass
            except (stomp.exception.StompException, OSError):
                self.conn = None
                time.sleep(0.2)

    def close(self) -> None:
        if self.conn is not None and self.conn.is_connected():
            try:
                self.conn.disconnect()
            except stomp.exception.StompException:
                pass
