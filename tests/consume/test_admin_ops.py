"""Operator tools of issue 5 through `mqadmin`, `tidalmq admin dlq list` and the Admin API, with TidalMQ's
own client: dead letters listed and re-sent, rewind applied to a live consumer, query by key and id with
the groups that consumed the message, and the clear answers to bad input."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import pytest

from tests.client.helpers import create_topic, send_sentinels, uniq, wait_until
from tests.mqadmin.support import run_mqadmin
from tests.support import ModuleTmp, Standalone
from tidalmq.client import Admin, ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from tidalmq.client.admin import AdminError
from tidalmq.client.message import MessageQueue

LEVELS = " ".join(["1s"] * 18)


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp):
    s = Standalone(module_tmp("ops") / "data",
                   {"messageDelayLevel": LEVELS, "mappedFileSizeCommitLog": str(16 * 1024 * 1024)})
    s.start()
    yield s
    s.stop()


def run(fn: Callable[[], Awaitable[None]], timeout: float = 60) -> None:
    asyncio.run(asyncio.wait_for(fn(), timeout))


def admin_cli(s: Standalone, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidalmq.cli", "admin", "-n", s.namesrv_addr, *args],
                          capture_output=True, text=True, timeout=60)


def mqadmin(s: Standalone, *args: str) -> subprocess.CompletedProcess[str]:
    return run_mqadmin(s.namesrv_addr, *args)


def test_dead_letters_listed_and_resent(broker: Standalone) -> None:
    ns = broker.namesrv_addr
    topic, group = uniq("DlqOps"), uniq("DlqOpsG")
    seen: list[MessageExt] = []

    async def fail_then_stop() -> None:
        await create_topic(ns, topic, 2)

        async def always_fail(msgs: list[MessageExt]) -> ConsumeResult:
            seen.extend(msgs)
            return ConsumeResult.RECONSUME_LATER

        c = PushConsumer(group, ns, listener=always_fail, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         max_reconsume_times=2)
        c.subscribe(topic)
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            for i in range(3):
                await p.send(Message(topic, f"dead-{i}", keys=f"dk{i}"))
        async with Admin(ns) as admin:
            await wait_until(lambda: len(seen) >= 9, 40, "3 deliveries of each message")

            async def three_letters() -> bool:
                return len(await admin.dead_letters(group)) == 3

            deadline = time.monotonic() + 20
            while not await three_letters():
                assert time.monotonic() < deadline, "dead letters did not arrive"
                await asyncio.sleep(0.1)
        await c.shutdown()

    run(fail_then_stop)
    listed = admin_cli(broker, "dlq", "list", group)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count(topic) == 3 and "dk1" in listed.stdout
    unknown = mqadmin(broker, "resendDlqMessage", "-g", group, "-i", "NOTADEADLETTER")
    assert unknown.returncode == 1 and "not dead letters" in unknown.stderr
    one_id = next(m.msg_id for m in seen if m.keys == ["dk1"])
    resent = mqadmin(broker, "resendDlqMessage", "-g", group, "-i", one_id)
    assert resent.returncode == 0, resent.stderr
    header, *rows = resent.stdout.splitlines()
    assert header.split() == ["#Old", "MsgId", "#New", "MsgId"]
    assert [r.split()[0] for r in rows] == [one_id]

    got: list[MessageExt] = []

    async def consume_again() -> None:
        async def ok(msgs: list[MessageExt]) -> None:
            got.extend(msgs)

        c = PushConsumer(uniq("Fresh"), ns, listener=ok, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        await wait_until(lambda: any(m.keys == ["dk1"] and m.reconsume_times == 0 and m.queue_offset >= 1 for m in got)
                         or sum(1 for m in got if m.keys == ["dk1"]) >= 2, 30, "the re-sent message")
        await c.shutdown()

    run(consume_again)
    dk1 = [m for m in got if m.keys == ["dk1"]]
    assert len(dk1) == 2  # the original and the re-sent copy, same client id, in the original topic
    assert {m.msg_id for m in dk1} == {one_id} and {m.topic for m in dk1} == {topic}


def test_rewind_cli_replays_on_a_live_consumer(broker: Standalone) -> None:
    ns = broker.namesrv_addr
    topic, group = uniq("RewOps"), uniq("RewOpsG")
    got: list[str] = []
    state: dict[str, object] = {}

    async def body() -> None:
        await create_topic(ns, topic, 2)

        async def on(msgs: list[MessageExt]) -> None:
            got.extend(m.body.decode() for m in msgs)

        c = PushConsumer(group, ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        async with Producer(uniq("PG"), ns) as p:
            for i in range(6):
                await p.send(Message(topic, f"old-{i}"))
            await asyncio.sleep(0.05)  # keep the two batches' store timestamps apart
            state["cut"] = int(time.time() * 1000)
            await asyncio.sleep(0.05)
            for i in range(6):
                await p.send(Message(topic, f"new-{i}"))
        await wait_until(lambda: len(got) == 12, 20, "first pass")
        out = await asyncio.to_thread(mqadmin, broker, "resetOffsetByTime", "-g", group, "-t", topic,
                                      "-s", str(state["cut"]))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"rollback consumer offset by specified group[{group}], topic[{topic}]")
        await wait_until(lambda: len(got) >= 18, 30, "the replay")
        async with Producer(uniq("PG"), ns) as p:
            sentinels = {b.decode() for b in await send_sentinels(p, topic)}
        await wait_until(lambda: sentinels <= set(got), 15, "the sentinels")
        await c.shutdown()
        assert sorted(b for b in got[12:] if b not in sentinels) == sorted(f"new-{i}" for i in range(6))

    run(body)
    bad = mqadmin(broker, "resetOffsetByTime", "-g", "NoSuchGroupAtAll", "-t", "NoSuchTopicAtAll", "-s", "now")
    assert bad.returncode == 1 and "CODE: 17" in bad.stderr  # TOPIC_NOT_EXIST: the topic has no route


def test_query_by_key_and_id_with_consumers(broker: Standalone) -> None:
    ns = broker.namesrv_addr
    topic, group = uniq("QOps"), uniq("QOpsG")
    state: dict[str, str] = {}

    async def body() -> None:
        await create_topic(ns, topic, 1)
        async with Producer(uniq("PG"), ns) as p:
            r = await p.send(Message(topic, "order", keys=["order-9", "cust-1"]))
            await p.send(Message(topic, "other", keys="order-10"))
        state["id"] = r.msg_id
        got: list[MessageExt] = []

        async def on(msgs: list[MessageExt]) -> None:
            got.extend(msgs)

        c = PushConsumer(group, ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         persist_offset_interval=0.2)
        c.subscribe(topic)
        await c.start()
        try:
            await wait_until(lambda: len(got) == 2, 20, "consumed")
            async with Admin(ns) as admin:
                with pytest.raises(AdminError) as e:
                    await admin.view_message("00" * 16, topic)
                assert e.value.code == 22
                mq = MessageQueue(topic, got[0].broker_name, 0)
                deadline = time.monotonic() + 20
                while await admin.query_offset(group, mq) < 2:  # committed: the message counts as consumed
                    assert time.monotonic() < deadline, "the offsets were never committed"
                    await asyncio.sleep(0.05)
            # the message tracks of queryMsgByUniqueKey: the group online, past the message
            out = await asyncio.to_thread(mqadmin, broker, "queryMsgByUniqueKey", "-i", state["id"], "-t", topic)
            assert out.returncode == 0, out.stderr
            assert f"MessageTrack [consumerGroup={group}, trackType=CONSUMED, exceptionDesc=null]" in out.stdout
        finally:
            await c.shutdown()

    run(body)
    out = mqadmin(broker, "queryMsgByKey", "-t", topic, "-k", "order-9")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:2] == ["#Message", "ID"]
    assert [r.split()[0] for r in rows] == [state["id"]]
    out = mqadmin(broker, "queryMsgByUniqueKey", "-i", state["id"], "-t", topic)  # the group gone offline
    assert f"MessageTrack [consumerGroup={group}, trackType=NOT_ONLINE" in out.stdout
    out = mqadmin(broker, "queryMsgByKey", "-t", topic, "-k", "nothing-here")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 1  # as RocketMQ's: the header, no row
