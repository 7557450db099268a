"""Transactional messages against a real ``tidalmq standalone`` (our client; raw requests for bad input).

The broker runs with transactionTimeOut=300 ms, transactionCheckInterval=100 ms, transactionCheckMax=3.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.client.helpers import create_topic, uniq, wait_until
from tests.support import ModuleTmp, Standalone
from tests.transaction.helpers import (
    COMMIT,
    FAST,
    NOT_TYPE,
    ROLLBACK,
    Listener,
    check_round_after,
    checks_received,
    consumer,
    end_transaction,
    markers,
    register,
    runtime_info,
)
from tidalmq.client import (
    Message,
    MQBrokerError,
    Producer,
    PullConsumer,
    TransactionProducer,
    TransactionState,
)
from tidalmq.client.message import MessageQueue
from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.timeout(90)

TIMEOUT_MS = int(FAST["transactionTimeOut"])
INTERVAL_MS = int(FAST["transactionCheckInterval"])


def run(coro_fn: Callable[[], Awaitable[None]], timeout: float = 45) -> None:
    async def go() -> None:
        await asyncio.wait_for(coro_fn(), timeout)

    asyncio.run(go())


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    with Standalone(module_tmp("tx") / "data", FAST) as s:  # stopped (SIGTERM) on exit
        yield s


def half(topic: str, group: str, body: bytes, **props: str) -> Message:
    """A half message sent by a plain producer (what a TransactionProducer sends, without the END)."""
    return Message(topic, body, properties={mc.TRAN_MSG: "true", mc.PGROUP: group, **props})


# ---- the two phases ----------------------------------------------------------------------------

def test_commit_and_rollback(broker: Standalone) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxCR"), uniq("TPG")

    async def body() -> None:
        await create_topic(ns, topic, 2)
        c, got = await consumer(ns, uniq("TxC"), topic)
        listener = Listener(check=TransactionState.UNKNOWN)
        client = RemotingClient()
        async with TransactionProducer(group, listener, ns) as p:
            await register(p, topic)  # a check-back target: an undecided half would be checked
            r1 = await p.send_in_transaction(Message(topic, b"rolled-back", tags="T"), TransactionState.ROLLBACK)
            r2 = await p.send_in_transaction(Message(topic, b"committed", tags="T", keys=["k1"]), TransactionState.COMMIT)
            stored_by = time.time() * 1000
            assert r1.local_state == TransactionState.ROLLBACK and r2.local_state == TransactionState.COMMIT
            # a round after transactionTimeOut would have checked either half, had its decision been lost
            await check_round_after(client, broker.broker_addr, stored_by + TIMEOUT_MS)
            await checks_received(p)
            assert listener.checks == []
            mark = await markers(p, topic, got)
        await c.shutdown()
        assert sorted(got.bodies) == sorted([b"committed", *mark])  # the rolled-back one never, nothing twice
        m = next(m for m in got.msgs if m.body == b"committed")
        assert m.tags == "T" and m.keys == ["k1"] and m.properties[mc.PGROUP] == group
        assert mc.TRAN_MSG not in m.properties and mc.REAL_TOPIC not in m.properties
        assert m.properties[mc.UNIQ_KEY] == r2.send_result.msg_id
        assert m.sysflag & 0xC == COMMIT
        try:
            info = await runtime_info(client, broker.broker_addr)
        finally:
            await client.close()
        assert int(info["transaction.commits"]) >= 1 and int(info["transaction.rollbacks"]) >= 1

    run(body)


def test_half_message_is_invisible_until_commit(broker: Standalone) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxInv"), uniq("TPG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        c, got = await consumer(ns, uniq("TxC"), topic)
        client = RemotingClient()
        try:
            async with Producer(uniq("PG"), ns) as p:
                r = await p.send(half(topic, group, b"half"))
                async with PullConsumer(uniq("PC"), ns) as pc:
                    # the half queue first: once the half message is dispatched there, it would be in the
                    # real topic's queue too were it visible
                    hq = MessageQueue("RMQ_SYS_TRANS_HALF_TOPIC", r.message_queue.broker_name, 0)
                    res = await pc.pull(hq, r.queue_offset)
                    stored = res.messages[0]
                    assert stored.properties[mc.REAL_TOPIC] == topic and stored.properties[mc.REAL_QID] == "0"
                    assert stored.properties[mc.TRANSACTION_ID] == r.msg_id
                    mq = MessageQueue(topic, r.message_queue.broker_name, 0)
                    res = await pc.pull(mq, 0)
                    assert not res.messages
                mark = await markers(p, topic, got)  # sent after the half message: it arrives, the half does not
                assert got.bodies == mark
                resp = await end_transaction(client, broker.broker_addr, group=group, offset_msg_id=r.offset_msg_id,
                                             queue_offset=r.queue_offset, kind=COMMIT)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                await wait_until(lambda: len(got.msgs) > len(mark), 10, "the committed message")
                # the committed message points back at its half message
                assert got.bodies[-1] == b"half" and got.msgs[-1].properties[mc.UNIQ_KEY] == r.msg_id
        finally:
            await client.close()
            await c.shutdown()

    run(body)


# ---- check-back ----------------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [TransactionState.COMMIT, TransactionState.ROLLBACK])
def test_unknown_then_check_back(broker: Standalone, answer: TransactionState) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxChk"), uniq("TPG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        c, got = await consumer(ns, uniq("TxC"), topic)
        listener = Listener(execute=TransactionState.UNKNOWN, check=answer)
        client = RemotingClient()
        async with TransactionProducer(group, listener, ns) as p:
            await register(p, topic)
            t0 = time.monotonic()
            r = await p.send_in_transaction(Message(topic, b"decided-later"), None)
            assert r.local_state == TransactionState.UNKNOWN
            await wait_until(lambda: listener.checks, 10, "a check-back")
            first_seen = time.time() * 1000
            checked_after = listener.checks[0][0] - t0
            msg = listener.checks[0][1]
            assert msg.topic == topic and msg.body == b"decided-later"
            assert msg.properties[mc.TRANSACTION_CHECK_TIMES] == "1"
            assert msg.properties[mc.UNIQ_KEY] == r.send_result.msg_id
            assert 0.25 <= checked_after < 3.0, checked_after  # transactionTimeOut=300ms, interval 100ms
            if answer == TransactionState.COMMIT:
                await wait_until(lambda: got.msgs, 10, "the message committed on check-back")
            # Unanswered, the message would be checked again one interval after the first check; a round
            # three intervals later (time for the answer to reach the broker) shows the answer ended the checks.
            try:
                await check_round_after(client, broker.broker_addr, first_seen + 3 * INTERVAL_MS)
            finally:
                await client.close()
            await checks_received(p)
            assert len(listener.checks) == 1
            mark = await markers(p, topic, got)
        await c.shutdown()
        want = [b"decided-later"] if answer == TransactionState.COMMIT else []
        assert sorted(got.bodies) == sorted(want + mark)

    run(body)


def test_producer_gone_checked_with_another_producer_of_the_group(broker: Standalone) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxGone"), uniq("TPG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        c, got = await consumer(ns, uniq("TxC"), topic)
        first = Listener(execute=TransactionState.UNKNOWN, check=TransactionState.ROLLBACK)
        second = Listener(check=TransactionState.COMMIT)
        other_group = Listener(check=TransactionState.ROLLBACK)
        async with TransactionProducer(group, second, ns) as p2, TransactionProducer(uniq("TPG"), other_group, ns) as p3:
            p = TransactionProducer(group, first, ns)
            await p.start()
            for q in (p, p2, p3):
                await register(q, topic)
            await p.send_in_transaction(Message(topic, b"survives its producer"), None)
            await p.shutdown()  # gone before transactionTimeOut
            await wait_until(lambda: got.msgs, 10, "the message committed by the other producer")
            assert len(second.checks) == 1 and first.checks == [] and other_group.checks == []
        await c.shutdown()
        assert got.bodies == [b"survives its producer"]

    run(body)


def test_check_max_rolls_back_and_records(broker: Standalone) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxMax"), uniq("TPG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        c, got = await consumer(ns, uniq("TxC"), topic)
        client = RemotingClient()
        listener = Listener(execute=TransactionState.UNKNOWN, check=TransactionState.UNKNOWN)
        try:
            before = int((await runtime_info(client, broker.broker_addr))["transaction.discards"])
            async with TransactionProducer(group, listener, ns) as p:
                await register(p, topic)
                r = await p.send_in_transaction(Message(topic, b"never decided"), None)

                async def discarded() -> bool:
                    return int((await runtime_info(client, broker.broker_addr))["transaction.discards"]) > before

                deadline = time.monotonic() + 15
                while not await discarded():
                    assert time.monotonic() < deadline, "never rolled back"
                    await asyncio.sleep(0.05)
                await checks_received(p)  # the third check, sent before the rollback, has reached the listener
                # transactionCheckMax=3: three checks (TRANSACTION_CHECK_TIMES 1, 2, 3), then the rollback
                assert [m.properties[mc.TRANSACTION_CHECK_TIMES] for _, m in listener.checks] == ["1", "2", "3"]
                # a late commit changes nothing
                sr = r.send_result
                resp = await end_transaction(client, broker.broker_addr, group=group, offset_msg_id=sr.offset_msg_id,
                                             queue_offset=sr.queue_offset, kind=COMMIT)
                assert resp.code == ResponseCode.TRANSACTION_FAILED
                assert "rolled back after transactionCheckMax" in (resp.remark or "")
                # the discarded half message is kept in TRANS_CHECK_MAX_TIME_TOPIC (RocketMQ's resolveDiscardMsg)
                async with PullConsumer(uniq("PC"), ns) as pc:
                    mq = MessageQueue("TRANS_CHECK_MAX_TIME_TOPIC", sr.message_queue.broker_name, 0)
                    res = await pc.pull(mq, 0, 1000)
                    mine = [m for m in res.messages if m.properties.get(mc.UNIQ_KEY) == sr.msg_id]
                    assert len(mine) == 1 and mine[0].properties[mc.REAL_TOPIC] == topic
                mark = await markers(p, topic, got)  # stored after the rollback: the discarded message never arrives
            assert got.bodies == mark
        finally:
            await client.close()
            await c.shutdown()

    run(body)


# ---- bad input ---------------------------------------------------------------------------------

def test_end_transaction_bad_input(broker: Standalone) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxBad"), uniq("TPG")
    addr = broker.broker_addr

    async def body() -> None:
        await create_topic(ns, topic, 1)
        c, got = await consumer(ns, uniq("TxC"), topic)
        client = RemotingClient()
        try:
            async with Producer(uniq("PG"), ns) as p:
                r = await p.send(half(topic, group, b"once"))
                plain = await p.send(Message(topic, b"plain"))
                args: dict[str, Any] = dict(group=group, offset_msg_id=r.offset_msg_id, queue_offset=r.queue_offset)
                # no half message there: a plain message, inside a record, past the end
                kws: tuple[dict[str, Any], ...] = (dict(offset_msg_id=plain.offset_msg_id, queue_offset=plain.queue_offset),
                           dict(offset_msg_id=r.offset_msg_id, queue_offset=r.queue_offset, shift=8),
                           dict(offset_msg_id=r.offset_msg_id, queue_offset=r.queue_offset, shift=1 << 40))
                for kw in kws:
                    resp = await end_transaction(client, addr, group=group, kind=COMMIT, **kw)
                    assert resp.code == ResponseCode.SYSTEM_ERROR and "no half message" in (resp.remark or ""), resp.remark
                # the wrong tranStateTableOffset
                resp = await end_transaction(client, addr, **{**args, "queue_offset": r.queue_offset + 7}, kind=COMMIT)
                assert resp.code == ResponseCode.SYSTEM_ERROR and "tranStateTableOffset" in (resp.remark or "")
                # another producer group
                resp = await end_transaction(client, addr, **{**args, "group": "SomebodyElse"}, kind=COMMIT)
                assert resp.code == ResponseCode.TRANSACTION_STATE_GROUP_WRONG
                # garbage
                bad = RemotingCommand(code=RC.END_TRANSACTION, ext_fields={"producerGroup": group})
                resp = await client.invoke(addr, bad, 5)
                # refused where requests enter, naming the missing field as RocketMQ does
                assert resp.code == ResponseCode.SYSTEM_ERROR and "<tranStateTableOffset> is null" in (resp.remark or "")
                resp = await end_transaction(client, addr, **args, kind=5)
                assert resp.code == ResponseCode.SYSTEM_ERROR and "commitOrRollback" in (resp.remark or "")
                # UNKNOW changes nothing
                resp = await end_transaction(client, addr, **args, kind=NOT_TYPE)
                assert resp.code == ResponseCode.SUCCESS and "UNKNOW" in (resp.remark or "")
                assert b"once" not in got.bodies
                # commit, then every later decision is refused and changes nothing
                resp = await end_transaction(client, addr, **args, kind=COMMIT)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                for kind in (COMMIT, ROLLBACK):
                    resp = await end_transaction(client, addr, **args, kind=kind)
                    assert resp.code == ResponseCode.TRANSACTION_FAILED
                    assert "already committed" in (resp.remark or ""), resp.remark
                await wait_until(lambda: len(got.msgs) >= 2, 10, "the plain and the committed message")
                mark = await markers(p, topic, got)  # after every refused decision: none stored a second copy
                assert sorted(got.bodies) == sorted([b"once", b"plain", *mark])
        finally:
            await client.close()
            await c.shutdown()

    run(body)


def test_check_back_answer_from_a_producer_of_another_group_is_refused(broker: Standalone) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxGrp"), uniq("TPG")
    addr = broker.broker_addr

    async def body() -> None:
        await create_topic(ns, topic, 1)
        c, got = await consumer(ns, uniq("TxC"), topic)
        client = RemotingClient()
        try:
            async with Producer(uniq("PG"), ns) as p:
                r = await p.send(half(topic, group, b"mine"))
            # this connection says it is a producer of another group ...
            hb = {"clientID": "127.0.0.1@intruder", "producerDataSet": [{"groupName": "OtherGroup"}],
                  "consumerDataSet": []}
            resp = await client.invoke(addr, RemotingCommand(code=RC.HEART_BEAT, body=fastjson.dumpb(hb)), 5)
            assert resp.code == ResponseCode.SUCCESS
            # ... and answers a check-back about this group's half message, naming this group
            args: dict[str, Any] = dict(group=group, offset_msg_id=r.offset_msg_id, queue_offset=r.queue_offset)
            resp = await end_transaction(client, addr, **args, kind=COMMIT, from_check=True)
            assert resp.code == ResponseCode.TRANSACTION_STATE_GROUP_WRONG
            assert "check-back answer refused" in (resp.remark or "")
            # naming its own group
            resp = await end_transaction(client, addr, **{**args, "group": "OtherGroup"}, kind=COMMIT, from_check=True)
            assert resp.code == ResponseCode.TRANSACTION_STATE_GROUP_WRONG
            # a producer of the right group is answered: SUCCESS shows the refused answers decided nothing
            # (a decided transaction refuses every later decision, test_end_transaction_bad_input)
            client2 = RemotingClient()
            try:
                hb = {"clientID": "127.0.0.1@owner", "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
                await client2.invoke(addr, RemotingCommand(code=RC.HEART_BEAT, body=fastjson.dumpb(hb)), 5)
                resp = await end_transaction(client2, addr, **args, kind=COMMIT, from_check=True)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            finally:
                await client2.close()
            await wait_until(lambda: got.msgs, 10, "the committed message")
            assert got.bodies == [b"mine"]
        finally:
            await client.close()
            await c.shutdown()

    run(body)


# ---- RocketMQ's rules: no schedule, no batch -------------------------------------------------------

def test_delay_inside_a_transaction_is_ignored(broker: Standalone) -> None:
    """RocketMQ: "transactional messages have no schedule support" (its Java client drops the delay level):
    a DELAY or TIMER_* property on a half message is removed; the commit delivers at once."""
    ns, topic, group = broker.namesrv_addr, uniq("TxDelay"), uniq("TPG")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        c, got = await consumer(ns, uniq("TxC"), topic)
        client = RemotingClient()
        try:
            async with Producer(uniq("PG"), ns) as p:
                r1 = await p.send(half(topic, group, b"delay-level", **{mc.DELAY: "4"}))  # 30 s
                r2 = await p.send(half(topic, group, b"timer", **{mc.TIMER_DELAY_SEC: "60"}))
            t0 = time.monotonic()
            for r in (r1, r2):
                resp = await end_transaction(client, broker.broker_addr, group=group, offset_msg_id=r.offset_msg_id,
                                             queue_offset=r.queue_offset, kind=COMMIT)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            await wait_until(lambda: len(got.msgs) == 2, 10, "both committed messages, undelayed")
            assert time.monotonic() - t0 < 5
            for m in got.msgs:
                assert mc.DELAY not in m.properties and mc.TIMER_DELAY_SEC not in m.properties
        finally:
            await client.close()
            await c.shutdown()

    run(body)


def test_half_message_rules(broker: Standalone) -> None:
    ns, topic = broker.namesrv_addr, uniq("TxRules")

    async def body() -> None:
        await create_topic(ns, topic, 1)
        async with Producer(uniq("PG"), ns, retry_times_when_send_failed=0) as p:
            with pytest.raises(MQBrokerError) as e:
                await p.send(Message(topic, b"x", properties={mc.TRAN_MSG: "true"}))  # no PGROUP
            assert e.value.code == ResponseCode.MESSAGE_ILLEGAL and "PGROUP" in str(e.value)
        client = RemotingClient()
        try:
            def send(sysflag: int, props: str, code: int = RC.SEND_MESSAGE) -> RemotingCommand:
                ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                       "queueId": "0", "sysFlag": str(sysflag), "bornTimestamp": "0", "flag": "0",
                       "properties": props, "reconsumeTimes": "0"}
                return RemotingCommand(code=code, ext_fields=ext, body=b"x")

            # the prepared sysflag without TRAN_MSG would be stored but never consumable
            resp = await client.invoke(broker.broker_addr, send(4, ""), 5)
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "TRAN_MSG" in (resp.remark or "")
            # no batch support
            resp = await client.invoke(broker.broker_addr, send(4, "", RC.SEND_BATCH_MESSAGE), 5)
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "batched" in (resp.remark or "")
            # the half topic is the broker's
            resp = await client.invoke(broker.broker_addr, RemotingCommand(
                code=RC.SEND_MESSAGE, ext_fields={**send(0, "").ext_fields, "topic": "RMQ_SYS_TRANS_HALF_TOPIC"},
                body=b"x"), 5)
            assert resp.code == ResponseCode.NO_PERMISSION
        finally:
            await client.close()

    run(body)


def test_many_concurrent_transactions(broker: Standalone) -> None:
    ns, topic, group = broker.namesrv_addr, uniq("TxMany"), uniq("TPG")
    n = 300

    async def body() -> None:
        await create_topic(ns, topic, 4)
        c, got = await consumer(ns, uniq("TxC"), topic)
        async with TransactionProducer(group, Listener(check=TransactionState.ROLLBACK), ns) as p:
            states = [TransactionState.COMMIT if i % 3 else TransactionState.ROLLBACK for i in range(n)]
            await asyncio.gather(*(p.send_in_transaction(Message(topic, str(i).encode()), s)
                                   for i, s in enumerate(states)))
            want = sorted(str(i).encode() for i, s in enumerate(states) if s == TransactionState.COMMIT)
            await wait_until(lambda: len(got.msgs) >= len(want), 20, "every committed message")
            mark = await markers(p, topic, got)  # after all 300 decisions, on their connection
        await c.shutdown()
        assert sorted(got.bodies) == sorted(want + mark)

    run(body)


# ---- crashes -------------------------------------------------------------------------------------

def _crash_broker(tmp_path: Path, interval_ms: int) -> Standalone:
    return Standalone(tmp_path / "data", {**FAST, "transactionCheckMax": "15",
                                          "transactionCheckInterval": str(interval_ms)})


def test_broker_killed_between_half_and_decision(tmp_path: Path) -> None:
    """SIGKILL after the half message is stored, before any decision: after the restart the broker
    checks back and the message is committed exactly once."""
    s = _crash_broker(tmp_path, 100)
    s.start()
    topic, group = uniq("TxKill"), uniq("TPG")
    listener = Listener(execute=TransactionState.UNKNOWN, check=TransactionState.UNKNOWN)
    try:
        async def phase1() -> None:
            await create_topic(s.namesrv_addr, topic, 1)
            async with TransactionProducer(group, listener, s.namesrv_addr) as p:
                await p.send_in_transaction(Message(topic, b"survives the crash"), None)
                s.kill()

        run(phase1)
        s.start()
        listener.check = TransactionState.COMMIT

        async def phase2() -> None:
            c, got = await consumer(s.namesrv_addr, uniq("TxC"), topic)
            client = RemotingClient()
            try:
                async with TransactionProducer(group, listener, s.namesrv_addr) as p:
                    await register(p, topic)
                    await wait_until(lambda: got.msgs, 15, "the message committed after the restart")
                    # a round past the next check's due time: a decision lost again would be checked again
                    await check_round_after(client, s.broker_addr, time.time() * 1000 + 3 * INTERVAL_MS)
                    mark = await markers(p, topic, got)
            finally:
                await client.close()
            await c.shutdown()
            assert got.bodies == [b"survives the crash", *mark]

        run(phase2)
    finally:
        s.kill()


def test_broker_killed_after_decisions_does_not_check_them_again(tmp_path: Path) -> None:
    """SIGKILL after commit and rollback, before the state file caught up (interval 60 s): the op
    messages are replayed at restart, so nothing is checked back and nothing is committed twice."""
    s = _crash_broker(tmp_path, 60000)
    s.start()
    topic, group = uniq("TxKill2"), uniq("TPG")
    listener = Listener(check=TransactionState.COMMIT)
    stored_by = 0.0
    try:
        async def phase1() -> None:
            nonlocal stored_by
            await create_topic(s.namesrv_addr, topic, 1)
            c, got = await consumer(s.namesrv_addr, uniq("TxC"), topic)
            async with TransactionProducer(group, listener, s.namesrv_addr) as p:
                await p.send_in_transaction(Message(topic, b"committed"), TransactionState.COMMIT)
                await p.send_in_transaction(Message(topic, b"rolled back"), TransactionState.ROLLBACK)
                stored_by = time.time() * 1000
                await wait_until(lambda: got.msgs, 10, "the committed message")
                s.kill()
            await c.shutdown()

        run(phase1)
        s.settings["transactionCheckInterval"] = "100"
        s.start()

        async def phase2() -> None:
            c, got = await consumer(s.namesrv_addr, uniq("TxC2"), topic)
            client = RemotingClient()
            try:
                async with TransactionProducer(group, listener, s.namesrv_addr) as p:
                    await register(p, topic)
                    # Both halves are long due: a round one interval after the producer registered would
                    # check either one whose decision the restart forgot (an earlier check found no producer).
                    due = max(stored_by + TIMEOUT_MS, time.time() * 1000 + INTERVAL_MS)
                    await check_round_after(client, s.broker_addr, due)
                    await checks_received(p)
                    assert listener.checks == []
                    await wait_until(lambda: got.msgs, 10, "the committed message, from the start")
                    mark = await markers(p, topic, got)
            finally:
                await client.close()
            await c.shutdown()
            assert got.bodies == [b"committed", *mark]

        run(phase2)
    finally:
        s.kill()
