"""What the JVM peers (Apache RocketMQ, Apache Kafka) share: their jars fetched from Maven Central into the
reference cache (scripts/reference/fetch.sh, pinned by the poms under scripts/reference/), the java command
line, ports with free neighbours, and the live heap after a full GC."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.support import bindable

from bench.compare.base import free_port

ROOT = Path(__file__).resolve().parents[3]
FETCH = ROOT / "scripts" / "reference" / "fetch.sh"


def pinned(pom: str, prop: str) -> str:
    """The version pinned in scripts/reference/<pom>/pom.xml's <prop> property."""
    text = (ROOT / "scripts" / "reference" / pom / "pom.xml").read_text()
    found = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", text)
    if found is None:
        raise RuntimeError(f"scripts/reference/{pom}/pom.xml pins no {prop}")
    return found.group(1)


def missing_java() -> str | None:
    """None when java and mvn are here, else why the peer cannot run."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        return "not installed (java 17 and maven: Debian's openjdk-17-jre-headless and maven)"
    return None


def fetch_lib(part: str, dirname: str) -> Path:
    """``cache/<dirname>/lib`` after scripts/reference/fetch.sh [part] (a no-op once fetched)."""
    args = ["bash", str(FETCH)] + ([part] if part else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/reference/fetch.sh {part} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lib = Path(proc.stdout.strip().splitlines()[-1]) / dirname / "lib"
    if not lib.is_dir():
        raise RuntimeError(f"scripts/reference/fetch.sh {part} left no {lib}")
    return lib


def java_cmd(lib: Path, heap: list[str], main: str, args: list[str], props: dict[str, str] | None = None) -> list[str]:
    """The JIT and GC at their defaults (G1, tiered): the tests' C1-only, serial-GC JVMs start faster but are
    not what a user runs."""
    return ["java", *heap, *(f"-D{k}={v}" for k, v in (props or {}).items()),
            "-cp", f"{lib}/*", main, *args]


def port_with_neighbours(below: int = 2, above: int = 1, tries: int = 50) -> int:
    """A free port whose ``below`` ports under it and ``above`` over it are free too (RocketMQ's broker binds
    listenPort-2, its fast port, and listenPort+1, HA)."""
    for _ in range(tries):
        p = free_port()
        if all(bindable(q) for q in range(p - below, p + above + 1) if q != p):
            return p
    raise RuntimeError("no free port with free neighbours")


def live_heap(pid: int | None) -> dict[str, Any]:
    """The JVM's heap in use after a full GC (jcmd GC.run; GC.heap_info): RSS of a JVM is mostly the heap it
    has touched, live or not."""
    if pid is None:
        return {}
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    m = re.search(r"total \d+K, used (\d+)K", info)
    return {"jvm_heap_used_after_gc": int(m.group(1)) * 1024} if m else {}
