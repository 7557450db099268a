"""A SYNC_MASTER and its slave on separate hosts (network namespaces, tests/netns/hosts.py), the NameServer on
a third: the master SIGKILLed under sends, every acknowledged message is read from the slave. Slow suite:
``pytest tests/netns --run-slow`` as root."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.broker.rawclient import pull_bodies, run
from tests.netns.hosts import Hosts
from tests.support import free_port
from tidalmq.client import Message, Producer, SendStatus
from tidalmq.client.admin import Admin
from tidalmq.cluster import render_conf
from tidalmq.remoting.transport import RemotingClient

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.timeout(180)]

TOPIC = "NetnsTopic"
QUEUES = 4


def _start(hosts: Hosts, i: int, argv: list[str], log: Path, ready: str, timeout: float = 60) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        proc = subprocess.Popen([*hosts.prefix(i), sys.executable, "-m", "tidalmq.cli", *argv],
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while not re.search(ready, log.read_text(errors="replace")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{argv[0]} on host {i} not ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return proc


async def _pull_bodies(addr: str) -> set[bytes]:
    client = RemotingClient()
    try:
        return await pull_bodies(client, addr, TOPIC, QUEUES)
    finally:
        await client.close()


async def _load(ns_addr: str, slave: str, master: subprocess.Popen[bytes]) -> tuple[set[bytes], set[bytes]]:
    async with Admin(ns_addr) as admin:
        await admin.create_topic(TOPIC, QUEUES)
    acked: set[bytes] = set()
    async with Producer("PG_netns", ns_addr, send_timeout=2.0, retry_times_when_send_failed=0) as producer:
        deadline = time.monotonic() + 60
        i = 0
        while len(acked) < 300:  # SEND_OK only once the slave is connected and has the bytes
            assert time.monotonic() < deadline, len(acked)
            body = f"m{i}".encode()
            i += 1
            r = await producer.send(Message(TOPIC, body))
            if r.status == SendStatus.SEND_OK:
                acked.add(body)
        # The slave serves the topic once SlaveSynchronize copied its config; then the master dies mid-load.
        while not await _pull_bodies(slave):
            assert time.monotonic() < deadline, "slave never served the topic"
            await asyncio.sleep(0.2)
        sending = asyncio.ensure_future(producer.send(Message(TOPIC, b"in-flight")))
        master.kill()
        try:
            if (await sending).status == SendStatus.SEND_OK:
                acked.add(b"in-flight")
        except Exception:  # noqa: BLE001 - a send the SIGKILL cut is not acknowledged
            pass
    return acked, await _pull_bodies(slave)


def test_sync_master_sigkilled_every_acknowledged_message_is_on_the_slave_host(hosts3: Hosts, tmp_path: Path) -> None:
    ns_port = free_port() if not hosts3.netns else 9876  # each namespace has its own ports
    ns_addr = f"{hosts3.addr(0)}:{ns_port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_start(hosts3, 0, ["namesrv", "--host", hosts3.addr(0), "-p", str(ns_port), "--data-dir",
                                        str(hosts3.run_dir(tmp_path, 0))], tmp_path / "ns.log", "namesrv ready"))
        addrs = []
        for i, (role, bid) in ((1, ("SYNC_MASTER", "0")), (2, ("SLAVE", "1"))):
            port = 10911 if hosts3.netns else free_port()
            d = hosts3.run_dir(tmp_path, i)
            conf = {"brokerName": "broker-a", "brokerId": bid, "brokerRole": role, "namesrvAddr": ns_addr,
                    "brokerIP1": hosts3.addr(i), "listenPort": str(port),
                    "mappedFileSizeCommitLog": "1048576", "maxMessageSize": "262144", "timerWheelEnable": "false"}
            (d / "broker.conf").write_text(render_conf(conf))
            procs.append(_start(hosts3, i, ["broker", "-c", str(d / "broker.conf"), "--data-dir", str(d),
                                            "--host", hosts3.addr(i)], tmp_path / f"b{i}.log", "broker .* ready on"))
            addrs.append(f"{hosts3.addr(i)}:{port}")
        acked, on_slave = run(_load(ns_addr, addrs[1], procs[1]), 150)
        assert len(acked) >= 300
        assert acked - on_slave == set()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
