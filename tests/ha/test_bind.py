"""Where a master's HA port listens (docs/replication.md, Security): a slave is not authenticated and is
sent the CommitLog, so the port binds the address slaves are told (brokerIP2, else brokerIP1), not every
interface as RocketMQ does, whatever ``--host`` the remoting port binds; ``haListenHost`` names another.

127.0.0.2 is this machine too (Linux routes 127.0.0.0/8 to loopback): a port bound to 127.0.0.1 refuses
a connection there, one bound to every interface accepts it."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ha.support import FILE_SIZE, MAX_MESSAGE_SIZE, Broker, NameServer
from tests.support import ModuleTmp, free_port


class WildcardBroker(Broker):
    """A master whose remoting port binds every interface (``--host 0.0.0.0``), as a deployment's does."""

    def command(self) -> list[str]:
        return [*super().command(), "--host", "0.0.0.0"]


@pytest.fixture(scope="module")
def namesrv(module_tmp: ModuleTmp) -> Iterator[NameServer]:
    with NameServer(module_tmp("ha-bind-ns") / "ns") as ns:
        yield ns


def answers(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex((host, port)) == 0


def master(tmp_path: Path, namesrv: NameServer, **settings: str) -> tuple[WildcardBroker, int]:
    ha_port = free_port()
    b = WildcardBroker(tmp_path / "master", namesrv.namesrv_addr,
                       {"brokerName": "broker-bind", "brokerRole": "ASYNC_MASTER", "haListenPort": str(ha_port),
                        "mappedFileSizeCommitLog": str(FILE_SIZE), "maxMessageSize": str(MAX_MESSAGE_SIZE),
                        "timerWheelEnable": "false", **settings})
    return b, ha_port


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="127.0.0.2 is loopback on Linux")
def test_the_ha_port_binds_the_brokers_own_address_not_every_interface(tmp_path: Path, namesrv: NameServer) -> None:
    b, ha_port = master(tmp_path, namesrv)
    with b:
        assert answers("127.0.0.1", ha_port)  # brokerIP1's default, where slaves are sent
        assert not answers("127.0.0.2", ha_port)
        assert answers("127.0.0.2", b.broker_port)  # the remoting port does bind every interface
        assert f"HA: listening for slaves on 127.0.0.1:{ha_port}" in b.log_tail(200)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="127.0.0.2 is loopback on Linux")
def test_brokerip2_and_ha_listen_host_move_the_ha_port(tmp_path: Path, namesrv: NameServer) -> None:
    b, ha_port = master(tmp_path / "ip2", namesrv, brokerIP2="127.0.0.2")
    with b:  # the replication network's address: slaves are sent there, and only there it listens
        assert answers("127.0.0.2", ha_port) and not answers("127.0.0.1", ha_port)
    b, ha_port = master(tmp_path / "any", namesrv, haListenHost="0.0.0.0")
    with b:  # RocketMQ's binding, asked for
        assert answers("127.0.0.1", ha_port) and answers("127.0.0.2", ha_port)
