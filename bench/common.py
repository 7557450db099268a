"""Shared benchmark plumbing: machine description, JSON results, comparison with a previous run."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // 1024
    except OSError:
        pass
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_mib": mem,
        "code": measured_code(),
    }


def measured_code() -> str:
    """Which tidalmq this process runs (and, through tests.support.Standalone, the brokers it starts):
    its source directory and that checkout's commit, "+changes" when it has uncommitted ones."""
    import tidalmq

    src = Path(tidalmq.__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "-C", str(src), "describe", "--always", "--dirty=+changes"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"tidalmq from {src}" + (f" at {rev}" if rev else "")


def print_machine() -> None:
    m = machine()
    print(f"machine: {m['cpu']} x{m['cores']} cores, {m['mem_mib']} MiB, {m['platform']}, Python {m['python']}")
    print(f"code: {m['code']}")


def save(name: str, results: dict[str, Any]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"machine": machine(), "results": results}, indent=2))
    (OUT / f"{name}-latest.json").write_text(path.read_text())
    return path


def compare(previous: str | None, results: dict[str, Any]) -> None:
    """Print each figure next to the same figure of a previous run (a path to its JSON)."""
    if not previous:
        return
    old = json.loads(Path(previous).read_text())["results"]
    print(f"\ncompared with {previous}:")
    for key, value in results.items():
        if isinstance(value, int | float) and isinstance(old.get(key), int | float) and old[key]:
            print(f"  {key:40s} {old[key]:>14.1f} -> {value:>14.1f}  ({value / old[key]:.2f}x)")


def cpu_s(pid: int | None, *, children: bool = True) -> float:
    """CPU seconds a process has used so far, with every live process under it unless ``children=False``
    (a standalone's schedule process; not the bench's own brokers when measuring the load generator), to
    the nanosecond: each live thread's time on a CPU, from /proc/<pid>/task/<tid>/schedstat. psutil's
    cpu_times counts 10 ms clock ticks, and its children_* only children that exited and were reaped. A
    thread that exits takes its time with it (the servers measured keep theirs). nan without a pid or once
    it is gone."""
    own = None if pid is None else _threads_cpu_ns(pid)
    if own is None:
        return float("nan")
    pids = []
    if children:
        import psutil

        try:
            pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return float("nan")
    return (own + sum(_threads_cpu_ns(p) or 0 for p in pids)) / 1e9


def settled_cpu_s(read: Callable[[], float], quiet_cores: float = 0.05, step_s: float = 0.2,
                  limit_s: float = 10.0) -> tuple[float, float]:
    """Waits until ``read`` (CPU seconds so far, e.g. of a broker) grows by under ``quiet_cores`` over a
    ``step_s``, so that the work a phase left behind counts as the phase's: TidalMQ acknowledges a timer
    message once it is in the CommitLog, and its schedule process files it afterwards. (CPU seconds so far,
    seconds waited.)"""
    t0 = time.time()
    prev = read()
    while time.time() - t0 < limit_s:
        time.sleep(step_s)
        cur = read()
        if cur - prev < quiet_cores * step_s:
            return cur, time.time() - t0
        prev = cur
    return prev, time.time() - t0


def _threads_cpu_ns(pid: int) -> int | None:
    """None when the process is gone."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[k]
