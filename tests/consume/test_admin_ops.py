"""Operator tools of issue 5 through `tidalmq admin` and the Admin API, with TidalMQ's own client:
dead letters listed and re-sent, rewind applied to a live consumer, query by key and id with the
groups that consumed the message, and the clear answers to bad input."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import pytest

from tests.client.helpers import create_topic, send_sentinels, uniq, wait_until
from tests.support import ModuleTmp, Standalone
from tidalmq.client import Admin, ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from tidalmq.client.admin import AdminError

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
    unknown = admin_cli(broker, "dlq", "resend", group, "NOTADEADLETTER")
    assert unknown.returncode == 1 and "not dead letters" in unknown.stderr
    one_id = next(m.msg_id for m in seen if m.keys == ["dk1"])
    resent = admin_cli(broker, "dlq", "resend", group, one_id)
    assert resent.returncode == 0, resent.stderr
    assert "1 dead letters re-sent" in resent.stdout

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
        out = await asyncio.to_thread(admin_cli, broker, "rewind", group, "-t", topic, "--timestamp", str(state["cut"]))
        assert out.returncode == 0, out.stderr
        await wait_until(lambda: len(got) >= 18, 30, "the replay")
        async with Producer(uniq("PG"), ns) as p:
            sentinels = {b.decode() for b in await send_sentinels(p, topic)}
        await wait_until(lambda: sentinels <= set(got), 15, "the sentinels")
        await c.shutdown()
        assert sorted(b for b in got[12:] if b not in sentinels) == sorted(f"new-{i}" for i in range(6))

    run(body)
    bad = admin_cli(broker, "rewind", "NoSuchGroupAtAll", "--latest")
    assert bad.returncode == 1 and "nothing to rewind" in bad.stderr


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

        c = PushConsumer(group, ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        await wait_until(lambda: len(got) == 2, 20, "consumed")
        await c.shutdown()  # commits the offsets
        async with Admin(ns) as admin:
            with pytest.raises(AdminError) as e:
                await admin.view_message("00" * 16, topic)
            assert e.value.code == 22

    run(body)
    out = admin_cli(broker, "query", "key", topic, "order-9")
    assert out.returncode == 0, out.stderr
    assert "order-9" in out.stdout and "order-10" not in out.stdout
    out = admin_cli(broker, "query", "id", state["id"], "-t", topic)
    assert out.returncode == 0, out.stderr
    assert f"group {group}: consumed" in out.stdout
    out = admin_cli(broker, "query", "key", topic, "nothing-here")
    assert out.returncode == 1 and "no message with key" in out.stderr
