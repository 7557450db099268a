"""RocketMQ 5 message types against a real ``tidalmq standalone``: topic attributes through
UPDATE_AND_CREATE_TOPIC (persisted, answered by GET_TOPIC_CONFIG / GET_ALL_TOPIC_CONFIG), the message type
check on send (enableTopicMessageTypeCheck), recall of a scheduled message (RECALL_MESSAGE), FIFO message
groups kept in order by an orderly pop."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.client.helpers import uniq
from tests.mqadmin.support import run_mqadmin
from tests.support import ModuleTmp, Standalone
from tidalmq.client import (
    Admin,
    AdminError,
    Message,
    MessageExt,
    MQBrokerError,
    PopConsumer,
    Producer,
    PullConsumer,
    TransactionProducer,
    TransactionState,
)
from tidalmq.common import fastjson
from tidalmq.common.recall_handle import RecallHandle, decode_recall_handle
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.timeout(120)

SMALL = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}
CHECKED = {**SMALL, "enableTopicMessageTypeCheck": "true", "recallMessageEnable": "true"}


def run(coro_fn: Callable[[], Awaitable[None]], timeout: float = 90) -> None:
    async def go() -> None:
        await asyncio.wait_for(coro_fn(), timeout)

    asyncio.run(go())


@pytest.fixture(scope="module")
def checked(module_tmp: ModuleTmp) -> Any:
    """A broker that checks message types and accepts recalls."""
    with Standalone(module_tmp("msgtypes") / "data", CHECKED) as s:
        yield s


async def make_topic(admin: Admin, topic: str, attributes: str | None, queues: int = 4) -> None:
    """Create ``topic`` and wait until the NameServer routes it."""
    await admin.create_topic(topic, queues, attributes=attributes)
    deadline = time.monotonic() + 15
    while True:
        try:
            if (await admin.route(topic)).get("queueDatas"):
                return
        except AdminError as e:
            if e.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
        assert time.monotonic() < deadline, f"the NameServer never routed {topic}"
        await asyncio.sleep(0.05)


async def attributes_of(admin: Admin, topic: str) -> dict[str, str]:
    [cfg] = (await admin.topic_config(topic)).values()
    return cfg["topicConfig"]["attributes"] if "topicConfig" in cfg else cfg["attributes"]


async def stored(admin: Admin, topic: str) -> int:
    return sum(q.max_offset for q in await admin.topic_status(topic))


def test_attributes_checked_persisted_and_answered(tmp_path: Path) -> None:
    topic = uniq("AttrTopic")
    s = Standalone(tmp_path / "data", SMALL).start()
    try:
        async def first_boot() -> None:
            async with Admin(s.namesrv_addr) as admin:
                await make_topic(admin, topic, "+message.type=DELAY")
                assert await attributes_of(admin, topic) == {"message.type": "DELAY"}
                c = RemotingClient()
                try:
                    r = await c.invoke(s.broker_addr, RemotingCommand(code=RC.GET_ALL_TOPIC_CONFIG), 5)
                    assert fastjson.loads(r.body_bytes())["topicConfigTable"][topic]["attributes"] == {"message.type": "DELAY"}
                finally:
                    await c.close()
                refusals = [("+queue.type=SimpleCQ", ResponseCode.SYSTEM_ERROR, "attempt to update an unchangeable attribute"),
                            ("+message.type=MIXED", ResponseCode.INVALID_PARAMETER, "MIXED message type is not supported."),
                            ("message.type=FIFO", ResponseCode.SYSTEM_ERROR, "add/alter attribute format is wrong"),
                            ("+message.type=URGENT", ResponseCode.SYSTEM_ERROR, "value is not in set"),
                            ("-reserve.time", ResponseCode.SYSTEM_ERROR, "attempt to delete a nonexistent key")]
                for text, code, remark in refusals:
                    with pytest.raises(AdminError) as e:
                        await admin.create_topic(topic, 4, attributes=text)
                    assert e.value.code == code and remark in str(e.value)
                assert await attributes_of(admin, topic) == {"message.type": "DELAY"}
            async with Producer(uniq("PG"), s.namesrv_addr) as p:
                # The check is off by default (RocketMQ's broker has none): a plain message to a DELAY topic is stored.
                assert (await p.send(Message(topic, b"plain"))).ok
                later = await p.send(Message(topic, b"later", delay_sec=600))
                assert later.recall_handle is not None  # attached as RocketMQ does, whether or not recall is enabled
                with pytest.raises(MQBrokerError) as refused:
                    await p.recall(topic, later.recall_handle)
                assert refused.value.code == ResponseCode.NO_PERMISSION
                assert "recall failed, operation is forbidden" in str(refused.value)

        run(first_boot)
        s.stop()
        on_disk = json.loads((next(tmp_path.glob("data/**/topics.json"))).read_text())
        assert on_disk["topicConfigTable"][topic]["attributes"] == {"message.type": "DELAY"}
        s = Standalone(tmp_path / "data", CHECKED)
        s.start()

        async def second_boot() -> None:
            async with Admin(s.namesrv_addr) as admin:
                assert await attributes_of(admin, topic) == {"message.type": "DELAY"}
                await admin.create_topic(topic, 4, attributes="+message.type=FIFO")
                assert await attributes_of(admin, topic) == {"message.type": "FIFO"}
                await admin.create_topic(topic, 4)  # an update without attributes keeps them
                assert await attributes_of(admin, topic) == {"message.type": "FIFO"}
                await admin.create_topic(topic, 4, attributes="-message.type")
                assert await attributes_of(admin, topic) == {}

        run(second_boot)
    finally:
        s.stop()


def test_type_check_refuses_each_mismatch_and_stores_nothing(checked: Standalone) -> None:
    ns = checked.namesrv_addr
    kinds = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
    topics = {k: uniq(f"Type{k}") for k in kinds}
    unset = uniq("TypeUnset")  # no message.type: NORMAL, as RocketMQ

    class Commit:
        def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionState:
            return TransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> TransactionState:
            return TransactionState.COMMIT

    async def body() -> None:
        async with Admin(ns) as admin:
            for k, t in topics.items():
                await make_topic(admin, t, f"+message.type={k}")
            await make_topic(admin, unset, None)
            producer = Producer(uniq("PG"), ns, retry_times_when_send_failed=0)
            tx = TransactionProducer(uniq("TG"), Commit(), ns)
            await producer.start()
            await tx.start()
            try:
                async def send(kind: str, topic: str) -> None:
                    if kind == "TRANSACTION":
                        await tx.send_in_transaction(Message(topic, b"tx"))
                    elif kind == "FIFO":
                        await producer.send(Message(topic, b"fifo", message_group="g1"))
                    elif kind == "DELAY":
                        await producer.send(Message(topic, b"delay", delay_sec=3600))
                    else:
                        await producer.send(Message(topic, b"normal"))

                for topic_type, topic in [*topics.items(), ("NORMAL", unset)]:
                    for kind in kinds:
                        if kind == topic_type:
                            await send(kind, topic)
                            continue
                        with pytest.raises(MQBrokerError) as e:
                            await send(kind, topic)
                        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
                        assert (f"TopicMessageType validate failed, the expected type is {topic_type}, but actual "
                                f"type is {kind}") in str(e.value)
                # RocketMQ 4 delay levels are DELAY messages too.
                with pytest.raises(MQBrokerError):
                    await producer.send(Message(topics["NORMAL"], b"level", delay_level=2))
                # Batches: every message of one is checked.
                await producer.send_batch([Message(topics["DELAY"], b"d", delay_sec=3600) for _ in range(3)])
                await producer.send_batch([Message(topics["NORMAL"], b"n") for _ in range(3)])
                with pytest.raises(MQBrokerError) as e:
                    await producer.send_batch([Message(topics["DELAY"], b"n") for _ in range(2)])
                assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
            finally:
                await producer.shutdown()
                await tx.shutdown()
            # Only the accepted messages are in their topics (delayed ones wait in the timer for an hour).
            expected = {"NORMAL": 1 + 3, "FIFO": 1, "DELAY": 0, "TRANSACTION": 1}
            for k, t in topics.items():
                assert await stored(admin, t) == expected[k], k
            assert await stored(admin, unset) == 1

    run(body)


def test_cli_creates_a_topic_with_attributes(checked: Standalone) -> None:
    topic = uniq("CliAttr")
    out = run_mqadmin(checked.namesrv_addr, "updateTopic", "-b", checked.broker_addr, "-t", topic,
                      "-a", "message.type=TRANSACTION")
    assert out.returncode == 0, out.stderr

    async def body() -> None:
        async with Admin(checked.namesrv_addr) as admin:
            assert await attributes_of(admin, topic) == {"message.type": "TRANSACTION"}

    run(body)


async def pull_all(ns: str, topic: str, until: Callable[[list[MessageExt]], bool], timeout: float) -> list[MessageExt]:
    """Everything in ``topic``'s queues, pulled again until ``until`` holds (or fail after ``timeout``)."""
    async with PullConsumer(uniq("CG"), ns) as c:
        deadline = time.monotonic() + timeout
        while True:
            got: list[MessageExt] = []
            for mq in await c.fetch_queues(topic):
                got += (await c.pull(mq, 0, 32)).messages
            if until(got):
                return got
            assert time.monotonic() < deadline, f"gave up waiting; got {[m.body for m in got]}"
            await asyncio.sleep(0.1)


