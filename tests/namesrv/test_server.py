"""The NameServer over a real socket: registration, route, KV config persisted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tidalmq.common import fastjson
from tidalmq.namesrv.server import NameServer
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient


def register_cmd(body: bytes) -> RemotingCommand:
    import zlib

    return RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields={
        "brokerName": "b1", "brokerAddr": "127.0.0.1:10911", "clusterName": "C", "haServerAddr": "",
        "brokerId": "0", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}, body=body)


async def scenario(tmp: Path) -> None:
    ns = NameServer("127.0.0.1", 0, kv_config_path=tmp / "kv.json")
    await ns.start()
    client = RemotingClient()
    addr = f"127.0.0.1:{ns.port}"
    try:
        body = fastjson.dumpb({"topicConfigSerializeWrapper": {"topicConfigTable": {
            "T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}, "dataVersion": {}}})
        resp = await client.invoke(addr, register_cmd(body), 3)
        assert resp.code == ResponseCode.SUCCESS
        bad = register_cmd(body)
        bad.ext_fields["bodyCrc32"] = "1"
        assert (await client.invoke(addr, bad, 3)).code == ResponseCode.SYSTEM_ERROR
        resp = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T"}), 3)
        assert resp.code == ResponseCode.SUCCESS
        assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in resp.body_bytes()
        resp = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "X"}), 3)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "X" in (resp.remark or "")
        resp = await client.invoke(addr, RemotingCommand(code=RequestCode.PUT_KV_CONFIG, ext_fields={
            "namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "b1:4"}), 3)
        assert resp.code == ResponseCode.SUCCESS
        resp = await client.invoke(addr, RemotingCommand(code=9999), 3)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        await client.close()
        await ns.stop()
    # KV config survives a restart.
    ns2 = NameServer("127.0.0.1", 0, kv_config_path=tmp / "kv.json")
    await ns2.start()
    try:
        assert ns2.routes.get_kv("ORDER_TOPIC_CONFIG", "T") == "b1:4"
    finally:
        await ns2.stop()


def test_namesrv_over_socket(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(scenario(tmp_path), 20))
