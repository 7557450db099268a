"""Master/slave replication end to end: a ``tidalmq standalone`` master and a ``tidalmq broker`` slave,
separate processes on loopback ports in temp dirs (docs/replication.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.broker.rawclient import pull_cmd, records, run, send_cmd, wait_max_offset
from tests.ha.support import (
    BROKER_NAME,
    FILE_SIZE,
    Slave,
    commit_log_bytes,
    info,
    master_settings,
    wait_caught_up,
    wait_info,
)
from tests.support import Standalone
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient


async def _send(client: RemotingClient, addr: str, topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    return await client.invoke(addr, send_cmd(topic, body, queue_id=queue_id), 10)


async def _pull_all(client: RemotingClient, addr: str, topic: str, queue_id: int, n: int) -> list[bytes]:
    bodies: list[bytes] = []
    offset = 0
    while len(bodies) < n:
        resp = await client.invoke(addr, pull_cmd(topic, queue_id, offset, max_nums=32), 10)
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        got = records(resp.body_bytes())
        bodies += [bytes(m.body) for m in got]
        offset = int(resp.ext_fields["nextBeginOffset"])
    return bodies


async def _create_topic(client: RemotingClient, addr: str, topic: str) -> None:
    resp = await client.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
        "topic": topic, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}), 5)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def _table(client: RemotingClient, addr: str, code: int, key: str) -> dict[str, object]:
    resp = await client.invoke(addr, RemotingCommand(code=code), 5)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    table: dict[str, object] = fastjson.loads(resp.body_bytes())[key]
    return table


def test_async_master_streams_the_commit_log_byte_for_byte(tmp_path: Path) -> None:
    """ASYNC_MASTER acknowledges at once; the slave's CommitLog becomes the master's, byte for byte,
    across a file end; the slave builds its own ConsumeQueues (pulls served by the slave); the route
    lists both brokers; the slave refuses sends; the master's metadata reaches the slave at its start
    and then within SlaveSynchronize's 10 s period."""
    with Standalone(tmp_path / "m", master_settings("ASYNC_MASTER")) as master:
        run(_with_client(lambda c: _create_topic(c, master.broker_addr, "HaTopic")))
        with Slave(tmp_path / "s", master.namesrv_addr) as slave:
            run(_async_master_scenario(master, slave), 90)


async def _with_client(fn):
    client = RemotingClient()
    try:
        return await fn(client)
    finally:
        await client.close()


