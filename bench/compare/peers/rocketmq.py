"""Apache RocketMQ 5 (the NameServer and one master broker, jars pinned in scripts/reference/rocketmq/pom.xml
and fetched from Maven Central into the reference cache), driven by TidalMQ's client: both speak remoting.

Scheduled messages go to RocketMQ 5's own timer (TimerMessageStore, ``timerWheelEnable=true``) through the
TIMER_DELIVER_MS property, at its default ``timerPrecisionMs=1000`` (this peer) and at 100 ms (the peer
``rocketmq_p100``). RocketMQ refuses a delay in a batch, so timer messages go one by one (256 async sends in
flight); plain messages go in batches as they do to TidalMQ. Durable setting (W4): ``flushDiskType=SYNC_FLUSH``.
The broker's pid is the one measured (CPU, RSS) and SIGKILLed; the NameServer stays up across a W4 restart.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.compare.base import ServerBase, free_port, wait_port
from bench.compare.peers import tidalmq as tpeer
from bench.compare.peers.jvm import fetch_lib, java_cmd, live_heap, missing_java, pinned, port_with_neighbours
from tidalmq.client import Admin, Message

NAMESRV_HEAP = ["-Xms256m", "-Xmx256m"]
# RocketMQ's runbroker.sh asks for 8 GiB; 1 GiB (and as much direct memory) is what a small node gives it
BROKER_HEAP = ["-Xms1g", "-Xmx1g", "-XX:MaxDirectMemorySize=1g"]
START_TIMEOUT = 180.0  # two JVMs on a loaded 2-core machine


class Server(ServerBase):
    name = "rocketmq"
    precision_ms = 1000
    unsupported: dict[str, str] = {}
    # --quick only: W3 and W4 hardly depend on the timer's precision, and rocketmq_p100 runs them
    quick_skip: dict[str, str] = {"W3": "--quick: run by rocketmq_p100", "W4": "--quick: run by rocketmq_p100"}
    start_timeout = START_TIMEOUT  # bench/pending_bench.py allows more for a restart with N pending

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.ns_port = free_port()
        self.port = port_with_neighbours()
        self.ns_proc: subprocess.Popen[bytes] | None = None
        self.lib: Path | None = None

    @classmethod
    def available(cls) -> str | None:
        return missing_java()

    @classmethod
    def version(cls) -> str:
        j = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
        return f"Apache RocketMQ {pinned('rocketmq', 'rocketmq.version')} (Maven Central), {j[0] if j else 'java ?'}"

    def broker_props(self) -> dict[str, str]:
        """The settings that differ from RocketMQ's defaults (the ports and paths aside)."""
        return {"timerWheelEnable": "true", "timerPrecisionMs": str(self.precision_ms),
                # the default is 3 days: bench/pending_bench.py schedules up to 30 days ahead
                "timerMaxDelaySec": str(40 * 86400),
                "flushDiskType": "SYNC_FLUSH" if self.durable else "ASYNC_FLUSH",
                "mappedFileSizeCommitLog": str(256 * 1024 * 1024),  # as the tidalmq peer
                # the per-pull caps raised as for TidalMQ (the defaults are 32 and 256 KiB)
                "maxTransferCountOnMessageInMemory": str(tpeer.PULL_BATCH),
                "maxTransferBytesOnMessageInMemory": str(tpeer.PULL_BATCH * 1536),
                "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true"}

    def settings(self) -> dict[str, str]:
        return {**self.broker_props(), "broker JVM": " ".join(BROKER_HEAP) + ", G1 and the JIT at their defaults",
                "NameServer JVM": " ".join(NAMESRV_HEAP),
                "client": f"tidalmq.client: Producer.send_batch ({tpeer.BATCH} a request, {tpeer.BATCH_WINDOW} in "
                f"flight) for plain messages, send_async ({tpeer.WINDOW} in flight) for timer messages (RocketMQ "
                f"refuses delays in batches), PushConsumer (pulls of {tpeer.PULL_BATCH}), topic of {tpeer.QUEUES} queues"}

    def _java(self, heap: list[str], main: str, conf: Path, log: Path) -> subprocess.Popen[bytes]:
        assert self.lib is not None
        # RocketMQ writes its logs under ~/logs/rocketmqlogs: user.home keeps them in the work dir
        cmd = java_cmd(self.lib, heap, main, ["-c", str(conf)],
                       {"user.home": str(self.workdir), "rocketmq.home.dir": str(self.workdir)})
        with log.open("ab") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**os.environ, "ROCKETMQ_HOME": str(self.workdir)}, cwd=self.workdir,
                                    start_new_session=True)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.lib is None:
            self.lib = fetch_lib("", f"rocketmq-{pinned('rocketmq', 'rocketmq.version')}")
        if self.ns_proc is None or self.ns_proc.poll() is not None:
            conf = self.workdir / "namesrv.conf"
            conf.write_text(f"listenPort={self.ns_port}\nbindAddress=127.0.0.1\n")
            self.ns_proc = self._java(NAMESRV_HEAP, "org.apache.rocketmq.namesrv.NamesrvStartup", conf,
                                      self.workdir / "namesrv.log")
            wait_port(self.ns_port, self.start_timeout, self.ns_proc, "rocketmq namesrv")
        store = self.workdir / "store"
        conf = self.workdir / "broker.conf"
        props = {"brokerClusterName": "BenchCluster", "brokerName": "bench-a", "brokerId": "0",
                 "namesrvAddr": f"127.0.0.1:{self.ns_port}", "listenPort": str(self.port),
                 "haListenPort": str(self.port + 1), "bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1",
                 "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog"),
                 **self.broker_props()}
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc = self._java(BROKER_HEAP, "org.apache.rocketmq.broker.BrokerStartup", conf, self.log_path)
        wait_port(self.port, self.start_timeout, self.proc, "rocketmq broker")
        self._wait_registered()

    def _wait_registered(self) -> None:
        """Until the NameServer routes to the broker (a client that asks earlier finds no broker)."""
        addr = f"127.0.0.1:{self.port}"

        async def listed() -> bool:
            async with Admin(self.conn()["namesrv"]) as admin:
                return addr in (await admin.master_addrs()).values()

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"rocketmq broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if asyncio.run(listed()):
                    return
            except Exception:  # noqa: BLE001 - the NameServer still starting
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the rocketmq broker never registered with its NameServer:\n{self.log_tail()}")

    def conn(self) -> dict[str, Any]:
        return {"namesrv": f"127.0.0.1:{self.ns_port}"}

    def live_memory(self) -> dict[str, Any]:
        return live_heap(self.server_pid())

    def stop(self, timeout: float = 30.0) -> None:
        super().stop(timeout)  # the broker
        if self.ns_proc is not None and self.ns_proc.poll() is None:
            try:
                os.killpg(self.ns_proc.pid, signal.SIGTERM)
                self.ns_proc.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.ns_proc.pid, signal.SIGKILL)
                self.ns_proc.wait(10)
        self.ns_proc = None


class Client(tpeer.Client):
    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        now = time.time() * 1000

        def msg(d: int, b: bytes) -> Message:
            return Message(dest, b) if d <= now + 1 else Message(dest, b, deliver_time_ms=d)

        return self._run(self._send_all((msg(d, b), k) for d, b, k in items))
