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
