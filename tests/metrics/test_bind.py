"""Where the Prometheus endpoints listen (docs/metrics.md, Exposure): they have no login, also with ACL on,
so by default they bind 127.0.0.1 only, and ``metricsPromExporterHost`` names another address.

127.0.0.2 is this machine too (Linux routes 127.0.0.0/8 to loopback), so it tells an endpoint bound to
127.0.0.1 (refused there) from one bound to every interface or to 127.0.0.2 (answered there)."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from tests.acl.conftest import ADMIN, acl_text
from tests.support import Standalone


def answers(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex((host, port)) == 0


def serves_metrics(host: str, port: int) -> bool:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
        return r.status == 200 and b"# TYPE" in r.read()


def test_with_acl_the_endpoints_bind_loopback_only_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)  # the data directory is the home
    data = tmp_path / "data"
    (data / "conf").mkdir(parents=True)
    (data / "conf" / "plain_acl.yml").write_text(acl_text())
    with Standalone(data, {"aclEnable": "true", "accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key,
                           "mappedFileSizeCommitLog": str(8 << 20)}) as s:
        for port in (s.metrics_port, s.namesrv_metrics_port):
            assert serves_metrics("127.0.0.1", port)
            assert not answers("127.0.0.2", port)


def test_metrics_prom_exporter_host_moves_both_endpoints(tmp_path: Path) -> None:
    with Standalone(tmp_path / "data", {"metricsPromExporterHost": "127.0.0.2",
                                        "mappedFileSizeCommitLog": str(8 << 20)}) as s:
        for port in (s.metrics_port, s.namesrv_metrics_port):
            assert serves_metrics("127.0.0.2", port)
            assert not answers("127.0.0.1", port)


def test_a_taken_metrics_port_is_named_with_its_setting(tmp_path: Path) -> None:
    """A standalone whose NameServer metrics port (5558 by default) is taken says which port and which
    setting, instead of a bare "[Errno 98] Address already in use"."""
    import subprocess
    import sys

    from tests.support import free_ports

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ns, broker = free_ports(2)
        done = subprocess.run(
            [sys.executable, "-m", "tidalmq.cli", "standalone", "--data-dir", str(tmp_path / "data"),
             "--namesrv-port", str(ns), "--broker-port", str(broker), "--grpc-port", "-1", "--console-port", "-1",
             "--set", "metricsPromExporterPort=0", "--set", f"namesrvMetricsPromExporterPort={port}",
             "--set", f"mappedFileSizeCommitLog={8 << 20}"],
            capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr + done.stdout, done.stderr[-2000:]
    assert "set namesrvMetricsPromExporterPort to a free port" in done.stderr + done.stdout
