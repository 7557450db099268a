"""A NameServer moved under running clients that found it through TidalMQ's NameServer address server
(issue 44, seed 004 "client addressing"): the official Java 4.x client (rocketmq-client 4.9.8, with
``-Drocketmq.namesrv.domain`` and ``-Drocketmq.namesrv.domain.subgroup``, no namesrvAddr), the official
C++-core 4.x client (``set_namesrv_domain``) where its venv is there, and TidalMQ's own client.

The broker finds its NameServers through the same address server (fetchNamesrvAddrByAddressServer). The
address server's file names the old NameServer, then the new one; the old one is stopped. Sends and
consumption go on throughout (the routes the clients hold name the broker, which stays), and a topic created
after the move, whose route only the new NameServer has, is sent to by each client once it has asked the
address server again: RocketMQ's clients every two minutes, so this test takes about that long
(docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.harness import OFFICIAL_PYTHON, ClientAgent, msg, send_acknowledged
from tests.reference.java4 import CLIENT_TIMEOUT, Event, client4_command, parse_events
from tests.support import ModuleTmp, Standalone, free_ports, wait_for
from tidalmq.client import Message, MessageExt, Producer, PushConsumer
from tidalmq.client.admin import Admin
from tidalmq.client.instance import ClientInstance

pytestmark = [pytest.mark.reference, pytest.mark.timeout(600)]

SUBGROUP = "tidalns"  # not the default nsaddr: the subgroup property is read too
RUN = "mv" + str(os.getpid())
TOPIC, AFTER = f"J4moved_{RUN}", f"J4movedafter_{RUN}"  # Client4's topic("moved"), and the one made after


class NameServer(Standalone):
    """``tidalmq namesrv``; with ``list_file``, serving the address server that answers from it."""

    ready_line = re.compile(r"namesrv ready on \S+:(\d+)")

    def __init__(self, data_dir: Path, list_file: Path | None = None) -> None:
        super().__init__(data_dir)
        self.namesrv_port, self.address_port = free_ports(2)
        self.list_file = list_file

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tidalmq.cli", "namesrv", "--data-dir", str(self.data_dir),
               "-p", str(self.namesrv_port)]
        if self.list_file is not None:
            cmd += ["--set", f"addressServerPort={self.address_port}", "--set", f"addressServerSubGroup={SUBGROUP}",
                    "--set", f"addressServerNamesrvAddrFile={self.list_file}"]
        return cmd


class Broker(Standalone):
    """``tidalmq broker`` that asks the address server for its NameServers every second."""

    ready_line = re.compile(r"broker \S+ ready on (\S+):(\d+)")

    def __init__(self, data_dir: Path, domain: str) -> None:
        super().__init__(data_dir, {"brokerName": "broker-moved", "fetchNamesrvAddrByAddressServer": "true",
                                    "rmqAddressServerDomain": domain, "rmqAddressServerSubGroup": SUBGROUP,
                                    "fetchNamesrvAddrInterval": "1000", "timerWheelEnable": "false"})
        self.broker_port = free_ports(1)[0]

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tidalmq.cli", "broker", "--data-dir", str(self.data_dir),
               "--broker-port", str(self.broker_port)]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd


CPP_FETCH_INTERVAL_S = 120  # rocketmq-client-cpp's MQClientFactory::fetchNameServerAddr, from its start


def _cpp_log(home: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((home / "logs" / "rocketmq-cpp").glob("*.log*")))


def _cpp_fetch_lines(home: Path) -> str:
    """The C++ core's log lines about the address server and the NameServer list (a failing wait's evidence)."""
    keep = ("fetchNSAddr", "name server address", "updateNameServerAddressList", "timed_mutex")
    return "\n".join(ln for ln in _cpp_log(home).splitlines() if any(k in ln for k in keep))[-4000:]


async def _registered(namesrv: str, broker_addr: str) -> bool:
    async with Admin(namesrv) as admin:
        info = await admin.cluster_info()
    addrs = (info.get("brokerAddrTable", {}).get("broker-moved") or {}).get("brokerAddrs") or {}
    return broker_addr in {str(a) for a in addrs.values()}


async def _create(namesrv: str, broker_addr: str, topic: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 2, broker_addrs=[broker_addr])


class TidalClients:
    """TidalMQ's producer (asking the address server every second) and push consumer (the environment's
    rocketmq.namesrv.domain, every two minutes) on a loop of their own: a send of TOPIC every 100 ms."""

    def __init__(self, domain: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sent: list[tuple[float, str]] = []  # (time, body) acknowledged
        self.got: dict[str, float] = {}  # body -> time received
        self.errors: list[str] = []
        self.instance = ClientInstance(namesrv_domain=domain, namesrv_domain_subgroup=SUBGROUP,
                                       fetch_namesrv_interval=1.0, poll_name_server_interval=1.0)
        self.producer = Producer(f"TmqMovedPG_{RUN}", instance=self.instance)
        self.consumer = PushConsumer(f"TmqMovedG_{RUN}", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                     listener=self._on)
        self.consumer.subscribe(TOPIC)
        self.stop = asyncio.Event()
        self._run(self.producer.start())
        self._run(self.consumer.start())
        self.sender = asyncio.run_coroutine_threadsafe(self._send_loop(), self.loop)

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def _on(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            self.got.setdefault(m.body.decode(), time.time())

    async def _send_loop(self) -> None:
        i = 0
        while not self.stop.is_set():
            body = f"t{i}"
            try:
                await self.producer.send(Message(TOPIC, body))
                self.sent.append((time.time(), body))
            except Exception as e:  # noqa: BLE001 (each failure is counted: the test expects none)
                self.errors.append(f"{type(e).__name__}: {e}")
            i += 1
            try:
                await asyncio.wait_for(self.stop.wait(), 0.1)  # the pace of the sends
            except TimeoutError:
                pass

    def send_after(self, timeout: float) -> float:
        """Sends to AFTER until acknowledged; the time it was."""
        async def go() -> float:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    await self.producer.send(Message(AFTER, "after"))
                    return time.time()
                except Exception:  # noqa: BLE001 (the old list: no route yet)
                    assert time.monotonic() < deadline, "TidalMQ's producer never sent to the new topic"
                    await asyncio.sleep(0.2)

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(timeout + 30)

    def close(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.stop.set)
            self.sender.result(30)
            self._run(self.producer.shutdown())
            self._run(self.consumer.shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


@pytest.fixture
def cluster(module_tmp: ModuleTmp) -> Iterator[tuple[NameServer, NameServer, Broker, Path]]:
    root = module_tmp("moved")
    list_file = root / "nsaddr.txt"
    with NameServer(root / "ns-old") as old, NameServer(root / "ns-new", list_file) as new:
        list_file.write_text(old.namesrv_addr + "\n")
        saved = {k: os.environ.pop(k) for k in ("NAMESRV_ADDR", "rocketmq.namesrv.addr") if k in os.environ}
        try:
            with Broker(root / "broker", f"127.0.0.1:{new.address_port}") as broker:
                yield old, new, broker, list_file
        finally:
            os.environ.update(saved)


def test_clients_follow_a_moved_namesrv_through_the_address_server(
        cluster: tuple[NameServer, NameServer, Broker, Path], reference_cache: Path, module_tmp: ModuleTmp,
        monkeypatch: pytest.MonkeyPatch) -> None:
    old, new, broker, list_file = cluster
    domain = f"127.0.0.1:{new.address_port}"
    monkeypatch.setenv("rocketmq.namesrv.domain", domain)  # TidalMQ's consumer reads the Java property names
    monkeypatch.setenv("rocketmq.namesrv.domain.subgroup", SUBGROUP)
    wait_for(lambda: asyncio.run(_registered(old.namesrv_addr, broker.broker_addr)), 30, 0.2,
             "the broker registered with the NameServer the address server lists")
    asyncio.run(_create(old.namesrv_addr, broker.broker_addr, TOPIC))

    home = module_tmp("moved-client4")
    flag = home / "moved-flag"
    cmd = client4_command(reference_cache, home, "-", ["moved"], run_id=RUN, properties={
        "rocketmq.namesrv.domain": domain, "rocketmq.namesrv.domain.subgroup": SUBGROUP, "j4.movedFlag": str(flag)})
    java = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=home,
                            env={k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR",)})
    java_lines: list[str] = []
    threading.Thread(target=lambda: java_lines.extend(java.stdout or []), daemon=True).start()
    cpp_home = module_tmp("moved-cpp-home")  # the C++ core logs under $HOME/logs/rocketmq-cpp
    cpp = (ClientAgent("moved-cpp", home, lifetime=2 * CPP_FETCH_INTERVAL_S + 240, env={"HOME": str(cpp_home)})
           if OFFICIAL_PYTHON.exists() else None)
    tidal = TidalClients(domain)
    cpp_started = time.monotonic()
    try:
        if cpp is not None:  # the C++ core takes the address server's whole URL as its domain
            cpp.call("producer_start", group=f"CppMovedPG_{RUN}", namesrv_domain=f"http://{domain}/rocketmq/{SUBGROUP}")
            cpp_started = time.monotonic()
            send_acknowledged(cpp, [msg(TOPIC, "cpp-before")])

        def java_received() -> int:
            return sum('"event":"received"' in ln for ln in list(java_lines))

        wait_for(lambda: java_received() >= 3 and len(tidal.got) >= 3, 90, 0.1,
                 "both clients sending and consuming before the move")

        # the move: the list names the new NameServer, the broker registers there, the old one stops
        list_file.write_text(new.namesrv_addr + "\n")
        wait_for(lambda: asyncio.run(_registered(new.namesrv_addr, broker.broker_addr)), 30, 0.2,
                 "the broker registered with the new NameServer")
        old.stop()
        moved = time.time()
        asyncio.run(_create(new.namesrv_addr, broker.broker_addr, AFTER))
        flag.write_text(AFTER)

        assert tidal.send_after(30) > moved
        if cpp is not None:
            # The C++ core asks the address server 120 s after its start and every 120 s on: the send waits
            # for its log to say it took the new list (a failed fetch allowed for), rather than asking the
            # stopped NameServer for a route all along
            changed = f"name server address changed, old: {old.namesrv_addr}, new: {new.namesrv_addr}"
            try:
                wait_for(lambda: changed in _cpp_log(cpp_home), cpp_started + 2 * CPP_FETCH_INTERVAL_S + 30
                         - time.monotonic(), 0.5, "the C++ core to take the new NameServer list")
            except AssertionError as e:
                raise AssertionError(f"{e}; its address-server lines:\n{_cpp_fetch_lines(cpp_home)}") from None
            [result] = send_acknowledged(cpp, [msg(AFTER, "cpp-after")], timeout=30)
            assert result["status"] == "OK"
        java.wait(CLIENT_TIMEOUT)
        assert java.returncode == 0, (java.stderr.read() if java.stderr else "")[-3000:]
        tidal.loop.call_soon_threadsafe(tidal.stop.set)
        tidal.sender.result(30)
        wait_for(lambda: {b for _, b in tidal.sent} <= set(tidal.got), 30, 0.1,
                 "TidalMQ's consumer to receive every acknowledged message")
    finally:
        tidal.close()
        if cpp is not None:
            cpp.close()
        if java.poll() is None:
            java.kill()
            java.wait(10)

    ev: list[Event] = parse_events(java_lines).get("moved", [])
    assert not [e for e in ev if e["event"] == "error"], ev[-5:]
    moved_ms = moved * 1000
    (summary,) = [e for e in ev if e["event"] == "summary"]
    # the Java client asked the address server again and uses the new NameServer alone
    assert summary["afterSent"] is True and summary["namesrv"] == f"[{new.namesrv_addr}]", summary
    (after,) = [e for e in ev if e["event"] == "afterSent"]
    assert after["status"] == "SEND_OK" and after["at"] > moved_ms
    # its sends and consumption went on through the move: none failed, every acknowledged one consumed
    assert not [e for e in ev if e["event"] == "sendFailed"], [e for e in ev if e["event"] == "sendFailed"][:3]
    assert summary["receivedOfSent"] == summary["sent"]
    assert any(e["event"] == "sent" and e["at"] > moved_ms for e in ev)
    assert any(e["event"] == "received" and e["at"] > moved_ms for e in ev)
    # TidalMQ's client likewise
    assert not tidal.errors, tidal.errors[:3]
    assert any(t > moved for t, _ in tidal.sent)
    assert {b for _, b in tidal.sent} <= set(tidal.got)
    assert tidal.instance.namesrv_addrs == [new.namesrv_addr]
