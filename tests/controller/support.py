"""A real etcd (Debian's etcd-server) on free loopback ports in a temp dir, for controller mode's tests."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import free_port


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        pytest.skip("etcd binary missing: run scripts/setup-system.sh as root (apt-get install etcd-server)")
    return path


class Etcd:
    def __init__(self, data_dir: Path, host: str = "127.0.0.1") -> None:
        self.data_dir = data_dir
        self.host = host
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    def start(self, timeout: float = 20.0) -> Etcd:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        peer = f"http://{self.host}:{self.peer_port}"
        with open(self.data_dir / "etcd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [etcd_binary(), "--name", "t", "--data-dir", str(self.data_dir / "data"),
                 "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"t={peer}"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"etcd did not start:\n{(self.data_dir / 'etcd.log').read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
