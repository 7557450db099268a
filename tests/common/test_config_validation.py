"""Configuration is validated before anything binds: enum keys exactly as RocketMQ spells them,
numbers in range, unknown keys warned (docs/broker.md "Configuration")."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.support import free_port
from tidalmq.broker.config import BrokerConfig
from tidalmq.common.config import ConfigError, apply_properties
from tidalmq.store.config import MessageStoreConfig


@pytest.mark.parametrize(("key", "value", "says"), [
    ("flushDiskType", "sync_flush", "ASYNC_FLUSH, SYNC_FLUSH"),  # RocketMQ's enum is case-sensitive
    ("flushDiskType", "SYNC", "ASYNC_FLUSH, SYNC_FLUSH"),
    ("mappedFileSizeConsumeQueue", "1000001", "multiple of 20"),
    ("diskMaxUsedSpaceRatio", "150", "between 1 and 100"),
    ("timerPrecisionMs", "7", "divide 1000"),
    ("messageDelayLevel", "1s 5x", "bad delay level"),
    ("deleteWhen", "04;25", "00..23"),
])
def test_store_values_refused(key: str, value: str, says: str) -> None:
    sc = MessageStoreConfig()
    apply_properties(sc, {key: value})
    with pytest.raises(ConfigError, match=key) as e:
        sc.validate()
    assert says in str(e.value)


@pytest.mark.parametrize(("key", "value", "says"), [
    ("brokerRole", "master", "ASYNC_MASTER, SYNC_MASTER, SLAVE"),
    ("brokerPermission", "99999", "between 0 and 7"),
    ("listenPort", "70000", "between 0 and 65535"),
    ("defaultTopicQueueNums", "0", "between 1 and 1024"),
])
def test_broker_values_refused(key: str, value: str, says: str) -> None:
    bc = BrokerConfig()
    apply_properties(bc, {key: value})
    with pytest.raises(ConfigError, match=key) as e:
        bc.validate()
    assert says in str(e.value)


def test_defaults_and_rocketmq_spellings_pass() -> None:
    sc, bc = MessageStoreConfig(), BrokerConfig()
    apply_properties(sc, {"flushDiskType": "SYNC_FLUSH", "deleteWhen": "04;05", "timerPrecisionMs": "1000"})
    apply_properties(bc, {"brokerRole": "SYNC_MASTER", "brokerPermission": "6"})
    sc.validate()
    bc.validate()
    assert sc.sync_flush


def _standalone(tmp_path, ns_port: int, *settings: str) -> subprocess.CompletedProcess[str]:  # noqa: ANN001
    cmd = [sys.executable, "-m", "tidalmq.cli", "standalone", "--data-dir", str(tmp_path / "data"),
           "--namesrv-port", str(ns_port), "--broker-port", str(free_port()), "--grpc-port", "0",
           "--console-port", "0", "--set", "metricsExporterType=DISABLE"]  # never the default metrics port 5557 in a test
    for s in settings:
        cmd += ["--set", s]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_standalone_refuses_a_bad_value_before_binding(tmp_path) -> None:  # noqa: ANN001
    # The NameServer port is taken: were the value checked only after binding, the exit would be the
    # bind failure (1), not the configuration error (2).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = _standalone(tmp_path, taken.getsockname()[1], "flushDiskType=sync_flush")
    assert r.returncode == 2, r.stderr
    assert "flushDiskType='sync_flush': allowed values are ASYNC_FLUSH, SYNC_FLUSH" in r.stderr
    assert not (tmp_path / "data").exists()


def test_unknown_key_is_warned(tmp_path) -> None:  # noqa: ANN001
    with socket.socket() as taken:  # start-up stops at the bind, after the keys were read
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = _standalone(tmp_path, taken.getsockname()[1], "noSuchKeyAnywhere=1")
    assert r.returncode == 1
    assert "unknown configuration key noSuchKeyAnywhere ignored" in r.stderr
