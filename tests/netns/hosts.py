"""Test hosts as Linux network namespaces: each a veth pair to a bridge in the root namespace, on a private
subnet (10.231.X.0/24, X chosen per run) that exists only on these links. Partitions by ``ip link set down``.
Without namespaces (not root, no ``ip``, EPERM) every host is the loopback interface, and the suite says so."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def namespaces_unavailable() -> str:
    """Why namespaces cannot be used here, or "" when they can (probed by adding and removing one).
    ``TIDALMQ_NETNS=off`` asks for the loopback fallback (to run the suite without root)."""
    if os.environ.get("TIDALMQ_NETNS") == "off":
        return "TIDALMQ_NETNS=off"
    if shutil.which("ip") is None:
        return "no `ip` command (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "not root"
    probe = f"tmqprobe{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return ""


class Hosts:
    """``count`` hosts; ``addr(i)`` is host i's address, ``prefix(i)`` the command prefix running a process
    there. ``down(i)``/``up(i)`` cut and restore its link (its processes keep running: a partition)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.reason = namespaces_unavailable()
        self.netns = not self.reason
        self.tag = f"{os.getpid() % 10000:04d}{random.randrange(100):02d}"  # names <= 15 chars per run
        self.subnet = random.randrange(1, 250)
        self.created: list[str] = []

    @property
    def bridge(self) -> str:
        return f"tmq{self.tag}b"

    def ns(self, i: int) -> str:
        return f"tmq{self.tag}h{i}"

    def veth(self, i: int) -> str:
        return f"tmq{self.tag}v{i}"

    def addr(self, i: int) -> str:
        return f"10.231.{self.subnet}.{i + 1}" if self.netns else "127.0.0.1"

    def prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns(i)] if self.netns else []

    def setup(self) -> Hosts:
        if not self.netns:
            print(f"netns suite: namespaces unavailable ({self.reason}); hosts fall back to loopback ports",
                  file=sys.stderr)
            return self
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self.created.append("bridge")
            # The test process talks to the hosts over the bridge: its address is the subnet's .254.
            _ip("addr", "add", f"10.231.{self.subnet}.254/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i in range(self.count):
                _ip("netns", "add", self.ns(i))
                self.created.append(self.ns(i))
                _ip("link", "add", self.veth(i), "type", "veth", "peer", "name", "eth0", "netns", self.ns(i))
                _ip("link", "set", self.veth(i), "master", self.bridge)
                _ip("link", "set", self.veth(i), "up")
                for cmd in (["addr", "add", f"{self.addr(i)}/24", "dev", "eth0"], ["link", "set", "eth0", "up"],
                            ["link", "set", "lo", "up"]):
                    _ip("netns", "exec", self.ns(i), "ip", *cmd)
        except BaseException:
            self.teardown()
            raise
        return self

    def down(self, i: int) -> None:
        _ip("link", "set", self.veth(i), "down")

    def up(self, i: int) -> None:
        _ip("link", "set", self.veth(i), "up")

    def teardown(self) -> None:
        """Remove every namespace and link of this run (a namespace's veth end goes with it)."""
        for name in reversed(self.created):
            if name == "bridge":
                _ip("link", "del", self.bridge, check=False)
            else:
                _ip("netns", "del", name, check=False)
        self.created.clear()

    def run_dir(self, base: Path, i: int) -> Path:
        d = base / f"host{i}"
        d.mkdir(parents=True, exist_ok=True)
        return d
