"""RocketMQ 5 timer messages (arbitrary delivery time, cancel) end to end over raw remoting."""

from __future__ import annotations

import asyncio
import random
import time
import uuid

import pytest

from tests.broker.rawclient import pull_cmd, runtime_info, send_cmd
from tests.mqadmin.support import run_mqadmin
from tests.schedule.test_timer_rewrite import batch_item
from tests.support import ModuleTmp, Standalone
from tidalmq.client.admin import Admin, AdminError
from tidalmq.common import fastjson
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import StoredMessage, decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

MAX_DELAY_SEC = 3600
PRECISION_MS = 10
SLACK_MS = 400  # how late a delivery may be on a loaded test machine


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp):
    s = Standalone(module_tmp("timer") / "data",
                   {"messageDelayLevel": "1s 2s", "timerPrecisionMs": str(PRECISION_MS),
                    "timerMaxDelaySec": str(MAX_DELAY_SEC), "mappedFileSizeCommitLog": str(8 * 1024 * 1024)})
    s.start()
    yield s
    s.stop()


def uid() -> str:
    return uuid.uuid4().hex.upper()


def now_ms() -> int:
    return int(time.time() * 1000)


def decode_all(body: bytes) -> list[StoredMessage]:
    out, pos = [], 0
    while pos < len(body):
        m = decode_record(body, pos)
        out.append(m)
        pos += m.store_size
    return out


async def pull_until(c: RemotingClient, addr: str, topic: str, qid: int, n: int, timeout: float) -> list[StoredMessage]:
    got: list[StoredMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        r = await c.invoke(addr, pull_cmd(topic, qid, len(got), suspend_ms=500), 5)
        if r.code == ResponseCode.SUCCESS:
            got += decode_all(r.body_bytes())
    return got


async def max_offset(c: RemotingClient, addr: str, topic: str, qid: int = 0) -> int:
    r = await c.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET,
                                             ext_fields={"topic": topic, "queueId": str(qid)}), 5)
    return int(r.ext_fields.get("offset", "0")) if r.code == ResponseCode.SUCCESS else 0


async def offsets_after_sentinels(c: RemotingClient, addr: str, topic: str, timer_before: int) -> tuple[int, int]:
    """After a test's sends: a sentinel timer message (parked for a minute) and a plain one to ``topic``,
    each waited for in its queue; whatever was stored before them is then counted too. Returns the timer
    topic's and ``topic``'s max offsets, the sentinels included."""
    for props in ({"TIMER_DELAY_SEC": "60"}, {}):
        r = await c.invoke(addr, send_cmd(topic, b"sentinel", props=props), 5)
        assert r.code == ResponseCode.SUCCESS, r.remark
    deadline = time.monotonic() + 10
    while (timer := await max_offset(c, addr, TIMER_TOPIC)) <= timer_before or (plain := await max_offset(c, addr, topic)) < 1:
        assert time.monotonic() < deadline, "the sentinels were not stored in 10 s"
        await asyncio.sleep(0.05)
    return timer, plain


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 40))


