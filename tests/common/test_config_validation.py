"""Configuration is validated before anything binds: enum keys exactly as RocketMQ spells them,
numbers in range, unknown keys warned (docs/broker.md "Configuration")."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.support import free_port
from tidalmq.broker.config import BrokerConfig
from tidalmq.common.config import ConfigError, apply_properties, load_properties_file, parse_properties
from tidalmq.proxy.config import ProxyConfig
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.store.config import MessageStoreConfig


def test_a_commit_log_file_that_holds_the_largest_message_is_taken() -> None:
    sc = MessageStoreConfig()
    apply_properties(sc, {"mappedFileSizeCommitLog": "1048576", "maxMessageSize": str(1048576 - 65536)})
    sc.validate()
    apply_properties(sc, {"maxMessageSize": str(1048576 - 65535)})
    with pytest.raises(ConfigError, match="mappedFileSizeCommitLog=1048576"):
        sc.validate()


@pytest.mark.parametrize(("key", "value", "says"), [
    ("flushDiskType", "sync_flush", "ASYNC_FLUSH, SYNC_FLUSH"),  # RocketMQ's enum is case-sensitive
    ("flushDiskType", "SYNC", "ASYNC_FLUSH, SYNC_FLUSH"),
    ("mappedFileSizeConsumeQueue", "1000001", "multiple of 20"),
    ("diskMaxUsedSpaceRatio", "150", "between 1 and 100"),
    ("timerPrecisionMs", "7", "divide 1000"),
    ("timerPrecisionMs", "0", ">= 1"),
    ("messageDelayLevel", "1s 5x", "bad delay level"),
    ("messageDelayLevel", "", "no delay level"),
    ("messageDelayLevel", "1s 0s", "more than 0"),
    ("messageDelayLevel", "1s -5s", "bad delay level"),
    ("messageDelayLevel", "1s 99999999999d", "at most 2147483647 ms"),
    ("messageDelayLevel", " ".join(["1s"] * 1001), "at most 1000"),
    ("deleteWhen", "04;25", "00..23"),
    ("mappedFileSizeCommitLog", "1048576", "smaller than the largest record"),  # maxMessageSize is 4 MiB
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
    ("listenPort", "-1", "between 0 and 65535"),
    ("haListenPort", "65536", "between -1 and 65535"),
    ("metricsPromExporterPort", "-2", "between 0 and 65535"),
    ("brokerName", "a/b", "brokerName"),
    ("brokerName", "a..b", "'..'"),
    ("brokerName", "a b", "brokerName"),
    ("brokerName", "a\x01b", "brokerName"),
    ("brokerClusterName", "../c", "clusterName"),
    ("brokerClusterName", "Default Cluster", "clusterName"),
    ("brokerIP1", "10.0.0.300", "not an IPv4 or IPv6 address"),
    ("brokerIP1", "", "not an IPv4 or IPv6 address"),
    ("brokerIP2", "host name", "not an IPv4 or IPv6 address"),
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


@pytest.mark.parametrize("ms", ["1", "2", "5", "10", "1000"])
def test_timer_precisions_that_divide_a_second_pass(ms: str) -> None:
    sc = MessageStoreConfig()
    apply_properties(sc, {"timerPrecisionMs": ms})
    sc.validate()
    assert sc.timer_precision_ms == int(ms)


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


@pytest.mark.parametrize(("key", "value", "says"), [
    ("serverMaxBufferedBytes", "-1", "between 1 and"),
    ("serverMaxBufferedBytes", "0", "between 1 and"),
    ("serverChannelMaxIdleTimeSeconds", "-5", "must be 0 (off)"),
    ("serverFrameTimeoutSeconds", "-0.5", "must be 0 (off)"),
    ("serverFrameTimeoutSeconds", "inf", "must be 0 (off)"),
    ("serverChannelMaxPendingRequests", "0", "between 1 and"),
    ("writeBufferLowWaterMark", "-1", "between 0 and"),
    ("writeBufferLowWaterMark", str(8 << 20), "must not be above writeBufferHighWaterMark"),
])
def test_remoting_values_refused(key: str, value: str, says: str) -> None:
    rc = RemotingServerConfig()
    apply_properties(rc, {key: value})
    with pytest.raises(ConfigError, match=key) as e:
        rc.validate()
    assert says in str(e.value)


@pytest.mark.parametrize(("key", "value"), [("grpcServerPort", "70000"), ("grpcServerPort", "-2"),
                                            ("grpcClientConsumerMaxLongPollingTimeoutMillis", "0")])
def test_proxy_values_refused(key: str, value: str) -> None:
    pc = ProxyConfig()
    apply_properties(pc, {key: value})
    with pytest.raises(ConfigError, match=key):
        pc.validate()


def test_properties_are_read_as_java_reads_them(tmp_path) -> None:  # noqa: ANN001
    conf = tmp_path / "broker.conf"
    conf.write_bytes("\ufeffbrokerName=broker-\\u00e9\n! a comment\nbrokerClusterName : Cl\\\n    uster\n"
                     "deleteWhen 05\nmapedFileSizeCommitLog=1048576\n".encode())
    props = load_properties_file(conf)
    assert props == {"brokerName": "broker-\u00e9", "brokerClusterName": "Cluster", "deleteWhen": "05",
                     "mapedFileSizeCommitLog": "1048576"}
    sc, bc = MessageStoreConfig(), BrokerConfig()
    assert apply_properties(sc, props) == ["brokerName", "brokerClusterName"]  # RocketMQ 4's spelling is known
    assert sc.mapped_file_size_commit_log == 1048576 and sc.delete_when == "05"
    assert apply_properties(bc, {k: props[k] for k in ("brokerName", "brokerClusterName")}) == []
    assert (bc.broker_name, bc.broker_cluster_name) == ("broker-\u00e9", "Cluster")
    assert parse_properties("a=1\na=2") == {"a": "2"}  # the last wins, as in java.util.Properties
    with pytest.raises(ConfigError, match="not a properties text"):
        parse_properties("a=\\uZZ")


def _conf(tmp_path, text: str) -> str:  # noqa: ANN001
    path = tmp_path / "broker.conf"
    path.write_bytes(text.encode())
    return str(path)


@pytest.mark.parametrize(("args", "says"), [
    (["-c", "BOM"], "listenPort=70000: must be between 0 and 65535"),
    (["--set", "writeBufferLowWaterMark=9999999999"], "writeBufferLowWaterMark=9999999999: must not be above"),
    (["--set", "brokerName=a/b"], "brokerName='a/b'"),
    (["--set", "brokerIP1=1.2.3"], "brokerIP1='1.2.3'"),
    (["--set", "messageDelayLevel=0s"], "messageDelayLevel='0s'"),
    (["--set", "serverMaxBufferedBytes=-1"], "serverMaxBufferedBytes=-1"),
])
def test_standalone_refuses_each_at_start(tmp_path, args: list[str], says: str) -> None:  # noqa: ANN001
    if args[0] == "-c":  # a byte order mark before the first key: still listenPort, so still refused
        args = ["-c", _conf(tmp_path, "\ufefflistenPort=70000\n")]
    cmd = [sys.executable, "-m", "tidalmq.cli", "standalone", "--data-dir", str(tmp_path / "data"),
           "--namesrv-port", str(free_port()), "--grpc-port", "0", "--console-port", "0",
           "--set", "metricsExporterType=DISABLE", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("flag", ["--namesrv-port", "--broker-port", "--grpc-port", "--console-port"])
def test_a_port_flag_past_65535_is_refused(tmp_path, flag: str) -> None:  # noqa: ANN001
    cmd = [sys.executable, "-m", "tidalmq.cli", "standalone", "--data-dir", str(tmp_path / "data"), flag, "70000"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{flag}: port 70000 is not between" in r.stderr, r.stderr
    assert not (tmp_path / "data").exists()
