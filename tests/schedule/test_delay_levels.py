"""RocketMQ 4 delay levels end to end over raw remoting, with short levels."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.broker.rawclient import pull_cmd, send_cmd
from tests.support import ModuleTmp, Standalone
from tidalmq.common import fastjson
from tidalmq.common.record import decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

LEVELS = "1s 2s 3s"


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp):
    s = Standalone(module_tmp("delay") / "data",
                   {"messageDelayLevel": LEVELS, "mappedFileSizeCommitLog": str(8 * 1024 * 1024)})
    s.start()
    yield s
    s.stop()


async def pull_first(c: RemotingClient, addr: str, topic: str, qid: int, timeout: float):
    """Long-poll queue ``qid`` from offset 0 until a message arrives; (message, seconds waited)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = await c.invoke(addr, pull_cmd(topic, qid, 0, suspend_ms=1000), 5)
        if r.code == ResponseCode.SUCCESS:
            return decode_record(r.body_bytes()), time.monotonic() - t0
    raise AssertionError(f"nothing arrived in {topic}:{qid} within {timeout}s")


def test_level_two_arrives_after_two_seconds_never_before(broker: Standalone) -> None:
    async def scenario() -> None:
        c = RemotingClient()
        addr = broker.broker_addr
        try:
            props = {"DELAY": "2", "KEYS": "k1", "TAGS": "TagA", "UNIQ_KEY": "C0FFEE" * 5 + "00", "user": "v"}
            sent_at = time.time() * 1000
            r = await c.invoke(addr, send_cmd("DelayT", b"later", queue_id=1, props=props), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            msg, _ = await pull_first(c, addr, "DelayT", 1, 10)
            assert msg.store_timestamp - sent_at >= 2000 - 5, "delivered early"
            assert msg.store_timestamp - sent_at < 3500, "delivered late"
            assert msg.body == b"later" and msg.queue_id == 1
            assert msg.properties["KEYS"] == "k1" and msg.properties["TAGS"] == "TagA"
            assert msg.properties["UNIQ_KEY"] == props["UNIQ_KEY"] and msg.properties["user"] == "v"
            assert "DELAY" not in msg.properties and msg.properties["REAL_TOPIC"] == "DelayT"
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_level_above_maximum_counts_as_maximum_and_bad_levels_are_refused(broker: Standalone) -> None:
    async def scenario() -> None:
        c = RemotingClient()
        addr = broker.broker_addr
        try:
            sent_at = time.time() * 1000
            r = await c.invoke(addr, send_cmd("DelayMax", b"max", props={"DELAY": "99"}), 5)
            assert r.code == ResponseCode.SUCCESS
            for bad in ("abc", "-1", "1.5"):
                r = await c.invoke(addr, send_cmd("DelayMax", b"bad", props={"DELAY": bad}), 5)
                assert r.code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in (r.remark or ""), bad
            msg, _ = await pull_first(c, addr, "DelayMax", 0, 10)
            assert msg.body == b"max"
            assert 3000 - 5 <= msg.store_timestamp - sent_at < 4500
            # Nothing of the refused messages was stored.
            r = await c.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET,
                                                     ext_fields={"topic": "DelayMax", "queueId": "0"}), 5)
            assert r.ext_fields["offset"] == "1"
            r = await c.invoke(addr, RemotingCommand(code=RequestCode.GET_ALL_DELAY_OFFSET), 5)
            assert fastjson.loads(r.body_bytes())["offsetTable"]["3"] >= 1
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