def test_timer_message_arrives_in_its_window_never_before(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            base = now_ms()
            cases = [("abs", {"TIMER_DELIVER_MS": str(base + 1200)}, base + 1200),
                     ("sec", {"TIMER_DELAY_SEC": "1"}, None),
                     ("ms", {"TIMER_DELAY_MS": "1500"}, None)]
            expect: dict[bytes, int] = {}
            cases_by_body = {name.encode(): props for name, props, _ in cases}
            for name, props, deliver in cases:
                sent = now_ms()
                u = uid()
                r = await c.invoke(addr, send_cmd("TimerT", name.encode(), queue_id=1,
                                                  props={**props, "UNIQ_KEY": u, "KEYS": name, "u": "v"}), 5)
                assert r.code == ResponseCode.SUCCESS, r.remark
                expect[name.encode()] = deliver or sent + (1000 if name == "sec" else 1500)
            got = await pull_until(c, addr, "TimerT", 1, 3, 10)
            assert sorted(m.body for m in got) == sorted(expect)
            for m in got:
                lateness = m.store_timestamp - expect[m.body]
                # "sec"/"ms" are relative to the broker's receipt, a little after ``sent``
                assert lateness >= 0, f"{m.body!r} delivered {-lateness} ms early"
                assert lateness < SLACK_MS + 100, f"{m.body!r} delivered {lateness} ms late"
                assert m.queue_id == 1 and m.properties["REAL_TOPIC"] == "TimerT" and m.properties["u"] == "v"
                # as RocketMQ's timer: TIMER_DELIVER_MS stays, TIMER_OUT_MS is the deliver time; the relative
                # requests go (a client re-sending the message would have it delayed again)
                asked = dict(cases_by_body[m.body])
                assert {k: m.properties.get(k) for k in asked} == (asked if m.body == b"abs" else dict.fromkeys(asked))
                out = int(m.properties["TIMER_OUT_MS"])
                assert out == expect[m.body] if m.body == b"abs" else 0 <= out - expect[m.body] < SLACK_MS
            info = await runtime_info(c, addr)
            assert int(info["timer.early"]) == 0 and int(info["timer.delivered"]) >= 3
        finally:
            await c.close()

    run(scenario())


def test_past_deliver_time_is_immediate(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            past_ms = str(now_ms() - 5000)
            for props in ({"TIMER_DELIVER_MS": past_ms}, {"TIMER_DELAY_MS": "0"}, {"TIMER_DELIVER_MS": "0"}):
                r = await c.invoke(addr, send_cmd("TimerPast", b"now", props=props), 5)
                assert r.code == ResponseCode.SUCCESS, r.remark
            got = await pull_until(c, addr, "TimerPast", 0, 3, 3)
            assert len(got) == 3
            for m in got:  # as RocketMQ's: a past TIMER_DELIVER_MS stays, a relative request goes
                assert "REAL_TOPIC" not in m.properties and "TIMER_DELAY_MS" not in m.properties
            assert sorted(m.properties.get("TIMER_DELIVER_MS", "-") for m in got) == sorted(
                [past_ms, "-", "0"]), [m.properties for m in got]
        finally:
            await c.close()

    run(scenario())


def test_beyond_max_and_bad_values_are_refused_and_nothing_stored(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            before = await max_offset(c, addr, TIMER_TOPIC)
            far = now_ms() + (MAX_DELAY_SEC + 60) * 1000
            r = await c.invoke(addr, send_cmd("TimerBad", b"far", props={"TIMER_DELIVER_MS": str(far)}), 5)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "max delay" in (r.remark or "") and "timerMaxDelaySec" in (r.remark or "")
            r = await c.invoke(addr, send_cmd("TimerBad", b"far", props={"TIMER_DELAY_SEC": str(MAX_DELAY_SEC + 5)}), 5)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL
            for key, bad in (("TIMER_DELIVER_MS", "soon"), ("TIMER_DELAY_SEC", "-3"), ("TIMER_DELAY_MS", "1.5"),
                             ("TIMER_DELAY_MS", ""), ("TIMER_DELIVER_MS", "99999999999999999999999")):
                r = await c.invoke(addr, send_cmd("TimerBad", b"bad", props={key: bad}), 5)
                assert r.code == ResponseCode.MESSAGE_ILLEGAL and key in (r.remark or ""), (key, bad, r.remark)
            assert await offsets_after_sentinels(c, addr, "TimerBad", before) == (before + 1, 1)
        finally:
            await c.close()

    run(scenario())


def test_delay_level_wins_over_timer_properties(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            sent = now_ms()
            r = await c.invoke(addr, send_cmd("TimerDelay", b"lvl", props={
                "DELAY": "1", "TIMER_DELIVER_MS": str(sent + 2500)}), 5)
            assert r.code == ResponseCode.SUCCESS
            got = await pull_until(c, addr, "TimerDelay", 0, 1, 5)
            assert len(got) == 1
            assert 1000 - 5 <= got[0].store_timestamp - sent < 2000, "the delay level (1 s) applies, not the timer"
        finally:
            await c.close()

    run(scenario())


def test_cancel_and_its_answers(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            keep, drop = uid(), uid()
            deliver = now_ms() + 1500
            for u, body in ((keep, b"keep"), (drop, b"drop")):
                r = await c.invoke(addr, send_cmd("TimerCancel", body, props={
                    "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": u}), 5)
                assert r.code == ResponseCode.SUCCESS
            # RocketMQ's form: TIMER_DEL_UNIQKEY = topic + "+" + uniq key, with the target's deliver time
            r = await c.invoke(addr, send_cmd("TimerCancel", b"x", props={
                "TIMER_DEL_UNIQKEY": f"TimerCancel+{drop}", "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": uid()}), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await c.invoke(addr, send_cmd("TimerCancel", b"x", props={"TIMER_DEL_UNIQKEY": drop, "UNIQ_KEY": uid()}), 5)
            assert r.code == ResponseCode.QUERY_NOT_FOUND and "already cancelled" in (r.remark or "")
            r = await c.invoke(addr, send_cmd("TimerCancel", b"x", props={"TIMER_DEL_UNIQKEY": uid()}), 5)
            assert r.code == ResponseCode.QUERY_NOT_FOUND and "no scheduled message" in (r.remark or "")
            r = await c.invoke(addr, send_cmd("TimerCancel", b"x", props={
                "TIMER_DEL_UNIQKEY": keep, "TIMER_DELIVER_MS": str(deliver + 60_000)}), 5)
            assert r.code == ResponseCode.QUERY_NOT_FOUND and f"scheduled at {deliver}" in (r.remark or "")
            r = await c.invoke(addr, send_cmd("TimerCancel", b"x", props={"TIMER_DEL_UNIQKEY": "Other+" + keep}), 5)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL
            got = await pull_until(c, addr, "TimerCancel", 0, 2, 4)
            assert [m.body for m in got] == [b"keep"]
            r = await c.invoke(addr, send_cmd("TimerCancel", b"x", props={"TIMER_DEL_UNIQKEY": keep}), 5)
            assert r.code == ResponseCode.QUERY_NOT_FOUND and "already delivered" in (r.remark or "")
            info = await runtime_info(c, addr)
            assert int(info["timer.cancels"]) >= 1 and info["timer.cancelsTooLate"] == "0"
        finally:
            await c.close()

    run(scenario())


def test_order_by_deliver_time_within_a_queue(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            base = now_ms() + 800
            times = [base + random.randrange(0, 800) for _ in range(40)]
            for i, t in enumerate(times):
                r = await c.invoke(addr, send_cmd("TimerOrder", f"{t}:{i}".encode(), queue_id=2, props={
                    "TIMER_DELIVER_MS": str(t), "UNIQ_KEY": uid()}), 5)
                assert r.code == ResponseCode.SUCCESS
            got = await pull_until(c, addr, "TimerOrder", 2, 40, 8)
            seen = [tuple(int(x) for x in m.body.split(b":")) for m in got]
            assert seen == sorted(seen), "not delivered in deliver-time order"
            assert len(seen) == 40
        finally:
            await c.close()

    run(scenario())


def test_admin_cancel_and_schedule_stats(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            u = uid()
            for props in ({"TIMER_DELAY_SEC": "600", "UNIQ_KEY": u}, {"TIMER_DELAY_SEC": "30", "UNIQ_KEY": uid()},
                          {"DELAY": "2", "UNIQ_KEY": uid()}):
                r = await c.invoke(addr, send_cmd("TimerAdmin", b"later", props=props), 5)
                assert r.code == ResponseCode.SUCCESS
            deadline = time.monotonic() + 10
            while True:  # the timer service counts them once it enqueued them (within its gather bound)
                r = await c.invoke(addr, RemotingCommand(code=RequestCode.GET_TIMER_METRICS), 5)
                t = fastjson.loads(r.body_bytes())["topics"].get("TimerAdmin", {})
                if t.get("timer") == 2 and t.get("delayLevel") == 1:
                    break
                assert time.monotonic() < deadline, f"never counted two timer and one delay-level message: {t}"
                await asyncio.sleep(0.05)
            assert t["histogram"]["minute"] + t["histogram"]["due"] == 2 and t["histogram"]["hour"] == 1
            async with Admin(broker.namesrv_addr) as admin:
                deadline = time.monotonic() + 10
                while not (await admin.route("TimerAdmin")).get("queueDatas"):
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                assert await admin.cancel_scheduled("TimerAdmin", u)
                with pytest.raises(AdminError) as e:
                    await admin.cancel_scheduled("TimerAdmin", u)
                assert e.value.code == ResponseCode.QUERY_NOT_FOUND
            # Runtime info reads the view the timer thread publishes (it never waits on that thread): the
            # cancel shows once the thread enqueued it and published.
            deadline = time.monotonic() + 10
            while (await runtime_info(c, addr)).get("timer.pending.topic.TimerAdmin") != "1":
                assert time.monotonic() < deadline, "the cancel never showed in runtime info"
                await asyncio.sleep(0.05)
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(scenario(), 40))
    out = run_mqadmin(broker.namesrv_addr, "scheduleStats")
    assert out.returncode == 0, out.stderr
    assert "TimerAdmin" in out.stdout and "lateness" in out.stdout
    out = run_mqadmin(broker.namesrv_addr, "cancelScheduledMessage", "-t", "TimerAdmin", "-i", uid())
    assert out.returncode == 1 and "CODE: 22" in out.stderr and "no scheduled message" in out.stderr


def batch_cmd(topic: str, items: list[tuple[bytes, dict[str, str]]], queue_id: int = 0) -> RemotingCommand:
    """SEND_BATCH_MESSAGE (V2 header letters) of ``items`` (body, properties)."""
    body = b"".join(batch_item(b, p) for b, p in items)
    req = send_cmd(topic, body, queue_id=queue_id)
    req.code = RequestCode.SEND_BATCH_MESSAGE
    req.ext_fields["m"] = "true"
    return req


def test_batch_of_timer_messages_each_delivered_at_its_time_never_early(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            base = now_ms()
            asks: list[tuple[bytes, dict[str, str], int | None]] = [
                (b"abs-1400", {"TIMER_DELIVER_MS": str(base + 1400)}, base + 1400),
                (b"ms-600", {"TIMER_DELAY_MS": "600"}, None),
                (b"sec-1", {"TIMER_DELAY_SEC": "1"}, None),
                (b"abs-900", {"TIMER_DELIVER_MS": str(base + 900)}, base + 900),
                (b"past", {"TIMER_DELIVER_MS": str(base - 5000)}, base - 5000),
            ]
            sent = now_ms()
            r = await c.invoke(addr, batch_cmd("TimerBatch", [(b, {**p, "UNIQ_KEY": uid(), "u": "v"}) for b, p, _ in asks],
                                               queue_id=2), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            ids = r.ext_fields["msgId"].split(",")
            assert len(ids) == len(asks)
            expect = {b: d if d is not None else sent + (600 if b == b"ms-600" else 1000) for b, _, d in asks}
            got = await pull_until(c, addr, "TimerBatch", 2, len(asks), 10)
            assert sorted(m.body for m in got) == sorted(expect)
            for m in got:
                lateness = m.store_timestamp - expect[m.body]
                assert lateness >= 0, f"{m.body!r} delivered {-lateness} ms early"
                if m.body != b"past":
                    assert lateness < SLACK_MS + 100, f"{m.body!r} delivered {lateness} ms late"
                    assert m.properties["REAL_TOPIC"] == "TimerBatch"
                    assert "TIMER_OUT_MS" in m.properties  # the timer's delivery keeps it, as RocketMQ's
                assert m.queue_id == 2 and m.properties["u"] == "v"
            # the one due already was stored at once, as it was sent (RocketMQ's rule for a message whose
            # deliver time passed), hence first; the rest in deliver-time order
            assert [m.body for m in got] == [b"past", b"ms-600", b"abs-900", b"sec-1", b"abs-1400"]
            past = got[0]
            assert "TIMER_OUT_MS" not in past.properties and "REAL_TOPIC" not in past.properties
            assert past.properties["TIMER_DELIVER_MS"] == str(base - 5000)
            assert past.store_timestamp - sent < SLACK_MS
            # one answer for the two puts: each message's id in the batch's order (the others' are their
            # parked copies', as for a batch parked whole)
            assert ids[4] == past.msg_id and ids[:4].count(past.msg_id) == 0
            assert all(decode_offset_msg_id(i)[2] > past.commit_log_offset for i in ids[:4])  # appended right after it
        finally:
            await c.close()

    run(scenario())


def test_cancel_finds_a_target_sent_in_a_batch(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            keep, drop = uid(), uid()
            deliver = now_ms() + 1500
            r = await c.invoke(addr, batch_cmd("TimerBatchCancel", [
                (b"keep", {"TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": keep}),
                (b"drop", {"TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": drop})]), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await c.invoke(addr, send_cmd("TimerBatchCancel", b"x", props={
                "TIMER_DEL_UNIQKEY": f"TimerBatchCancel+{drop}", "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": uid()}), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            got = await pull_until(c, addr, "TimerBatchCancel", 0, 2, 4)
            assert [m.body for m in got] == [b"keep"]
        finally:
            await c.close()

    run(scenario())


def test_timer_batch_refusals_store_nothing(broker: Standalone) -> None:
    async def scenario() -> None:
        c, addr = RemotingClient(), broker.broker_addr
        try:
            before = await max_offset(c, addr, TIMER_TOPIC)
            soon = {"TIMER_DELAY_MS": "800"}
            for second, words in (({"KEYS": "plain"}, "cannot share a batch"),
                                  ({"DELAY": "1"}, "DELAY is not supported for batched"),
                                  ({"TIMER_DEL_UNIQKEY": uid()}, "TIMER_DEL_UNIQKEY is not supported for batched"),
                                  ({"TIMER_DELAY_SEC": str(MAX_DELAY_SEC + 5)}, "max delay"),
                                  ({"TIMER_DELIVER_MS": "soon"}, "TIMER_DELIVER_MS must be a whole number")):
                r = await c.invoke(addr, batch_cmd("TimerBatchBad", [(b"a", soon), (b"b", second)]), 5)
                assert r.code == ResponseCode.MESSAGE_ILLEGAL and words in (r.remark or ""), (second, r.remark)
            assert await offsets_after_sentinels(c, addr, "TimerBatchBad", before) == (before + 1, 1)
        finally:
            await c.close()

    run(scenario())


def test_producer_send_batch_with_deliver_times(broker: Standalone) -> None:
    from tests.client.helpers import create_topic
    from tidalmq.client import Message, Producer

    async def scenario() -> None:
        await create_topic(broker.namesrv_addr, "TimerBatchClient", 1)
        c, addr = RemotingClient(), broker.broker_addr
        try:
            async with Producer("TimerBatchPG", broker.namesrv_addr) as p:
                sent = now_ms()
                r = await p.send_batch([Message("TimerBatchClient", b"late", deliver_time_ms=sent + 1200),
                                        Message("TimerBatchClient", b"soon", delay_ms=500),
                                        Message("TimerBatchClient", b"mid", delay_sec=1)])
                assert r.ok and len(r.msg_id.split(",")) == 3
            got = await pull_until(c, addr, "TimerBatchClient", 0, 3, 10)
            assert [m.body for m in got] == [b"soon", b"mid", b"late"]
            for m, at in zip(got, (sent + 500, sent + 1000, sent + 1200), strict=True):
                assert 0 <= m.store_timestamp - at < SLACK_MS + 100, (m.body, m.store_timestamp - at)
        finally:
            await c.close()

    run(scenario())
