"""RabbitMQ: per-message TTL into a dead-letter exchange (the delay scheme RabbitMQ's own docs describe;
the delayed-message-exchange plugin is not in Debian).

A delayed message is published to ``d.<dest>`` with ``expiration`` = delay in ms; the queue dead-letters
expired messages through the default exchange to ``<dest>``, which the consumer reads (manual acks,
prefetch 256). RabbitMQ expires per-message TTLs only at the head of a queue, so a long delay ahead of a
short one holds it back: that is measured, not worked around.

Settings: classic durable queues, persistent messages, the delay queue lazy (3.x docs: for long queues);
W4 (durable): quorum queues (RabbitMQ's recommendation for data safety), the delay queue with
``x-dead-letter-strategy=at-least-once`` + ``x-overflow=reject-publish`` (3.10's safe dead-lettering).
Publishes use publisher confirms, up to 256 unconfirmed (pika's SelectConnection).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pika

from bench.compare.base import ClientBase, ServerBase, free_port, listener_pid, wait_port

WINDOW = 256
PREFETCH = 256


class Server(ServerBase):
    name = "rabbitmq"
    packages = ("rabbitmq-server",)
    binary = "/usr/lib/rabbitmq/bin/rabbitmq-server"
    unsupported: dict[str, str] = {}

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.port, self.dist_port, self.epmd_port = free_port(), free_port(), free_port()
        self.beam: int | None = None

    @classmethod
    def version(cls) -> str:
        v = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"], capture_output=True,
                           text=True).stdout
        e = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "erlang-base"], capture_output=True,
                           text=True).stdout
        return f"rabbitmq-server {v} (Erlang {e}), pika {pika.__version__}"

    def settings(self) -> dict[str, str]:
        if self.durable:
            q = ("quorum queues; delay queue x-dead-letter-strategy=at-least-once, x-overflow=reject-publish; "
                 "persistent messages")
        else:
            q = "classic durable queues (delay queue x-queue-mode=lazy); persistent messages"
        return {"queues": q, "delay": "per-message TTL (expiration) on d.<dest> -> dead-letter to <dest>",
                "publish": f"publisher confirms, {WINDOW} unconfirmed (pika SelectConnection)",
                "consume": f"manual ack (multiple, every 64), prefetch {PREFETCH}", "config": "rabbitmq.conf defaults "
                "(vm_memory_high_watermark 0.4), no plugins"}

    def env(self) -> dict[str, str]:
        w = self.workdir
        return {"HOME": str(w), "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
                "RABBITMQ_CONFIG_FILE": str(w / "rabbitmq.conf"), "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
                "RABBITMQ_MNESIA_BASE": str(w / "mnesia"), "RABBITMQ_LOG_BASE": str(w / "log"),
                "RABBITMQ_PID_FILE": str(w / "rabbit.pid"), "RABBITMQ_DIST_PORT": str(self.dist_port),
                "ERL_EPMD_ADDRESS": "127.0.0.1", "ERL_EPMD_PORT": str(self.epmd_port),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}"}

    def start(self) -> None:
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        (w / "rabbitmq.conf").write_text(f"listeners.tcp.1 = 127.0.0.1:{self.port}\nloopback_users = none\n")
        (w / "enabled_plugins").write_text("[].\n")
        proc = self.popen([self.binary], env=self.env())
        wait_port(self.port, 120, proc, "rabbitmq-server")
        deadline = time.monotonic() + 60
        while True:
            try:
                pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port)).close()
                break
            except pika.exceptions.AMQPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.beam = listener_pid(self.port)

    def server_pid(self) -> int | None:
        return self.beam

    def stop(self, timeout: float = 60.0) -> None:
        super().stop(timeout)
        self.beam = None
        epmd = listener_pid(self.epmd_port)  # epmd daemonizes: ours listens on our port
        if epmd:
            try:
                os.kill(epmd, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def conn(self) -> dict[str, Any]:
        return {"port": self.port, "durable": self.durable}


class Client(ClientBase):
    def __init__(self, conn: dict[str, Any]) -> None:
        super().__init__(conn)
        self.params = pika.ConnectionParameters("127.0.0.1", conn["port"], heartbeat=0, blocked_connection_timeout=60)

    def setup(self, dest: str, scheduled: bool) -> None:
        c = pika.BlockingConnection(self.params)
        ch = c.channel()
        if self.c["durable"]:
            ch.queue_declare(dest, durable=True, arguments={"x-queue-type": "quorum"})
            if scheduled:
                ch.queue_declare(f"d.{dest}", durable=True, arguments={
                    "x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dest,
                    "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
        else:
            ch.queue_declare(dest, durable=True)
            if scheduled:
                ch.queue_declare(f"d.{dest}", durable=True, arguments={
                    "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dest, "x-queue-mode": "lazy"})
        c.close()

    def _confirmed(self, items: Iterable[tuple[str, bytes, pika.BasicProperties] | None]) -> int:
        """Publish with confirms, WINDOW unconfirmed at most; returns when every one is confirmed."""
        it = iter(items)
        outstanding: collections.deque[int] = collections.deque()
        st = {"tag": 0, "n": 0, "nacked": 0, "exhausted": False, "error": None, "paused": False}
        conn_box: list[Any] = []
        ch_box: list[Any] = []

        def finish_if_done() -> None:
            if st["exhausted"] and not outstanding:
                conn_box[0].close()

        def resume() -> None:
            st["paused"] = False
            pump()

        def pump() -> None:
            ch = ch_box[0]
            while len(outstanding) < WINDOW and not st["exhausted"]:
                try:
                    item = next(it)
                except StopIteration:
                    st["exhausted"] = True
                    break
                if item is None:  # a pause: return to the ioloop so the frames go out, come back once
                    st["paused"] = True
                    conn_box[0].ioloop.call_later(0, resume)
                    return
                rk, body, props = item
                ch.basic_publish("", rk, body, props)
                st["tag"] += 1
                st["n"] += 1
                outstanding.append(st["tag"])
            finish_if_done()

        def on_confirm(frame: Any) -> None:
            m = frame.method
            if isinstance(m, pika.spec.Basic.Nack):
                st["nacked"] += 1
            if m.multiple:
                while outstanding and outstanding[0] <= m.delivery_tag:
                    outstanding.popleft()
            else:
                try:
                    outstanding.remove(m.delivery_tag)
                except ValueError:
                    pass
            if st["exhausted"]:
                finish_if_done()
            elif not st["paused"]:  # a resume is already scheduled otherwise
                pump()

        def on_channel(ch: Any) -> None:
            ch_box.append(ch)
            ch.confirm_delivery(on_confirm, callback=lambda _f: pump())

        def on_open(c: Any) -> None:
            c.channel(on_open_callback=on_channel)

        def on_open_error(_c: Any, err: Any) -> None:
            st["error"] = err
            _c.ioloop.stop()

        def on_closed(c: Any, _reason: Any) -> None:
            c.ioloop.stop()

        conn = pika.SelectConnection(self.params, on_open_callback=on_open, on_open_error_callback=on_open_error,
                                     on_close_callback=on_closed)
        conn_box.append(conn)
        conn.ioloop.start()
        if st["error"]:
            raise RuntimeError(f"rabbitmq connect: {st['error']}")
        if st["nacked"] or outstanding:
            raise RuntimeError(f"rabbitmq: {st['nacked']} nacked, {len(outstanding)} unconfirmed")
        return st["n"]

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        props = pika.BasicProperties(delivery_mode=2)
        return self._confirmed(None if b is None else (dest, b, props) for b in bodies)

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        def gen() -> Iterable[tuple[str, bytes, pika.BasicProperties]]:
            for d, b, _k in items:
                delay = int(d - time.time() * 1000)
                if delay <= 0:
                    yield dest, b, pika.BasicProperties(delivery_mode=2)
                else:
                    yield f"d.{dest}", b, pika.BasicProperties(delivery_mode=2, expiration=str(delay))

        return self._confirmed(gen())

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        ready = False
        while not stop():
            try:
                c = pika.BlockingConnection(self.params)
                ch = c.channel()
                ch.basic_qos(prefetch_count=PREFETCH)
                if not ready and self.on_ready:
                    self.on_ready()
                    ready = True
                unacked = 0
                last_tag = 0
                for method, _props, body in ch.consume(dest, inactivity_timeout=0.1):
                    if method is not None:
                        on_body(body)
                        unacked += 1
                        last_tag = method.delivery_tag
                    if unacked and (unacked >= 64 or method is None):
                        ch.basic_ack(last_tag, multiple=True)
                        unacked = 0
                    if stop():
                        break
                try:
                    ch.cancel()
                    c.close()
                except pika.exceptions.AMQPError:
                    pass
                return
            except (pika.exceptions.AMQPError, OSError):
                time.sleep(0.2)
