"""SQL92 filtering end to end: a ``tidalmq standalone`` with enablePropertyFilter=true, raw pulls, the
CHECK_CLIENT_CONFIG check, the heartbeat path, and our client's pull and push consumers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.rawclient import pull_cmd, records, run, send_cmd, wait_max_offset
from tests.client.helpers import create_topic, uniq, wait_until
from tests.support import ModuleTmp, Standalone
from tidalmq.client import (
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from tidalmq.client.errors import MQBrokerError, ValidationError
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def sql_standalone(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    with Standalone(module_tmp("sql92") / "data",
                   {"mappedFileSizeCommitLog": str(64 * 1024 * 1024), "enablePropertyFilter": "true"}) as s:  # stopped (SIGTERM) on exit
        yield s



async def fill(c: RemotingClient, addr: str, topic: str, n: int = 20) -> None:
    """n messages in queue 0: a = 0..n-1, TAGS alternating TagA / TagB, ``odd`` only on odd ones."""
    for i in range(n):
        props = {"a": str(i), "TAGS": "TagA" if i % 2 == 0 else "TagB", "UNIQ_KEY": f"u{i}"}
        if i % 2:
            props["odd"] = "yes"
        r = await c.invoke(addr, send_cmd(topic, f"m{i}".encode(), props=props), 5)
        assert r.code == ResponseCode.SUCCESS, r.remark
    await wait_max_offset(c, addr, topic, 0, n)


def check_cmd(expression: str, expression_type: str = "SQL92", topic: str = "T") -> RemotingCommand:
    body = {"clientId": "127.0.0.1@test", "group": "CG",
            "subscriptionData": {"topic": topic, "subString": expression, "expressionType": expression_type,
                                 "subVersion": 1, "tagsSet": [], "codeSet": [], "classFilterMode": False}}
    return RemotingCommand(code=RequestCode.CHECK_CLIENT_CONFIG, body=fastjson.dumpb(body))


def heartbeat_cmd(group: str, topic: str, expression: str, version: int) -> RemotingCommand:
    body = {"clientID": "127.0.0.1@hb", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": expression, "expressionType": "SQL92",
                                 "subVersion": version, "tagsSet": [], "codeSet": [], "classFilterMode": False}],
    }]}
    return RemotingCommand(code=RequestCode.HEART_BEAT, body=fastjson.dumpb(body))


@pytest.mark.parametrize(("expression", "expected"), [
    ("a >= 5 AND a < 10", [5, 6, 7, 8, 9]),
    ("a BETWEEN 3 AND 6 AND TAGS = 'TagB'", [3, 5]),
    ("TAGS IN ('TagA') AND a NOT BETWEEN 2 AND 17", [0, 18]),
    ("odd IS NULL AND a > 15", [16, 18]),
    ("odd IS NOT NULL AND (a < 3 OR a > 16)", [1, 17, 19]),
    ("b = 1", []),  # nothing has b: every comparison is unknown
    ("TRUE", list(range(20))),
])
def test_raw_pull_filters_on_the_broker(sql_standalone: Standalone, expression: str, expected: list[int]) -> None:
    addr = sql_standalone.broker_addr
    topic = uniq("Sql")

    async def scenario() -> None:
        c = RemotingClient()
        try:
            await fill(c, addr, topic)
            got: list[int] = []
            offset = 0
            while offset < 20:
                r = await c.invoke(addr, pull_cmd(topic, 0, offset, sub=expression, expression_type="SQL92",
                                                  max_nums=4), 10)
                if r.code == ResponseCode.SUCCESS:
                    got += [int(m.properties["a"]) for m in records(r.body_bytes())]
                else:
                    assert r.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND), r.remark
                nxt = int(r.ext_fields["nextBeginOffset"])
                assert nxt > offset or r.code == ResponseCode.PULL_NOT_FOUND
                if nxt <= offset:
                    break
                offset = nxt
            assert got == expected  # only matching messages crossed the network
        finally:
            await c.close()

    run(scenario())


def test_invalid_expression_is_refused_with_position(sql_standalone: Standalone) -> None:
    addr = sql_standalone.broker_addr
    topic = uniq("SqlBad")

    async def scenario() -> None:
        c = RemotingClient()
        try:
            await fill(c, addr, topic, 2)
            r = await c.invoke(addr, pull_cmd(topic, 0, 0, sub="a > 'abc'", expression_type="SQL92"), 10)
            assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "position 4" in (r.remark or "") and "cannot be compared" in (r.remark or "")
            r = await c.invoke(addr, check_cmd("a BETWEEN 10 AND 1"), 5)
            assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "position 10" in (r.remark or "") and "less than or equal" in (r.remark or "")
            r = await c.invoke(addr, check_cmd("(a > 1"), 5)
            assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "position 6" in (r.remark or "")
            for ok in (check_cmd("a > 1 AND TAGS IS NOT NULL"), check_cmd("TagA || TagB", "TAG")):
                r = await c.invoke(addr, ok, 5)
                assert r.code == ResponseCode.SUCCESS, r.remark
        finally:
            await c.close()

    run(scenario())


def test_heartbeat_subscription_without_the_pull_flag(sql_standalone: Standalone) -> None:
    """Java push consumers register the expression by heartbeat and pull without it."""
    addr = sql_standalone.broker_addr
    topic, group = uniq("SqlHb"), uniq("HbG")

    async def scenario() -> None:
        c = RemotingClient()
        try:
            await fill(c, addr, topic)
            assert (await c.invoke(addr, heartbeat_cmd(group, topic, "a > 16", 5), 5)).code == ResponseCode.SUCCESS
            r = await c.invoke(addr, pull_cmd(topic, 0, 0, group=group, with_subscription=False, sub_version=5), 10)
            assert r.code == ResponseCode.SUCCESS
            assert [int(m.properties["a"]) for m in records(r.body_bytes())] == [17, 18, 19]
            r = await c.invoke(addr, pull_cmd(topic, 0, 0, group=group, with_subscription=False, sub_version=6), 10)
            assert r.code == ResponseCode.FILTER_DATA_NOT_LATEST
            assert (await c.invoke(addr, heartbeat_cmd(group, topic, "a >", 7), 5)).code == ResponseCode.SUCCESS
            r = await c.invoke(addr, pull_cmd(topic, 0, 0, group=group, with_subscription=False, sub_version=7), 10)
            assert r.code == ResponseCode.FILTER_DATA_NOT_EXIST and "position 3" in (r.remark or "")
        finally:
            await c.close()

    run(scenario())


def test_broker_without_property_filter_refuses_sql92(shared_standalone: Standalone) -> None:
    addr = shared_standalone.broker_addr
    topic = uniq("SqlOff")

    async def scenario() -> None:
        c = RemotingClient()
        try:
            await fill(c, addr, topic, 2)
            r = await c.invoke(addr, pull_cmd(topic, 0, 0, sub="a > 1", expression_type="SQL92"), 10)
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert r.remark == "The broker does not support consumer to filter message by SQL92"
            r = await c.invoke(addr, check_cmd("a > 1"), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (r.remark or "")
            r = await c.invoke(addr, pull_cmd(topic, 0, 0, sub="TagA"), 10)  # tags still work
            assert r.code == ResponseCode.SUCCESS
        finally:
            await c.close()

    run(scenario())


async def produce(ns: str, topic: str, n: int) -> None:
    async with Producer(uniq("PG"), ns) as p:
        for i in range(n):
            await p.send(Message(topic, f"m{i}".encode(), tags="TagA" if i % 3 == 0 else "TagB",
                                 properties={"price": str(i), "region": "eu" if i % 2 else "us"}))


def test_client_pull_consumer_with_sql92(sql_standalone: Standalone) -> None:
    ns = sql_standalone.namesrv_addr
    topic = uniq("SqlPull")

    async def scenario() -> None:
        await create_topic(ns, topic, 1)
        await produce(ns, topic, 30)
        async with PullConsumer(uniq("PullG"), ns) as pc:
            mq = MessageQueue(topic, (await pc.fetch_queues(topic))[0].broker_name, 0)
            deadline = asyncio.get_running_loop().time() + 10
            while (await pc.pull(mq, 0, 32)).max_offset < 30:  # wait for the dispatch
                assert asyncio.get_running_loop().time() < deadline, "messages never dispatched"
                await asyncio.sleep(0.02)
            got: list[int] = []
            offset = 0
            while offset < 30:
                r = await pc.pull(mq, offset, 32, "price > 20 AND region = 'eu'", expression_type="SQL92")
                got += [int(m.properties["price"]) for m in r.messages]
                if r.next_begin_offset <= offset:
                    break
                offset = r.next_begin_offset
            assert got == [21, 23, 25, 27, 29]
            with pytest.raises(MQBrokerError) as info:
                await pc.pull(mq, 0, 32, "price >> 20", expression_type="SQL92")
            assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "position 7" in str(info.value)

    run(scenario())


def test_push_consumer_subscribes_with_sql92(sql_standalone: Standalone, tmp_path: Path) -> None:
    ns = sql_standalone.namesrv_addr
    topic = uniq("SqlPush")

    async def scenario() -> None:
        await create_topic(ns, topic, 2)
        await produce(ns, topic, 60)
        seen: list[MessageExt] = []
        c = PushConsumer(uniq("PushG"), ns, listener=lambda msgs: seen.extend(msgs),
                         consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic, "(TAGS = 'TagA' OR price BETWEEN 50 AND 52) AND region IS NOT NULL",
                    expression_type="SQL92")
        await c.start()
        try:
            expected = sorted({i for i in range(60) if i % 3 == 0} | {50, 51, 52})
            await wait_until(lambda: len(seen) >= len(expected), 30, "the matching messages")
            # A matching marker at the end of each queue: once both arrived, the consumer has pulled past
            # every message stored before them, so one the filter wrongly let through would be in ``seen``.
            async with Producer(uniq("PG"), ns) as p:
                for q in await p.fetch_publish_queues(topic):
                    await p.send(Message(topic, b"marker", tags="TagA", properties={"price": "1000", "region": "eu"}),
                                 queue=q)
            await wait_until(lambda: sum(m.body == b"marker" for m in seen) == 2, 30, "the markers")
            assert sorted(int(m.properties["price"]) for m in seen if m.body != b"marker") == expected
        finally:
            await c.shutdown()

        bad = PushConsumer(uniq("BadG"), ns, listener=lambda msgs: None)
        with pytest.raises(ValidationError):
            bad.subscribe(topic, "a > 1", expression_type="SQL")
        bad.subscribe(topic, "price > 10 AND", expression_type="SQL92")
        with pytest.raises(MQBrokerError) as info:
            await bad.start()  # refused when it subscribes: CHECK_CLIENT_CONFIG before the first heartbeat
        assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "position 14" in str(info.value) and "expected" in str(info.value)
        await bad.shutdown()

    run(scenario())