def test_recall_before_and_after_delivery(checked: Standalone) -> None:
    ns = checked.namesrv_addr
    topic, other, normal = uniq("Recall"), uniq("RecallOther"), uniq("RecallNormal")

    async def body() -> None:
        async with Admin(ns) as admin:
            await make_topic(admin, topic, "+message.type=DELAY")
            await make_topic(admin, other, "+message.type=DELAY")
            await make_topic(admin, normal, None)
        async with Producer(uniq("PG"), ns) as p:
            deliver = int(time.time() * 1000) + 2500
            recalled = await p.send(Message(topic, b"recalled", deliver_time_ms=deliver))
            control = await p.send(Message(topic, b"control", deliver_time_ms=deliver))
            assert recalled.recall_handle is not None
            h = decode_recall_handle(recalled.recall_handle)
            assert (h.topic, h.deliver_ms, h.message_id) == (topic, deliver, recalled.msg_id)
            assert await p.recall(topic, recalled.recall_handle) == recalled.msg_id
            with pytest.raises(MQBrokerError) as e:
                await p.recall(topic, recalled.recall_handle)
            assert e.value.code == ResponseCode.QUERY_NOT_FOUND and "already cancelled" in str(e.value)
            # The control message, due at the same time, arrives; the recalled one never does.
            got = await pull_all(ns, topic, lambda ms: any(m.body == b"control" for m in ms), 20)
            assert [m.body for m in got] == [b"control"]
            with pytest.raises(MQBrokerError) as e:
                await p.recall(topic, control.recall_handle or "")
            assert e.value.code == ResponseCode.ILLEGAL_OPERATION and "recall failed, timestamp invalid" in str(e.value)
            assert (await p.send(Message(topic, b"now", deliver_time_ms=1))).recall_handle is None  # due already: not scheduled
        c = RemotingClient()
        try:
            async def recall(t: str, handle: str) -> RemotingCommand:
                return await c.invoke(checked.broker_addr, RemotingCommand(code=RC.RECALL_MESSAGE, ext_fields={
                    "topic": t, "recallHandle": handle, "producerGroup": "PG"}), 5)

            later = RecallHandle(topic, h.broker_name, str(int(time.time() * 1000) + 60_000), "00FF").encode()
            cases = [(topic, "garbage", ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
                     (other, later, ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match"),
                     (topic, RecallHandle(topic, "no-such-broker", h.timestamp, "00FF").encode(),
                      ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available"),
                     (topic, later, ResponseCode.QUERY_NOT_FOUND, "no scheduled message"),
                     (normal, later, ResponseCode.MESSAGE_ILLEGAL, "the expected type is NORMAL, but actual type is DELAY"),
                     (uniq("Absent"), later, ResponseCode.TOPIC_NOT_EXIST, "not exist")]
            for t, handle, code, remark in cases:
                r = await recall(t, handle)
                assert (r.code, remark in (r.remark or "")) == (code, True), (t, r.code, r.remark)
        finally:
            await c.close()

    run(body)


def test_fifo_groups_stay_in_order_end_to_end(checked: Standalone) -> None:
    ns = checked.namesrv_addr
    topic = uniq("Fifo")
    groups = [f"order-{i}" for i in range(6)]
    per_group = 8

    async def body() -> None:
        async with Admin(ns) as admin:
            await make_topic(admin, topic, "+message.type=FIFO", queues=4)
        queues: dict[str, set[int]] = {g: set() for g in groups}
        async with Producer(uniq("PG"), ns) as p:
            for i in range(per_group):
                for g in groups:
                    r = await p.send(Message(topic, f"{g}:{i}".encode(), message_group=g))
                    queues[g].add(r.message_queue.queue_id)
        assert all(len(q) == 1 for q in queues.values()), queues  # one queue per group
        seen: dict[str, list[int]] = {g: [] for g in groups}
        async with PopConsumer(uniq("CG"), ns) as c:
            deadline = time.monotonic() + 30
            total = 0
            while total < len(groups) * per_group:
                assert time.monotonic() < deadline, seen
                got = await c.receive(topic, 4, invisible_time=20, order=True, block_timeout=1.0)
                for m in got:
                    g, n = m.body.decode().split(":")
                    seen[g].append(int(n))
                    total += 1
                await c.ack_many(got)
        assert seen == {g: list(range(per_group)) for g in groups}

    run(body)


def test_lite_messages_over_remoting(tmp_path: Path) -> None:
    """A remoting client sends a lite message by setting ``__LITE_TOPIC`` (docs/grpc.md, "Lite topics"):
    stored once, popped from its LMQ ``%LMQ%$<topic>$<lite>`` with queue id 0 and the LMQ's offset, acked
    there. With enableTopicMessageTypeCheck off, a lite message to a NORMAL topic and an illegal lite
    topic name are still refused (MESSAGE_ILLEGAL)."""
    s = Standalone(tmp_path / "data", SMALL).start()
    try:
        async def go() -> None:
            lite_parent, normal = uniq("LiteParent"), uniq("Plain")
            async with Admin(s.namesrv_addr) as admin:
                await make_topic(admin, lite_parent, "+message.type=LITE", queues=2)
                await make_topic(admin, normal, None, queues=1)
            async with Producer(uniq("PG"), s.namesrv_addr) as p:
                with pytest.raises(MQBrokerError) as e:
                    await p.send(Message(normal, b"x", properties={"__LITE_TOPIC": "lt"}))
                assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
                assert "expected type is NORMAL, but actual type is LITE" in str(e.value)
                with pytest.raises(MQBrokerError) as e:
                    await p.send(Message(lite_parent, b"x", properties={"__LITE_TOPIC": "a.b"}))
                assert e.value.code == ResponseCode.MESSAGE_ILLEGAL and "illegal lite topic" in str(e.value)
                for i in range(3):
                    assert (await p.send(Message(lite_parent, b"m%d" % i, properties={"__LITE_TOPIC": "lt"}))).ok
                assert (await p.send(Message(lite_parent, b"other", properties={"__LITE_TOPIC": "lt2"}))).ok
            lmq = f"%LMQ%${lite_parent}$lt"
            async with PopConsumer(uniq("CG"), s.namesrv_addr) as c:
                got: list[MessageExt] = []
                deadline = time.monotonic() + 15
                while len(got) < 3 and time.monotonic() < deadline:
                    got += await c.receive(lmq, 32, 30, block_timeout=1, route_topic=lite_parent)
                assert [(m.body, m.topic, m.queue_id) for m in got] == [(b"m%d" % i, lmq, 0) for i in range(3)]
                assert sorted(m.queue_offset for m in got) == [0, 1, 2]
                await c.ack_many(got[:1])
                for m in got[1:]:
                    await c.ack(m)
                assert await c.receive(lmq, 32, 30, route_topic=lite_parent) == []
            async with Admin(s.namesrv_addr) as admin:
                assert await stored(admin, lite_parent) == 4  # the parent's queues hold every lite message

        run(go)
    finally:
        s.stop()


def test_priority_messages_stored_by_priority_and_popped_highest_first(checked: Standalone) -> None:
    """RocketMQ 5.4's priority over remoting (tidalmq.client's ``Message(priority=...)``): on a PRIORITY topic
    of four queues a message goes to queue min(priority, 3), whatever queue the producer picked, and the
    broker answers that queue; a pop reads the highest queue first; a FIFO message loses its priority
    (its message group makes it FIFO) and keeps its group's queue; a priority on a NORMAL topic is refused
    by the type check."""
    ns = checked.namesrv_addr
    topic, fifo_topic, normal_topic = uniq("Prio"), uniq("PrioFifo"), uniq("PrioNormal")

    async def body() -> None:
        async with Admin(ns) as admin:
            await make_topic(admin, topic, "+message.type=PRIORITY", queues=4)
            await make_topic(admin, fifo_topic, "+message.type=FIFO", queues=4)
            await make_topic(admin, normal_topic, None, queues=4)
        async with Producer(uniq("PG"), ns) as p:
            sent = [0, 5, 2, 1, 3, 0]
            results = [await p.send(Message(topic, f"{i}:{pr}".encode(), priority=pr)) for i, pr in enumerate(sent)]
            assert [r.message_queue.queue_id for r in results] == [0, 3, 2, 1, 3, 0]
            await p.send(Message(fifo_topic, b"fifo", message_group="g", priority=2))
            with pytest.raises(MQBrokerError, match="actual type is PRIORITY") as e:
                await p.send(Message(normal_topic, b"prio", priority=1))
            assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
        async with PopConsumer(uniq("CG"), ns) as c:
            got: list[MessageExt] = []
            deadline = time.monotonic() + 30
            while len(got) < len(sent):
                assert time.monotonic() < deadline, [m.body for m in got]
                got += await c.receive(topic, 32, invisible_time=30, block_timeout=1.0)
            await c.ack_many(got)
        assert [m.body for m in got] == [b"1:5", b"4:3", b"2:2", b"3:1", b"0:0", b"5:0"]
        assert [Message(topic, properties=m.properties).priority for m in got] == [5, 3, 2, 1, 0, 0]
        [fifo] = await pull_all(ns, fifo_topic, lambda ms: len(ms) == 1, 15)
        assert "_SYS_MSG_PRIORITY_" not in fifo.properties and fifo.properties["__SHARDINGKEY"] == "g"

    run(body)


async def _retry_against_queues(ns: str, broker_addr: str, first: int, then: list[int]) -> list[bytes]:
    """On a new PRIORITY topic of four queues: a message of priority ``first`` popped and left unacked
    until the broker revives it into the group's retry topic, then messages of priorities ``then`` sent;
    what the next pops return, in order."""
    topic, group = uniq("PrioRetry"), uniq("CG")
    async with Admin(ns) as admin:
        await make_topic(admin, topic, "+message.type=PRIORITY", queues=4)
        revived = int((await admin.broker_runtime_info(broker_addr)).get("pop.revived", 0))
        async with Producer(uniq("PG"), ns) as p, PopConsumer(group, ns) as c:
            await p.send(Message(topic, b"retried", priority=first))
            got = await c.receive(topic, 32, invisible_time=1, block_timeout=5.0)
            assert [m.body for m in got] == [b"retried"]  # not acked: comes back through the retry topic
            deadline = time.monotonic() + 30
            while int((await admin.broker_runtime_info(broker_addr)).get("pop.revived", 0)) <= revived:
                assert time.monotonic() < deadline, "the unacked message was never revived"
                await asyncio.sleep(0.1)
            for pr in then:
                await p.send(Message(topic, f"p{pr}".encode(), priority=pr))
            got = []
            while len(got) < len(then) + 1:
                assert time.monotonic() < deadline, [m.body for m in got]
                got += await c.receive(topic, 32, invisible_time=30, block_timeout=1.0)
            await c.ack_many(got)
    return [m.body for m in got]


def test_priority_pop_takes_retries_last_by_default(checked: Standalone) -> None:
    """popFromRetryProbabilityForPriority=0 (RocketMQ's default): a retried message comes after every
    queue of a PRIORITY topic, as the lowest priority, whatever priority it was sent with."""
    out: list[bytes] = []

    async def body() -> None:
        out.extend(await _retry_against_queues(checked.namesrv_addr, checked.broker_addr, 3, [3, 0]))

    run(body)
    assert out == [b"p3", b"p0", b"retried"]


def test_priority_pop_descending_and_retries_first(tmp_path: Path) -> None:
    """priorityOrderAsc=false: queue 0 is the highest priority; popFromRetryProbabilityForPriority=100:
    the retry topic is read first, in every pop."""
    out: list[bytes] = []
    settings = {**SMALL, "priorityOrderAsc": "false", "popFromRetryProbabilityForPriority": "100"}
    with Standalone(tmp_path / "data", settings) as s:

        async def body() -> None:
            out.extend(await _retry_against_queues(s.namesrv_addr, s.broker_addr, 3, [3, 0, 1]))

        run(body)
    assert out == [b"retried", b"p0", b"p1", b"p3"]


def test_priority_factor_zero_rotates_the_queues(checked: Standalone) -> None:
    """priority.factor, a group attribute (RocketMQ 5.4): 0 turns the priority order off for the group,
    whose pops then rotate over the queues; the default 100 reads the highest queue first. The attribute
    is kept with the group (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), an illegal value refused."""
    ns = checked.namesrv_addr
    topic, off, on = uniq("PrioFactor"), uniq("CGoff"), uniq("CGon")
    queues: dict[str, list[int]] = {}

    async def body() -> None:
        async with Admin(ns) as admin:
            await make_topic(admin, topic, "+message.type=PRIORITY", queues=4)
            await admin.create_group(off, attributes={"priority.factor": "0"})
            await admin.create_group(on)
            groups = await admin.group_list()
            assert groups[off]["attributes"] == {"priority.factor": "0"} and groups[on]["attributes"] == {}
            with pytest.raises(AdminError, match=r"value is not in range\(0, 100\)"):
                await admin.create_group(on, attributes="+priority.factor=101")
            await admin.create_group(off)  # no attributes in the update: the group keeps its own
            assert (await admin.group_list())[off]["attributes"] == {"priority.factor": "0"}
        async with Producer(uniq("PG"), ns) as p:
            for priority in range(4):
                for i in range(4):
                    await p.send(Message(topic, f"{priority}:{i}".encode(), priority=priority))
        for group in (off, on):
            async with PopConsumer(group, ns) as c:
                got: list[MessageExt] = []
                for _ in range(4):
                    got += await c.receive(topic, 1, invisible_time=30, block_timeout=1.0)
                queues[group] = [m.queue_id for m in got]

    run(body)
    assert queues[on] == [3, 3, 3, 3]
    assert len(set(queues[off])) > 1, queues[off]
