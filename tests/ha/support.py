"""A master (``tidalmq standalone``: NameServer + master broker) and a slave (``tidalmq broker``) on free
loopback ports in temp dirs, and the raw requests the replication tests make."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path
from typing import Any

from tests.broker.rawclient import runtime_info
from tests.support import Standalone, free_port
from tidalmq.remoting.transport import RemotingClient

FILE_SIZE = 1024 * 1024  # small CommitLog files: the tests cross file ends
MAX_MESSAGE_SIZE = 256 * 1024  # a CommitLog file must hold the largest message (mappedFileSizeCommitLog's check)
BROKER_NAME = "broker-ha"


def master_settings(role: str, **extra: str) -> dict[str, str]:
    return {"brokerName": BROKER_NAME, "brokerRole": role, "haListenPort": "0",
            "mappedFileSizeCommitLog": str(FILE_SIZE), "maxMessageSize": str(MAX_MESSAGE_SIZE),
            "timerWheelEnable": "false", **extra}


class Broker(Standalone):
    """A ``tidalmq broker`` alone (no NameServer of its own), registered with ``namesrv_addr``."""

    ready_line = re.compile(r"broker \S+ ready on (\S+):(\d+)")

    def __init__(self, data_dir: Path, namesrv_addr: str, settings: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, settings)
        self.namesrv = namesrv_addr
        self.broker_port = free_port()

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tidalmq.cli", "broker", "--data-dir", str(self.data_dir),
               "-n", self.namesrv, "--broker-port", str(self.broker_port)]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd


class Slave(Broker):
    """A ``tidalmq broker`` with brokerRole=SLAVE, brokerId=1, registered with the master's NameServer."""

    def __init__(self, data_dir: Path, namesrv_addr: str, settings: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, namesrv_addr, {"brokerName": BROKER_NAME, "brokerRole": "SLAVE", "brokerId": "1",
                                                  "mappedFileSizeCommitLog": str(FILE_SIZE),
                                                  "maxMessageSize": str(MAX_MESSAGE_SIZE),
                                                  "timerWheelEnable": "false", **(settings or {})})

    def pause(self) -> None:
        """SIGSTOP: the slave keeps its connection and answers nothing (a stalled slave)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class NameServer(Standalone):
    """A ``tidalmq namesrv`` alone, for brokers started as ``tidalmq broker``."""

    ready_line = re.compile(r"namesrv ready on")

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.namesrv_port = free_port()

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tidalmq.cli", "namesrv", "--data-dir", str(self.data_dir),
                "-p", str(self.namesrv_port)]


async def info(client: RemotingClient, addr: str) -> dict[str, Any]:
    return await runtime_info(client, addr)


async def wait_info(client: RemotingClient, addr: str, what: str, pred: Any, timeout: float = 20.0) -> dict[str, Any]:
    """Poll the broker's runtime info until ``pred(info)`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        table = await info(client, addr)
        if pred(table):
            return table
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; runtime info: {table}")
        await asyncio.sleep(0.05)


async def wait_caught_up(client: RemotingClient, master: str, slave: str, timeout: float = 20.0) -> int:
    """Until the slave's CommitLog ends where the master's does; returns that offset."""
    end = int((await info(client, master))["commitLogMaxOffset"])
    await wait_info(client, slave, f"the slave's CommitLog to reach {end}",
                    lambda t: int(t["commitLogMaxOffset"]) >= end, timeout)
    return end


def commit_log_bytes(data_dir: Path, end: int) -> bytes:
    """The CommitLog's bytes [first file, end) read from its files."""
    files = sorted((data_dir / "store" / "commitlog").iterdir())
    out = bytearray()
    for f in files:
        start = int(f.name)
        if start >= end:
            break
        with open(f, "rb") as fh:
            out += fh.read(min(FILE_SIZE, end - start))
    return bytes(out)
