"""Client behaviour against a scripted fake NameServer/Broker: retries on another broker, latency-fault
avoidance, send timeout, NameServer failover, and the transaction protocol (half message,
END_TRANSACTION, the broker's CHECK_TRANSACTION_STATE) whose broker side does not exist yet."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.client.fakes import FakeCluster
from tidalmq.client import (
    Message,
    MessageExt,
    MQBrokerError,
    Producer,
    SendTimeoutError,
    TransactionProducer,
    TransactionState,
)
from tidalmq.client.message import now_ms
from tidalmq.common import sysflag as sf
from tidalmq.common.message import decode_properties, encode_properties
from tidalmq.common.record import encode_record
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand

pytestmark = pytest.mark.timeout(30)


def run(fn: Callable[[FakeCluster], Awaitable[None]], brokers: list[str] | None = None) -> None:
    async def go() -> None:
        fake = await FakeCluster(brokers or ["a", "b"]).start()
        try:
            await asyncio.wait_for(fn(fake), 20)
        finally:
            await fake.stop()

    asyncio.run(go())


def test_sync_send_retries_on_another_broker_and_then_avoids_the_bad_one() -> None:
    async def body(fake: FakeCluster) -> None:
        fake.handlers["a"][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.SYSTEM_ERROR, "disk bad")
        async with Producer("PG", fake.namesrv_addr) as p:
            for _ in range(6):
                r = await p.send(Message("T", b"x"))
                assert r.message_queue.broker_name == "b"
            tries_a = len(fake.of_code(RC.SEND_MESSAGE_V2, "a"))
            assert 1 <= tries_a <= 1  # after its first failure, broker a is in the penalty box
            # a non-retriable answer is raised with RocketMQ's code and remark
            fake.handlers["b"][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, "bad")
            with pytest.raises(MQBrokerError) as ei:
                await p.send(Message("T", b"x"))
            assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL and ei.value.remark == "bad"

    run(body)


def test_retries_exhausted_raise_the_last_error() -> None:
    async def body(fake: FakeCluster) -> None:
        for b in ("a", "b"):
            fake.handlers[b][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.SYSTEM_BUSY + 12, "no")
        async with Producer("PG", fake.namesrv_addr, retry_times_when_send_failed=2) as p:
            with pytest.raises(MQBrokerError) as ei:
                await p.send(Message("T", b"x"))
            assert ei.value.code == 14  # SERVICE_NOT_AVAILABLE
            assert len(fake.of_code(RC.SEND_MESSAGE_V2)) == 3  # 1 + retryTimesWhenSendFailed

    run(body)


def test_send_timeout() -> None:
    async def body(fake: FakeCluster) -> None:
        for b in ("a", "b"):
            fake.handlers[b][RC.SEND_MESSAGE_V2] = lambda c, cmd: None  # never answers
        async with Producer("PG", fake.namesrv_addr, send_timeout=0.3) as p:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(SendTimeoutError):
                await p.send(Message("T", b"x"))
            assert loop.time() - t0 < 1.5

    run(body)


def test_namesrv_failover() -> None:
    async def body(fake: FakeCluster) -> None:
        addrs = f"127.0.0.1:1;{fake.namesrv_addr}"
        async with Producer("PG", addrs) as p:
            assert (await p.send(Message("T", b"x"))).ok

    run(body)


def test_compressed_body_goes_with_the_sysflag() -> None:
    async def body(fake: FakeCluster) -> None:
        async with Producer("PG", fake.namesrv_addr) as p:
            await p.send(Message("T", b"z" * 5000))
            await p.send(Message("T", b"z" * 100))
        big, small = fake.of_code(RC.SEND_MESSAGE_V2)
        assert int(big.ext_fields["f"]) & sf.COMPRESSED_FLAG and len(big.body_bytes()) < 200
        assert not int(small.ext_fields["f"]) & sf.COMPRESSED_FLAG and small.body_bytes() == b"z" * 100

    run(body, ["a"])


class Listener:
    def __init__(self, execute: TransactionState | Exception, check: TransactionState) -> None:
        self.execute, self.check = execute, check
        self.executed: list[tuple[Message, Any]] = []
        self.checked: list[MessageExt] = []

    async def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionState:
        self.executed.append((msg, arg))
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    def check_local_transaction(self, msg: MessageExt) -> TransactionState:
        self.checked.append(msg)
        return self.check


def test_transaction_commit_and_rollback_end_transaction() -> None:
    async def body(fake: FakeCluster) -> None:
        lis = Listener(TransactionState.COMMIT, TransactionState.COMMIT)
        async with TransactionProducer("TPG", lis, fake.namesrv_addr) as p:
            r = await p.send_in_transaction(Message("T", b"half", delay_level=3), arg=42)
            assert r.local_state == TransactionState.COMMIT and r.transaction_id == r.msg_id
            lis.execute = TransactionState.ROLLBACK
            r2 = await p.send_in_transaction(Message("T", b"half2"))
            assert r2.local_state == TransactionState.ROLLBACK
            lis.execute = RuntimeError("db down")
            r3 = await p.send_in_transaction(Message("T", b"half3"))
            assert r3.local_state == TransactionState.UNKNOWN
            ends = await fake.wait_for(lambda: len(fake.of_code(RC.END_TRANSACTION)) == 3 and fake.of_code(RC.END_TRANSACTION))
        half = fake.of_code(RC.SEND_MESSAGE_V2)[0]
        props = decode_properties(half.ext_fields["i"])
        assert props["TRAN_MSG"] == "true" and props["PGROUP"] == "TPG" and "DELAY" not in props
        assert int(half.ext_fields["f"]) & sf.TRANSACTION_TYPE_MASK == sf.TRANSACTION_PREPARED_TYPE
        assert lis.executed[0][1] == 42
        assert [e.ext_fields["commitOrRollback"] for e in ends] == [str(sf.TRANSACTION_COMMIT_TYPE),
                                                                   str(sf.TRANSACTION_ROLLBACK_TYPE), "0"]
        e = ends[0]
        assert e.is_oneway and e.ext_fields["producerGroup"] == "TPG" and e.ext_fields["fromTransactionCheck"] == "false"
        assert e.ext_fields["msgId"] == r.msg_id and e.ext_fields["tranStateTableOffset"] == str(r.send_result.queue_offset)
        assert e.ext_fields["commitLogOffset"] == "0" and "db down" in (ends[2].remark or "")

    run(body, ["a"])


def test_transaction_check_from_the_broker_is_answered() -> None:
    async def body(fake: FakeCluster) -> None:
        lis = Listener(TransactionState.UNKNOWN, TransactionState.COMMIT)
        async with TransactionProducer("TPG", lis, fake.namesrv_addr) as p:
            await p.send_in_transaction(Message("T", b"half"))
            conn = fake.connections["a"][0]
            record = encode_record(topic="T", queue_id=0, body=b"half", queue_offset=7, physical_offset=1234,
                                   properties=encode_properties({"UNIQ_KEY": "UK1", "PGROUP": "TPG", "TRAN_MSG": "true"}),
                                   sysflag=sf.TRANSACTION_PREPARED_TYPE)
            check = RemotingCommand(code=RC.CHECK_TRANSACTION_STATE, body=bytes(record), ext_fields={
                "tranStateTableOffset": "7", "commitLogOffset": "1234", "msgId": "UK1", "transactionId": "UK1",
                "offsetMsgId": "X"})
            conn.invoke_oneway(check)
            answer = await fake.wait_for(lambda: [e for e in fake.of_code(RC.END_TRANSACTION)
                                                  if e.ext_fields["fromTransactionCheck"] == "true"])
        a = answer[0].ext_fields
        assert a["commitOrRollback"] == str(sf.TRANSACTION_COMMIT_TYPE) and a["msgId"] == "UK1"
        assert a["transactionId"] == "UK1" and a["tranStateTableOffset"] == "7" and a["commitLogOffset"] == "1234"
        assert a["producerGroup"] == "TPG"
        assert lis.checked[0].body == b"half" and lis.checked[0].properties["UNIQ_KEY"] == "UK1"

    run(body, ["a"])


def test_cancel_marker() -> None:
    """cancel_scheduled: TIMER_DEL_UNIQKEY=<topic>+<uniq key>, the same TIMER_DELIVER_MS, the same broker."""

    async def body(fake: FakeCluster) -> None:
        async with Producer("PG", fake.namesrv_addr) as p:
            at = now_ms() + 60_000
            r = await p.send(Message("T", b"later", deliver_time_ms=at))
            assert r.deliver_time_ms == at
            c = await p.cancel_scheduled(r)
            assert c.ok
        orig, marker = fake.of_code(RC.SEND_MESSAGE_V2)
        props = decode_properties(marker.ext_fields["i"])
        assert props["TIMER_DEL_UNIQKEY"] == f"T+{r.msg_id}" and props["TIMER_DELIVER_MS"] == str(at)
        assert props["UNIQ_KEY"] == r.msg_id
        assert marker.ext_fields["e"] == orig.ext_fields["e"] == str(r.message_queue.queue_id)
        assert decode_properties(orig.ext_fields["i"])["TIMER_DELIVER_MS"] == str(at)

    run(body, ["a", "b"])
