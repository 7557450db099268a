"""Helpers shared by the tests: free ports and a ``tidalmq standalone`` process."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

READY = re.compile(r"standalone ready: namesrv \S+:(\d+) broker (\S+):(\d+)")


# What the ``module_tmp`` fixture (tests/conftest.py) gives: tmp_path_factory.mktemp for a module-scoped fixture.
ModuleTmp = Callable[[str], Path]


def _ephemeral_range_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_PICK = random.Random()  # seeded from the OS: parallel test runs pick apart


def server_port_range() -> tuple[int, int]:
    """Where the tests' servers listen: the ports just below the kernel's ephemeral range (free_ports).

    Under pytest-xdist each worker gets a slice of its own: a port one worker found free and handed to a
    broker it starts is bound only a moment later, and another worker's broker picking the same port in
    that moment failed to start ("address already in use")."""
    top = _ephemeral_range_start() - 1
    low = max(10_000, top - 12_000)
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        width = (top - low) // int(count)
        low += int(worker[2:]) * width
        top = low + width - 1
    return low, top


def bindable(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, none next to another (RocketMQ's brokers take listenPort+1 for HA):
    picked with all their sockets open at once, so no two picks can be the same port.

    Picked below the kernel's ephemeral range, where no outgoing connection is given one: a server
    stopped (or SIGKILLed) and started again on its ports must find them free, and a port the kernel
    had handed out by ``bind(0)`` could meanwhile be the local end of some client's connection (a crash
    test's restart once failed so, "Address already in use")."""
    low, top = server_port_range()
    socks: list[socket.socket] = []
    try:
        ports: list[int] = []
        tries = 0
        while len(ports) < n:
            tries += 1
            if tries > 10_000:
                raise RuntimeError(f"no {n} free ports in {low}..{top}")
            port = _PICK.randint(low, top)
            if any(abs(port - p) <= 1 for p in ports):
                continue
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
        return ports
    finally:
        for s in socks:
            s.close()


def free_port_pair() -> tuple[int, int]:
    """Two free ports; the broker's neighbour port (HA) is left alone as RocketMQ uses listenPort+1."""
    a, b = free_ports(2)
    return a, b


def _same_code_path() -> str:
    """PYTHONPATH for a broker this process starts: the source tree of the tidalmq it imported first, so
    that the broker runs the code of the caller (a bench run from another checkout measures that checkout,
    not the one the virtual environment installed)."""
    import tidalmq

    src = str(Path(tidalmq.__file__).resolve().parents[1])
    rest = os.environ.get("PYTHONPATH")
    return src if not rest else os.pathsep.join((src, rest))


class Standalone:
    """A ``tidalmq standalone`` subprocess on free loopback ports in a temporary data dir."""

    ready_line = READY  # what the process prints once it serves

    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None, log_path: Path | None = None,
                 new_session: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.new_session = new_session  # a process group of its own, as a shell's job has: os.killpg reaches it
        # 64 MiB CommitLog files unless a test asks otherwise: every broker holds two preallocated files
        # (the current one and the next, made ahead), and at the 1 GiB default a suite run left ~15 GB on disk.
        self.settings = {"mappedFileSizeCommitLog": str(64 << 20), **(settings or {})}
        self._pick_ports()
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = log_path or (self.data_dir / "standalone.log")
        self._lines: list[str] = []

    def _pick_ports(self) -> None:
        # All six at once, distinct: picked one by one, two could be the same port and the standalone
        # would fail to bind its own second listener. The gRPC endpoint and the web console too (never
        # 8081, 8082), and Prometheus, which the standalone serves by default (docs/metrics.md), never on
        # its default 5557/5558 here.
        (self.namesrv_port, self.broker_port, self.grpc_port, self.console_port, self.metrics_port,
         self.namesrv_metrics_port) = free_ports(6)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def namesrv_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.namesrv_metrics_port}/metrics"

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def command(self) -> list[str]:
        # the gRPC endpoint and the web console on free ports too (never 8081, 8082): grpc_endpoint and
        # console_url name them
        cmd = [sys.executable, "-m", "tidalmq.cli", "standalone", "--data-dir", str(self.data_dir),
               "--namesrv-port", str(self.namesrv_port), "--broker-port", str(self.broker_port),
               "--grpc-port", str(self.grpc_port), "--console-port", str(self.console_port)]
        ports = {"metricsPromExporterPort": str(self.metrics_port),
                 "namesrvMetricsPromExporterPort": str(self.namesrv_metrics_port)}
        for k, v in {**ports, **self.settings}.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> Self:
        # A free port picked here can be taken by another process before the standalone binds it (suites
        # run side by side): a first start that fails so is retried on new ports. A restart keeps its
        # ports, which its clients know.
        first = self.proc is None
        for attempt in range(3):
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return self._start(timeout)
            except RuntimeError:
                tail = self.log_path.read_text(errors="replace")[log_start:] if self.log_path.exists() else ""
                if not first or attempt == 2 or "address already in use" not in tail.lower():
                    raise
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _same_code_path()},
                                     start_new_session=self.new_session)
        log.close()
        deadline = time.monotonic() + timeout
        ready = threading.Event()
        assert self.proc.stdout is not None

        def reader() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self._lines.append(line)
                if self.ready_line.search(line):
                    ready.set()

        threading.Thread(target=reader, daemon=True).start()
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"standalone did not start: exit {self.proc.returncode}\n{self.log_tail()}")
        return self

    def log_tail(self, n: int = 60) -> str:
        try:
            return "".join(self.log_path.read_text().splitlines(keepends=True)[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a clean exit."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(f"standalone did not stop within {timeout}s\n{self.log_tail()}") from None

    def kill(self) -> None:
        """SIGKILL: the crash the durability tests are about."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except RuntimeError:
                pass


def wait_for(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def chunks(seq: list, n: int) -> Iterable[list]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def collect_loop_errors() -> list[dict[str, Any]]:
    """What the running event loop's exception handler is given from now on ("Exception in callback" ...),
    collected instead of logged."""
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    return errors
