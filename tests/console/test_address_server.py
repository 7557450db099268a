"""The console takes its NameServers from a NameServer address server (``rocketmq.namesrv.domain``, issue 44)
and follows the list when it moves, without a restart (docs/console.md, docs/cluster.md)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.console.support import console_process, http, run
from tests.support import Standalone, free_port
from tidalmq.console.server import ConsoleServer
from tidalmq.namesrv.address_server import AddressServer, AddressServerConfig, NamesrvAddressList


async def _get(port: int, path: str = "/") -> str:
    return (await asyncio.to_thread(http, f"http://127.0.0.1:{port}{path}"))[1]


def test_the_console_follows_the_namesrv_list_of_the_address_server(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Two clusters; the address server's file names the first, then the second: the console's cluster
    page shows the first's broker, then the second's."""
    list_file = tmp_path / "nsaddr.txt"
    with Standalone(tmp_path / "a", {"brokerName": "broker-a"}) as a, \
            Standalone(tmp_path / "b", {"brokerName": "broker-b"}) as b:
        list_file.write_text(a.namesrv_addr + "\n")

        async def scenario() -> None:
            config = AddressServerConfig(address_server_port=0, address_server_namesrv_addr_file=str(list_file))
            server = AddressServer("127.0.0.1", config, NamesrvAddressList(config, ["127.0.0.1:1"]))
            await server.start()
            console = ConsoleServer("127.0.0.1", 0, "", namesrv_domain=f"127.0.0.1:{server.port}", fetch_interval=0.2)
            await console.start()
            try:
                page = await _get(console.port)
                assert a.broker_addr in page and b.broker_addr not in page
                list_file.write_text(b.namesrv_addr + "\n")
                deadline = asyncio.get_running_loop().time() + 20
                while b.broker_addr not in (page := await _get(console.port)):
                    assert asyncio.get_running_loop().time() < deadline, "the console never moved to the new list"
                    await asyncio.sleep(0.1)
                assert a.broker_addr not in page
                assert console.admin.namesrv_addrs == [b.namesrv_addr]
                # the address server gone: asked again and unanswered, the last list stays in use
                await server.stop()
                deadline = asyncio.get_running_loop().time() + 20
                while "the NameServer list stays" not in caplog.text:
                    assert asyncio.get_running_loop().time() < deadline, "the address server was never asked again"
                    assert b.broker_addr in await _get(console.port)
                assert b.broker_addr in await _get(console.port)
            finally:
                await console.stop()
                await server.stop()

        run(scenario(), 60)


def test_tidalmq_console_command_asks_the_address_server(tmp_path: Path) -> None:
    """``tidalmq console --namesrv-domain HOST:PORT``: the standalone's own address server names its
    NameServer."""
    address_port = free_port()
    with Standalone(tmp_path / "data", {"addressServerPort": str(address_port)}) as s:
        port = free_port()
        with console_process("--namesrv-domain", f"127.0.0.1:{address_port}", "--port", str(port)) as printed:
            assert re.search(rf"namesrv from http://127\.0\.0\.1:{address_port}/rocketmq/nsaddr", printed)
            status, page = http(f"http://127.0.0.1:{port}/")
            assert status == 200 and s.broker_addr in page
