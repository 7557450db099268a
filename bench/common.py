"""Shared benchmark plumbing: machine description, JSON results, comparison with a previous run."""

from __future__ import annotations

import json
import os
import platform
import time
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
    }


def print_machine() -> None:
    m = machine()
    print(f"machine: {m['cpu']} x{m['cores']} cores, {m['mem_mib']} MiB, {m['platform']}, Python {m['python']}")


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


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[k]
