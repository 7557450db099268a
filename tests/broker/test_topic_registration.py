"""UPDATE_AND_CREATE_TOPIC is answered once the NameServers know the topic, as RocketMQ answers it (its
AdminBrokerProcessor registers the topic before it replies): a client that creates a topic and sends to
it at once finds the topic's route, not the default topic's with more queues than the topic has."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

from tests.support import free_port
from tidalmq.broker.broker_controller import BrokerController
from tidalmq.broker.config import BrokerConfig
from tidalmq.common import fastjson
from tidalmq.namesrv.server import NameServer
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import Connection, RemotingClient
from tidalmq.store.config import MessageStoreConfig

REGISTER_DELAY_S = 0.5  # how long the NameServer below takes to answer a registration


def _broker(tmp: Path, namesrv_addr: str) -> BrokerController:
    sc = MessageStoreConfig(store_path_root_dir=str(tmp / "store"), mapped_file_size_commit_log=4 * 1024 * 1024)
    bc = BrokerConfig(broker_name="reg-broker", listen_port=0, namesrv_addr=namesrv_addr)
    return BrokerController(bc, sc, host="127.0.0.1")


def _create_topic(topic: str, queues: int) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG"})


def _slow_registrations(ns: NameServer) -> None:
    """The NameServer answers (and applies) every REGISTER_BROKER REGISTER_DELAY_S late."""
    processors = ns.server._processors
    code = int(RequestCode.REGISTER_BROKER)
    real = processors[code]

    async def late(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        await asyncio.sleep(REGISTER_DELAY_S)
        reply = real(conn, cmd)
        return await reply if isinstance(reply, Awaitable) else reply

    processors[code] = late


@contextlib.asynccontextmanager
async def _routed_broker(tmp: Path) -> AsyncIterator[tuple[str, str, RemotingClient]]:
    """(broker address, NameServer address, a client) of a broker registered with a NameServer that answers
    registrations REGISTER_DELAY_S late from now on; all stopped at the end."""
    ns = NameServer("127.0.0.1", 0)
    await ns.start()
    broker = _broker(tmp, f"127.0.0.1:{ns.port}")
    c = RemotingClient()
    try:
        await asyncio.wait_for(broker.start(), 30)
        _slow_registrations(ns)
        yield f"127.0.0.1:{broker.server.port}", f"127.0.0.1:{ns.port}", c
    finally:
        await c.close()
        await asyncio.wait_for(broker.stop(), 30)
        await ns.stop()


async def _route(c: RemotingClient, namesrv: str, topic: str) -> list[dict[str, int]]:
    route = await c.invoke(namesrv, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                    ext_fields={"topic": topic}), 10)
    # not TOPIC_NOT_EXIST, on which a client would fall back to TBW102's route
    assert route.code == ResponseCode.SUCCESS, route.remark
    return fastjson.loads(route.body_bytes())["queueDatas"]


def test_a_created_topic_is_routed_when_its_creation_is_answered(tmp_path: Path) -> None:
    async def go() -> None:
        async with _routed_broker(tmp_path) as (broker, namesrv, c):
            t0 = time.monotonic()
            resp = await c.invoke(broker, _create_topic("FreshTopic", 2), 10)
            took = time.monotonic() - t0
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            queues = await _route(c, namesrv, "FreshTopic")
            assert [(q["readQueueNums"], q["writeQueueNums"]) for q in queues] == [(2, 2)]
            assert took >= REGISTER_DELAY_S * 0.9  # it waited for the NameServer's answer

    asyncio.run(asyncio.wait_for(go(), 60))


def test_a_new_broker_permission_is_routed_when_its_update_is_answered(tmp_path: Path) -> None:
    """UPDATE_BROKER_CONFIG with brokerPermission (the routes carry it): answered once registered too."""
    async def go() -> None:
        async with _routed_broker(tmp_path) as (broker, namesrv, c):
            assert (await c.invoke(broker, _create_topic("PermTopic", 2), 10)).code == ResponseCode.SUCCESS
            resp = await c.invoke(broker, RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG,
                                                          body=b"brokerPermission=4\n"), 10)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert [q["perm"] for q in await _route(c, namesrv, "PermTopic")] == [4]  # read only

    asyncio.run(asyncio.wait_for(go(), 60))


def test_creating_a_topic_is_answered_when_no_name_server_answers(tmp_path: Path) -> None:
    """A NameServer that is down does not hold the answer back (the periodic registration tries again)."""
    async def go() -> None:
        broker = _broker(tmp_path, f"127.0.0.1:{free_port()}")  # nothing listens there
        c = RemotingClient()
        try:
            await asyncio.wait_for(broker.start(), 30)
            resp = await c.invoke(f"127.0.0.1:{broker.server.port}", _create_topic("Unrouted", 2), 10)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert broker.topics.get("Unrouted") is not None
        finally:
            await c.close()
            await asyncio.wait_for(broker.stop(), 30)

    asyncio.run(asyncio.wait_for(go(), 60))
