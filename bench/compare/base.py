"""What every peer implements: a server we start ourselves (loopback, temp dirs) and a blocking client.

A peer module (``bench/compare/peers/<name>.py``) defines ``Server`` (a subclass of :class:`ServerBase`)
and ``Client`` (a subclass of :class:`ClientBase`). The harness drives the server from the main process and
runs clients in the main process (producers) and in spawned worker processes (consumers), so a client is
built from ``Server.conn()``, a plain dict that can cross a process boundary.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

# Below the kernel's ephemeral range: W4 restarts a server on its port after a SIGKILL.
from tests.support import free_port as free_port

# what a workload can ask of a peer; a peer lists what it cannot do (and why) in Server.unsupported
WORKLOADS = ("W1", "W2", "W3", "W4", "W5")

# the scheduled-delivery body: b"<id>|<deliver ms>|<key>|" + padding to SCHED_BODY bytes
SCHED_BODY = 100


def wait_port(port: int, timeout: float, proc: subprocess.Popen[Any] | None = None, what: str = "server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} not listening on 127.0.0.1:{port} after {timeout}s")


def listener_pid(port: int) -> int | None:
    """The pid of the process listening on 127.0.0.1:``port`` (root sees every process)."""
    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return c.pid
    return None


class ServerBase:
    """One broker process tree, started by us on loopback with its config and data in ``workdir``."""

    name = "?"
    packages: tuple[str, ...] = ()  # Debian packages
    binary = ""  # present when the package is installed
    unsupported: dict[str, str] = {}  # workload -> why this peer cannot do it

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        self.workdir = Path(workdir)
        self.durable = durable
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "server.log"

    # -- to implement -------------------------------------------------------------------------------
    @classmethod
    def available(cls) -> str | None:
        """None when installed, else why not."""
        if cls.binary and not (Path(cls.binary).exists() or shutil.which(cls.binary)):
            return f"not installed ({' '.join(cls.packages)}): run bench/compare/install.sh"
        return None

    @classmethod
    def version(cls) -> str:
        return "?"

    def settings(self) -> dict[str, str]:
        """The settings that matter for the comparison, as written to RESULTS.md."""
        return {}

    def start(self) -> None:
        raise NotImplementedError

    def conn(self) -> dict[str, Any]:
        raise NotImplementedError

    def server_pid(self) -> int | None:
        """The pid that holds the messages (the one to SIGKILL and to measure)."""
        return self.proc.pid if self.proc is not None else None

    # -- shared -------------------------------------------------------------------------------------
    def popen(self, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen[bytes]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(env or {})}, cwd=cwd or self.workdir,
                                         start_new_session=True)
        finally:
            log.close()
        return self.proc

    def tree_pids(self) -> list[int]:
        """The server's pid and every live process under it: TidalMQ's schedule process holds the timer's
        index, so its memory is the broker's as much as the broker process's own (as bench.common.cpu_s
        counts its CPU)."""
        pid = self.server_pid()
        if pid is None:
            return []
        try:
            return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            return [pid]

    def rss(self) -> int:
        """Resident memory of the server's process tree (tree_pids)."""
        total = 0
        for pid in self.tree_pids():
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                pass
        return total

    def live_memory(self) -> dict[str, Any]:
        """Extra memory figures a peer can give (e.g. a JVM's live heap after a full GC)."""
        return {}

    def rss_anon(self) -> int:
        """Anonymous resident memory (RssAnon) of the server's process tree: RSS without file pages mapped
        from the store."""
        total = 0
        for pid in self.tree_pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1]) * 1024
                        break
            except OSError:
                pass
        return total

    def kill(self) -> None:
        """SIGKILL the process that holds the messages (not a clean shutdown)."""
        pid = self.server_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap()

    def _reap(self, timeout: float = 15.0) -> None:
        """After a kill: end the rest of our process group (wrapper scripts) and wait."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the process group (a clean shutdown), SIGKILL what is left after ``timeout``."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        self.proc = None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "".join(self.log_path.read_text(errors="replace").splitlines(keepends=True)[-n:])
        except OSError:
            return ""


class ClientBase:
    """A blocking client. ``dest`` names a queue/topic/stream; bodies are bytes."""

    def __init__(self, conn: dict[str, Any]) -> None:
        self.c = conn

    def setup(self, dest: str, scheduled: bool) -> None:
        """Create what ``dest`` needs (queues, streams, groups); called once before any producer/consumer."""

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        """Send every body as fast as the client allows (pipelined / async where it can); return when the
        broker has accepted all of them (as far as the client can tell). Returns the count. A ``None`` in
        ``bodies`` means "nothing more for a while": a client that buffers sends what it holds."""
        raise NotImplementedError

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        """Send ``(deliver_ms, body, key)`` each to be delivered into ``dest`` at ``deliver_ms`` (epoch ms)."""
        raise NotImplementedError

    on_ready: Callable[[], None] | None = None  # set by the harness: call once subscribed

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        """Receive from ``dest``, call ``on_body`` on each body (then acknowledge it, in the peer's usual way),
        call ``self.on_ready()`` once subscribed, and return when ``stop()`` says so (checked at least once
        a second). Survive the broker's restart: reconnect and go on."""
        raise NotImplementedError

    def close(self) -> None:
        pass
