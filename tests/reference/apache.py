"""Apache RocketMQ's released NameServer, Broker and mqadmin, run beside TidalMQ on free loopback ports.

The jars come from Maven Central through ``scripts/reference/fetch.sh`` (pinned in
``scripts/reference/rocketmq/pom.xml``) into a cache outside the repository. Each JVM gets a small heap
(docs/compatibility.md, "The reference suite"): the NameServer 128-256 MiB, the broker 256-512 MiB with
512 MiB of direct memory, mqadmin 256 MiB. Logs and the store go into the test's temporary directory
(``user.home`` points there: RocketMQ writes its logs to ``~/logs/rocketmqlogs``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import bindable, free_ports

REPO = Path(__file__).resolve().parents[2]
FETCH = REPO / "scripts" / "reference" / "fetch.sh"
JAVA_OPTS_COMMON = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"]
START_TIMEOUT = 120.0  # a JVM's start on a loaded 2-core machine


class ReferenceUnavailable(RuntimeError):
    """The machine refused a part of the reference (no Java, Maven Central unreachable)."""


def fetch() -> Path:
    """The reference cache, fetched if needed (scripts/reference/fetch.sh)."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        raise ReferenceUnavailable("java and mvn are needed for the reference suite (Java 17, Maven)")
    proc = subprocess.run(["bash", str(FETCH)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/reference/fetch.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def rocketmq_version() -> str:
    pom = (REPO / "scripts" / "reference" / "rocketmq" / "pom.xml").read_text()
    found = re.search(r"<rocketmq.version>([^<]+)</rocketmq.version>", pom)
    assert found is not None
    return found.group(1)


def rocketmq_lib(cache: Path) -> Path:
    return cache / f"rocketmq-{rocketmq_version()}" / "lib"


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before listening on {port}:\n{_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listening on {port} after {timeout:.0f} s:\n{_tail(log)}")


def _tail(log: Path, n: int = 4000) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def _broker_port(candidates: Sequence[int], taken: set[int]) -> int:
    """A listenPort whose neighbours are free too: RocketMQ's broker binds listenPort-2 (its fast port) and
    listenPort+1 (HA)."""
    for port in candidates:
        near = {port - 2, port + 1}
        if not near & taken and all(bindable(p) for p in near):
            return port
    raise RuntimeError(f"no broker port with free neighbours among {candidates}")


def _write_properties(path: Path, props: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


@dataclass
class ApacheRocketMQ:
    """An Apache RocketMQ NameServer and one master broker (optionally a gRPC proxy) in ``home``."""

    lib: Path
    home: Path
    broker_settings: dict[str, str] = field(default_factory=dict)
    cluster: str = "RefCluster"
    broker_name: str = "ref-a"
    with_proxy: bool = False
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ns, proxy_grpc, proxy_remoting, *spare = free_ports(8)
        self.namesrv_port, self.proxy_grpc_port, self.proxy_remoting_port = ns, proxy_grpc, proxy_remoting
        self.broker_port = _broker_port(spare, {ns, proxy_grpc, proxy_remoting})

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.proxy_grpc_port}"

    def _java(self, main: str, heap: Sequence[str], args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        cmd = ["java", *heap, *JAVA_OPTS_COMMON, f"-Duser.home={self.home}", f"-Drocketmq.home.dir={self.home}",
               "-cp", f"{self.lib}/*", main, *args]
        env = {**os.environ, "ROCKETMQ_HOME": str(self.home)}
        out = log.open("wb")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.home,
                                start_new_session=True)
        out.close()
        self.procs.append(proc)
        return proc

    def start(self) -> ApacheRocketMQ:
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        ns_conf = self.home / "namesrv.conf"
        _write_properties(ns_conf, {"listenPort": str(self.namesrv_port), "bindAddress": "127.0.0.1"})
        log = self.home / "namesrv.out"
        proc = self._java("org.apache.rocketmq.namesrv.NamesrvStartup", ["-Xms128m", "-Xmx256m"],
                          ["-c", str(ns_conf)], log)
        wait_port(self.namesrv_port, proc, log)
        store = self.home / "store"
        broker_conf = self.home / "broker.conf"
        _write_properties(broker_conf, {
            "brokerClusterName": self.cluster, "brokerName": self.broker_name, "brokerId": "0",
            "namesrvAddr": self.namesrv_addr, "listenPort": str(self.broker_port),
            "haListenPort": str(self.broker_port + 1), "bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog"),
            "mappedFileSizeCommitLog": str(64 << 20), "mappedFileSizeConsumeQueue": "300000",
            "enablePropertyFilter": "true", "timerWheelEnable": "true", "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true", "traceTopicEnable": "false",
            # A send that waits longer than this in the broker's queue is answered [TIMEOUT_CLEAN_QUEUE]
            # broker busy (default 200 ms): on a 2-core machine with a client JVM starting beside it,
            # the broker's own JIT warm-up alone passes that (CI saw 202..221 ms).
            "waitTimeMillsInSendQueue": "3000",
            **self.broker_settings})
        log = self.home / "broker.out"
        proc = self._java("org.apache.rocketmq.broker.BrokerStartup",
                          ["-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m"], ["-c", str(broker_conf)], log)
        wait_port(self.broker_port, proc, log)
        self._wait_registered()
        if self.with_proxy:
            proxy_conf = self.home / "rmq-proxy.json"
            proxy_conf.write_text(json.dumps({
                "rocketMQClusterName": self.cluster, "namesrvAddr": self.namesrv_addr,
                "grpcServerPort": self.proxy_grpc_port, "remotingListenPort": self.proxy_remoting_port,
                "proxyMode": "cluster"}))
            log = self.home / "proxy.out"
            proc = self._java("org.apache.rocketmq.proxy.ProxyStartup", ["-Xms128m", "-Xmx384m"],
                              ["-pc", str(proxy_conf)], log)
            wait_port(self.proxy_grpc_port, proc, log)

    def _wait_registered(self, timeout: float = START_TIMEOUT) -> None:
        """Until the NameServer lists the broker (a client routing earlier would find no broker)."""
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = mqadmin(self.lib, self.home, ["clusterList", "-n", self.namesrv_addr]).stdout
            if self.broker_addr in out:
                return
            time.sleep(0.5)
        raise TimeoutError(f"the broker never registered with the NameServer:\n{out}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()

    def remove(self) -> None:
        """The store (64 MiB CommitLog files) and logs: called once stopped."""
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> ApacheRocketMQ:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mqadmin(lib: Path, home: Path, args: Sequence[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Apache's mqadmin (rocketmq-tools' MQAdminStartup) with ``args``, as ``bin/mqadmin`` runs it."""
    home.mkdir(parents=True, exist_ok=True)
    cmd = ["java", "-Xms64m", "-Xmx256m", *JAVA_OPTS_COMMON, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
           "-cp", f"{lib}/*", "org.apache.rocketmq.tools.command.MQAdminStartup", *args]
    env = {**os.environ, "ROCKETMQ_HOME": str(home)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=home)
