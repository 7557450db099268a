"""The official 4.x client (``rocketmq==0.4.4``, C++ core) against a SYNC_MASTER / SLAVE pair behind
their own NameServer: every message the producer had acknowledged is consumed from the slave after the
master is SIGKILLed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.harness import require_official_client

require_official_client()

from tests.broker.rawclient import run  # noqa: E402
from tests.compat.conftest import Agents  # noqa: E402
from tests.compat.harness import by_key, msg, uniq, wait_route  # noqa: E402
from tests.ha.support import NameServer, Slave, wait_info  # noqa: E402
from tidalmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from tidalmq.remoting.command import RemotingCommand  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402


class Master(Slave):
    def __init__(self, data_dir: Path, namesrv_addr: str) -> None:
        super().__init__(data_dir, namesrv_addr, {"brokerRole": "SYNC_MASTER", "brokerId": "0", "haListenPort": "0"})


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    ag = Agents(tmp_path)
    try:
        yield ag
    finally:
        ag.close_all()


async def _create_topic(addr: str, topic: str) -> None:
    client = RemotingClient()
    try:
        resp = await client.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": topic, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}), 5)
        assert resp.code == ResponseCode.SUCCESS
    finally:
        await client.close()


async def _wait_slave_connected(master: str) -> None:
    client = RemotingClient()
    try:
        await wait_info(client, master, "the slave's connection", lambda t: t["haConnections"] == "1")
    finally:
        await client.close()


def test_consumer_reads_every_acknowledged_message_from_the_slave_after_the_master_dies(
        tmp_path: Path, agents: Agents) -> None:
    topic = uniq("HaFailover")
    with NameServer(tmp_path / "ns") as ns:
        master = Master(tmp_path / "m", ns.namesrv_addr).start()
        try:
            run(_create_topic(master.broker_addr, topic))
            with Slave(tmp_path / "s", ns.namesrv_addr) as slave:
                run(_wait_slave_connected(master.broker_addr))
                wait_route(ns.namesrv_addr, topic)
                p = agents.new("producer")
                p.call("producer_start", group=uniq("PG"), namesrv=ns.namesrv_addr)
                sent = p.call("send", mode="sync", messages=[msg(topic, f"m{i}", keys=f"k{i}") for i in range(40)])
                acked = {f"k{i}" for i, r in enumerate(sent) if r is not None and r["status"] == "OK"}
                assert len(acked) == 40, sent[:3]

                master.kill()  # SIGKILL: the NameServer sees its connection drop and routes to the slave only
                c = agents.new("consumer")
                c.call("consumer_start", cid="c1", group=uniq("CG"), topic=topic, namesrv=ns.namesrv_addr,
                       expr="*", model="CLUSTERING", props=[], orderly=False)
                got = c.wait_messages(lambda ms: acked <= {m["keys"] for m in ms}, 60,
                                      "every acknowledged message, from the slave")
                assert acked <= set(by_key(got))
                assert slave.proc is not None and slave.proc.poll() is None
        finally:
            master.kill()
