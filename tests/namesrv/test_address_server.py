"""The NameServer address server (seed 004, client addressing): served by the standalone and ``tidalmq
namesrv``, asked by the official C++-core client, TidalMQ's client and mqadmin, and by a broker with
fetchNamesrvAddrByAddressServer; a NameServer moved while a client runs."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.helpers import create_topic, uniq, wait_until
from tests.compat.harness import ClientAgent, msg, require_official_client, send_acknowledged
from tests.support import Standalone, free_port, free_ports, wait_for
from tidalmq.client import Message, Producer
from tidalmq.client.admin import Admin
from tidalmq.client.instance import ClientInstance
from tidalmq.namesrv.address_server import AddressServer, AddressServerConfig, NamesrvAddressList


def _get(url: str, method: str = "GET") -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def served(module_tmp) -> Iterator[Standalone]:
    """A standalone that serves the address server on a free port."""
    port = free_port()
    with Standalone(module_tmp("addr") / "data", {"addressServerPort": str(port)}) as s:
        s.address_port = port  # type: ignore[attr-defined]
        yield s


def test_standalone_serves_its_namesrv_address(served: Standalone) -> None:
    port = served.address_port  # type: ignore[attr-defined]
    assert f"address-server http://127.0.0.1:{port}/rocketmq/nsaddr" in "".join(served._lines)
    assert _get(f"http://127.0.0.1:{port}/rocketmq/nsaddr") == (200, served.namesrv_addr.encode())
    # the unit-name form RocketMQ's clients send, answered alike
    assert _get(f"http://127.0.0.1:{port}/rocketmq/nsaddr-unit1?nofix=1") == (200, served.namesrv_addr.encode())
    assert _get(f"http://127.0.0.1:{port}/rocketmq/other")[0] == 404
    assert _get(f"http://127.0.0.1:{port}/rocketmq/nsaddr", "POST")[0] == 405


def test_malformed_requests_get_400_and_the_server_serves_on(served: Standalone) -> None:
    port = served.address_port  # type: ignore[attr-defined]
    for raw in (b"GARBAGE\r\n\r\n", b"GET /rocketmq/nsaddr SPDY/9\r\n\r\n", b"GET " + b"x" * 20000 + b"\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw)
            assert s.recv(64).startswith(b"HTTP/1.1 400 ")
    assert _get(f"http://127.0.0.1:{port}/rocketmq/nsaddr")[0] == 200


def test_official_client_finds_the_namesrv_through_the_address_server(served: Standalone, tmp_path: Path) -> None:
    require_official_client()
    topic = uniq("AddrT")
    asyncio.run(create_topic(served.namesrv_addr, topic))
    agent = ClientAgent("addr", tmp_path)
    try:
        # the C++ core takes the address server's whole URL as its "domain"
        url = f"http://127.0.0.1:{served.address_port}/rocketmq/nsaddr"  # type: ignore[attr-defined]
        agent.call("producer_start", group=uniq("PG"), namesrv_domain=url)
        [result] = send_acknowledged(agent, [msg(topic, "found")])
        assert result["status"] == "OK"
    finally:
        agent.close()


def test_mqadmin_asks_the_address_server_named_in_the_environment(served: Standalone) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "rocketmq.namesrv.addr")}
    env["rocketmq.namesrv.domain"] = f"127.0.0.1:{served.address_port}"  # type: ignore[attr-defined]
    out = subprocess.run([sys.executable, "-c", "import sys, tidalmq.mqadmin as m; sys.exit(m.main())", "clusterList"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert served.broker_addr in out.stdout
    env["rocketmq.namesrv.domain"] = f"127.0.0.1:{free_port()}"  # nothing listens there: a clear error
    out = subprocess.run([sys.executable, "-c", "import sys, tidalmq.mqadmin as m; sys.exit(m.main())", "clusterList"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0
    assert "no NameServer list" in out.stderr + out.stdout


def test_a_client_follows_the_namesrv_list_when_it_moves(tmp_path: Path) -> None:
    """Two clusters; the address server's file names the first, then the second: a running producer's
    sends move to the second without a restart."""
    list_file = tmp_path / "nsaddr.txt"
    with Standalone(tmp_path / "a", {"brokerName": "broker-a"}) as a, \
            Standalone(tmp_path / "b", {"brokerName": "broker-b"}) as b:
        topic = uniq("MoveT")

        async def go() -> None:
            await create_topic(a.namesrv_addr, topic)
            await create_topic(b.namesrv_addr, topic)
            list_file.write_text(a.namesrv_addr + "\n")
            config = AddressServerConfig(address_server_port=0, address_server_namesrv_addr_file=str(list_file))
            server = AddressServer("127.0.0.1", config, NamesrvAddressList(config, ["127.0.0.1:1"]))
            await server.start()
            instance = ClientInstance(namesrv_domain=f"127.0.0.1:{server.port}", fetch_namesrv_interval=0.2,
                                      poll_name_server_interval=0.2)
            producer = Producer(uniq("PG"), instance=instance)
            await producer.start()
            try:
                assert instance.namesrv_addrs == [a.namesrv_addr]
                first = await producer.send(Message(topic, b"before"))
                assert first.message_queue.broker_name == "broker-a"
                list_file.write_text(f"{b.namesrv_addr}\n")
                await wait_until(lambda: instance.namesrv_addrs == [b.namesrv_addr], 20, "the new list applied")

                async def lands_on_b() -> bool:
                    r = await producer.send(Message(topic, b"after"))
                    return r.message_queue.broker_name == "broker-b"

                deadline = asyncio.get_running_loop().time() + 20
                while not await lands_on_b():
                    assert asyncio.get_running_loop().time() < deadline, "sends never moved to the new cluster"
                    await asyncio.sleep(0.1)
            finally:
                await producer.shutdown()
                await server.stop()

        asyncio.run(go())


class _NameServer(Standalone):
    ready_line = re.compile(r"namesrv ready on \S+:(\d+) address-server (\S+)")

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.namesrv_port, self.address_port = free_ports(2)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tidalmq.cli", "namesrv", "--data-dir", str(self.data_dir),
                "-p", str(self.namesrv_port), "--set", f"addressServerPort={self.address_port}"]


class _Broker(Standalone):
    ready_line = re.compile(r"broker \S+ ready on (\S+):(\d+)")

    def __init__(self, data_dir: Path, domain: str) -> None:
        super().__init__(data_dir, {"brokerName": "broker-looked-up", "fetchNamesrvAddrByAddressServer": "true",
                                    "rmqAddressServerDomain": domain, "timerWheelEnable": "false"})
        self.broker_port = free_port()

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tidalmq.cli", "broker", "--data-dir", str(self.data_dir),
               "--broker-port", str(self.broker_port)]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd


def test_broker_registers_with_the_namesrv_the_address_server_lists(tmp_path: Path) -> None:
    with _NameServer(tmp_path / "ns") as ns:
        env_before = {k: os.environ.pop(k) for k in ("NAMESRV_ADDR", "rocketmq.namesrv.addr") if k in os.environ}
        try:
            with _Broker(tmp_path / "broker", f"127.0.0.1:{ns.address_port}") as broker:
                async def registered() -> dict:
                    async with Admin(ns.namesrv_addr) as admin:
                        return await admin.cluster_info()

                def listed() -> bool:
                    info = asyncio.run(registered())
                    addrs = info.get("brokerAddrTable", {}).get("broker-looked-up", {}).get("brokerAddrs", {})
                    return broker.broker_addr in {str(v) for v in addrs.values()}

                wait_for(listed, 30, 0.2, "the broker registered with the looked-up NameServer")
        finally:
            os.environ.update(env_before)
