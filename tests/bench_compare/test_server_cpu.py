"""bench/compare's broker CPU accounting: a live child process's CPU counts, to well under a clock tick,
and the settle waits for work a phase left behind."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from bench.common import settled_cpu_s
from bench.compare import workloads

# A parent that starts a child burning CPU until told to stop on stdin, and then waits (idle) for it.
TREE = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import sys, select\\nwhile not select.select([sys.stdin], [], [], 0)[0]:\\n    sum(range(10000))"],
    stdin=subprocess.PIPE)
print("ready", flush=True)
sys.stdin.readline()
child.stdin.close()
child.wait()
"""


class Tree:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    def server_pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.close()
        self.proc.wait(10)


def test_a_live_child_counts_and_the_settle_waits_for_it() -> None:
    tree = Tree()
    server: Any = tree
    try:
        c0, t0 = workloads.server_cpu_s(server), time.time()
        time.sleep(0.3)
        busy, wall = workloads.server_cpu_s(server) - c0, time.time() - t0
        # the child alone keeps a core busy (psutil's cpu_times of the parent saw 0 of it: not reaped)
        assert 0.5 * wall < busy < 1.2 * wall, (busy, wall)
        assert busy != round(busy, 2), "counted in 10 ms clock ticks"
        _, waited = settled_cpu_s(lambda: workloads.server_cpu_s(server), limit_s=0.6)
        assert waited >= 0.6  # still busy: the settle waits until its limit
        cpu, waited = settled_cpu_s(lambda: 1.0, step_s=0.05, limit_s=5)
        assert cpu == 1.0 and waited < 1.0  # idle: it returns after a quiet step, long before its limit
    finally:
        tree.stop()