async def _async_master_scenario(master: Standalone, slave: Slave) -> None:
    client = RemotingClient()
    try:
        # A delay-level message: once delivered, the master's delay offsets have something to copy.
        delayed = await client.invoke(master.broker_addr, send_cmd("HaTopic", b"later", queue_id=1,
                                                                   props={"DELAY": "1"}), 10)
        assert delayed.code == ResponseCode.SUCCESS
        # ~1.5 files of messages: the stream crosses the master's BLANK at the first file's end.
        bodies = [f"m{i:05d}-".encode() + bytes([i % 251]) * 1500 for i in range(1000)]
        for i in range(0, len(bodies), 50):
            resps = await asyncio.gather(*(_send(client, master.broker_addr, "HaTopic", b)
                                           for b in bodies[i:i + 50]))
            assert all(r.code == ResponseCode.SUCCESS for r in resps)
        end = await wait_caught_up(client, master.broker_addr, slave.broker_addr)
        assert end > FILE_SIZE
        assert commit_log_bytes(slave.data_dir, end) == commit_log_bytes(master.data_dir, end)
        assert await _pull_all(client, slave.broker_addr, "HaTopic", 0, len(bodies)) == bodies

        route = await client.invoke(master.namesrv_addr, RemotingCommand(
            code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "HaTopic"}), 5)
        brokers = fastjson.loads(route.body_bytes())["brokerDatas"]
        addrs = next(b["brokerAddrs"] for b in brokers if b["brokerName"] == BROKER_NAME)
        assert {int(k): v for k, v in addrs.items()} == {0: master.broker_addr, 1: slave.broker_addr}

        refused = await _send(client, slave.broker_addr, "HaTopic", b"to the slave")
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE

        # Metadata made after the slave started: topic, group, consumer offset, delay offsets.
        await _create_topic(client, master.broker_addr, "LaterTopic")
        group = {"groupName": "LaterGroup", "consumeEnable": True, "retryMaxTimes": 3}
        resp = await client.invoke(master.broker_addr, RemotingCommand(
            code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=fastjson.dumpb(group)), 5)
        assert resp.code == ResponseCode.SUCCESS
        resp = await client.invoke(master.broker_addr, RemotingCommand(
            code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
                "consumerGroup": "LaterGroup", "topic": "HaTopic", "queueId": "0", "commitOffset": "77"}), 5)
        assert resp.code == ResponseCode.SUCCESS
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            topics = await _table(client, slave.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable")
            groups = await _table(client, slave.broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
                                  "subscriptionGroupTable")
            offsets = await _table(client, slave.broker_addr, RequestCode.GET_ALL_CONSUMER_OFFSET, "offsetTable")
            if "LaterTopic" in topics and "LaterGroup" in groups and "HaTopic@LaterGroup" in offsets:
                break
            assert asyncio.get_running_loop().time() < deadline, "metadata did not reach the slave in 15 s"
            await asyncio.sleep(0.2)
        assert groups["LaterGroup"]["retryMaxTimes"] == 3  # type: ignore[index]
        assert offsets["HaTopic@LaterGroup"] == {"0": 77}
        master_delay = await _table(client, master.broker_addr, RequestCode.GET_ALL_DELAY_OFFSET, "offsetTable")
        assert master_delay.get("1") == 1, master_delay  # delivered by now (1 s level)
        assert (await _table(client, slave.broker_addr, RequestCode.GET_ALL_DELAY_OFFSET, "offsetTable")) == master_delay
    finally:
        await client.close()


def test_sync_master_acknowledges_only_what_the_slave_has(tmp_path: Path) -> None:
    """SYNC_MASTER: SEND_OK with the slave up (the slave then holds the message); FLUSH_SLAVE_TIMEOUT
    when the slave stalls, also when it is haMaxGapNotInSync behind, and when it is gone (RocketMQ 5's
    GroupTransferService waits in each case, no SLAVE_NOT_AVAILABLE); a restarted slave resumes from its own
    offset (its master named by haMasterAddress this time) and sends are SEND_OK again."""
    settings = master_settings("SYNC_MASTER", syncFlushTimeout="1500", haMaxGapNotInSync=str(64 * 1024))
    with Standalone(tmp_path / "m", settings) as master:
        run(_with_client(lambda c: _create_topic(c, master.broker_addr, "SyncTopic")))
        slave = Slave(tmp_path / "s", master.namesrv_addr).start()
        try:
            async def scenario() -> None:
                client = RemotingClient()
                m, s = master.broker_addr, slave.broker_addr
                try:
                    await wait_info(client, m, "the slave's connection", lambda t: t["haConnections"] == "1")
                    resps = await asyncio.gather(*(_send(client, m, "SyncTopic", f"ok{i}".encode()) for i in range(20)))
                    assert [r.code for r in resps] == [ResponseCode.SUCCESS] * 20
                    # Acknowledged means the slave has it: no waiting for the slave here.
                    acked_end = int((await info(client, m))["commitLogMaxOffset"])
                    assert int((await info(client, s))["commitLogMaxOffset"]) >= acked_end
                    await wait_max_offset(client, s, "SyncTopic", 0, 20)  # the slave's reput, after its CommitLog
                    assert sorted(await _pull_all(client, s, "SyncTopic", 0, 20)) == sorted(
                        f"ok{i}".encode() for i in range(20))

                    slave.pause()
                    try:
                        stalled = await _send(client, m, "SyncTopic", b"stalled")
                        assert stalled.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (stalled.code, stalled.remark)
                        assert stalled.ext_fields.get("msgId")  # stored on the master all the same
                        # More than haMaxGapNotInSync ahead of the stalled slave: waited for all the same.
                        far = await _send(client, m, "SyncTopic", b"x" * (100 * 1024))
                        assert far.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (far.code, far.remark)
                    finally:
                        slave.resume()
                    await wait_caught_up(client, m, s)

                    slave.stop()
                    await wait_info(client, m, "the slave's disconnection", lambda t: t["haConnections"] == "0")
                    alone = await _send(client, m, "SyncTopic", b"alone")
                    assert alone.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (alone.code, alone.remark)

                    # Restarted with its master named by haMasterAddress (the port GET_BROKER_CONFIG shows).
                    conf = await client.invoke(m, RemotingCommand(code=RequestCode.GET_BROKER_CONFIG), 5)
                    ha_port = dict(line.split("=", 1) for line in conf.body_bytes().decode().splitlines())["haListenPort"]
                    slave.settings["haMasterAddress"] = f"localhost:{ha_port}"  # the NameServer says 127.0.0.1
                    slave.start()
                    await wait_info(client, m, "the slave's reconnection", lambda t: t["haConnections"] == "1")
                    assert (await info(client, s))["haMasterAddress"] == f"localhost:{ha_port}"
                    back = await _send(client, m, "SyncTopic", b"back")
                    assert back.code == ResponseCode.SUCCESS, (back.code, back.remark)
                    end = await wait_caught_up(client, m, s)
                    assert commit_log_bytes(slave.data_dir, end) == commit_log_bytes(master.data_dir, end)
                finally:
                    await client.close()

            run(scenario(), 120)
            # The restarted slave asked for the stream from its own offset, not from the start.
            resumed = [line for line in slave.log_tail(400).splitlines() if "connected to master" in line]
            assert int(resumed[-1].rsplit(" ", 1)[1]) > 0
        finally:
            slave.kill()
