"""``tidalmq cluster`` run as a user runs it: a subprocess on a free block of loopback ports in a temp dir."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support import bindable, server_port_range
from tidalmq.cluster import FIRST_BROKER_OFFSET, NAMESRV_COUNT, PORT_STRIDE

READY = re.compile(r"cluster ready: .* namesrvAddr=(\S+)")
PROCESS_LINE = re.compile(r"^(\S+) (\S+) pid=(\d+)")


def free_base_port(groups: int, replicas: int) -> int:
    """A base port whose every derived port (NameServers, etcd, each replica's listen and HA port) is free."""
    low, top = server_port_range()  # below the ephemeral range: restarts find their ports free
    span = FIRST_BROKER_OFFSET + groups * replicas * PORT_STRIDE
    for _ in range(200):
        base = random.randint(low, top - span)
        ports = [base + i for i in range(NAMESRV_COUNT + 2)]
        ports += [base + FIRST_BROKER_OFFSET + k * PORT_STRIDE + d for k in range(groups * replicas) for d in (0, 1)]
        if all(bindable(p) for p in ports):
            return base
    raise RuntimeError("no free block of ports")


class Cluster:
    """The ``tidalmq cluster`` process; its output is collected line by line."""

    def __init__(self, data_dir: Path, *args: str, groups: int = 2, replicas: int = 2) -> None:
        self.data_dir = data_dir
        self.argv = [sys.executable, "-m", "tidalmq.cli", "cluster", "--groups", str(groups), "--replicas",
                     str(replicas), "--data-dir", str(data_dir), "--base-port", str(free_base_port(groups, replicas)),
                     "--set", "mappedFileSizeCommitLog=1048576", "--set", "maxMessageSize=262144", "--set", "timerWheelEnable=false", *args]
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self.namesrv_addr = ""
        self.pids: dict[str, int] = {}
        self.addrs: dict[str, str] = {}

    def start(self, timeout: float = 90.0) -> Cluster:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_line(READY, timeout)
        for line in self.lines:
            m = PROCESS_LINE.match(line)
            if m:
                self.addrs[m[1]], self.pids[m[1]] = m[2], int(m[3])
            m2 = READY.search(line)
            if m2:
                self.namesrv_addr = m2[1]
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: re.Pattern[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if pattern.search(line):
                    return line
            assert self.proc is not None
            if self.proc.poll() is not None and not any(pattern.search(x) for x in self.lines):
                break
            time.sleep(0.05)
        raise AssertionError(f"no line {pattern.pattern!r} within {timeout} s:\n" + "\n".join(self.lines[-40:]))

    def stop(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)

    def kill_children(self) -> None:
        """Cleanup after a failed test: no process of ours outlives it."""
        for pid in self.pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
