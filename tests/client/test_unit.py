"""Pure unit tests of the client: allocation, queue selection, fault avoidance, header and batch
encoding, compression, validation, routes, heartbeats, process queues — no broker involved."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import zlib

import pytest

from tidalmq.client import (
    IllegalStateError,
    Message,
    MessageExt,
    MessageQueue,
    PopConsumer,
    Producer,
    PullConsumer,
    PushConsumer,
    ValidationError,
    allocate_averagely,
    allocate_by_circle,
    codec,
    select_by_hash,
)
from tidalmq.client import validators as v
from tidalmq.client.allocate import AllocateByConfig
from tidalmq.client.instance import Backoff, resolve_namesrv
from tidalmq.client.message import now_ms
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.selector import FaultStrategy, RoundRobin, java_hash, not_available_duration
from tidalmq.common import naming as nm
from tidalmq.common import sysflag as sf
from tidalmq.common.message import decode_properties
from tidalmq.common.record import decode_record, encode_record
from tidalmq.common.record_batch import encode_batch_records
from tidalmq.remoting.codes import RequestCode
from tidalmq.remoting.command import RemotingCommand, SerializeType, decode_frame_body, encode_frame
from tidalmq.remoting.protocol.broker_headers import SEND_V2, SendMessageRequestHeader


def mqs(n: int, broker: str = "b", topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


# ---- allocation -----------------------------------------------------------------------------------------

def test_allocate_averagely_matches_rocketmq() -> None:
    queues = mqs(8)
    cids = ["c0", "c1", "c2"]
    got = [[q.queue_id for q in allocate_averagely("g", c, queues, cids)] for c in cids]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # more consumers than queues: one each, the rest idle
    got = [[q.queue_id for q in allocate_averagely("g", c, mqs(2), ["a", "b", "c"])] for c in ["a", "b", "c"]]
    assert got == [[0], [1], []]
    assert allocate_averagely("g", "zz", queues, cids) == []


def test_allocate_every_queue_exactly_once() -> None:
    for nq in range(1, 17):
        for nc in range(1, 7):
            cids = [f"c{i}" for i in range(nc)]
            alloc = [q for c in cids for q in allocate_averagely("g", c, mqs(nq), cids)]
            assert sorted(alloc) == mqs(nq)
            circ = [q for c in cids for q in allocate_by_circle("g", c, mqs(nq), cids)]
            assert sorted(circ) == mqs(nq)


def test_allocate_by_circle_and_config() -> None:
    assert [q.queue_id for q in allocate_by_circle("g", "b", mqs(5), ["a", "b"])] == [1, 3]
    fixed = AllocateByConfig([MessageQueue("T", "b", 3)])
    assert fixed("g", "a", mqs(5), ["a"]) == [MessageQueue("T", "b", 3)]


# ---- queue selection --------------------------------------------------------------------------------------

def test_select_by_hash_uses_java_hash_codes() -> None:
    assert java_hash("abc") == 96354  # "abc".hashCode()
    assert java_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE: abs() overflows in Java too
    assert java_hash(7) == 7 and java_hash(2**40) == (2**40 >> 32) ^ 0
    queues = mqs(4)
    assert select_by_hash(queues, Message("T", b"x"), "abc") == queues[96354 % 4]
    assert select_by_hash(queues, Message("T", b"x"), -7) == queues[3]  # Java: -7 % 4 = -3 -> abs -> 3
    # the same key always lands on the same queue
    assert len({select_by_hash(queues, Message("T", b"x"), "order-42") for _ in range(20)}) == 1


def test_round_robin_cycles_and_avoids_last_broker() -> None:
    queues = mqs(2, "a") + mqs(2, "b")
    rr = RoundRobin(start=0)
    picked = [rr.select(queues) for _ in range(8)]
    assert all(picked.count(q) == 2 for q in queues)
    for _ in range(10):
        assert rr.select(queues, last_broker="a").broker_name == "b"
    assert RoundRobin().select(mqs(2, "a"), last_broker="a").broker_name == "a"  # nothing else


def test_latency_fault_avoids_failed_broker_for_a_while() -> None:
    now = [1_000_000]
    fs = FaultStrategy(True, clock=lambda: now[0])
    queues = mqs(2, "a") + mqs(2, "b")
    rr = RoundRobin(0)
    fs.update("a", 10, isolation=True)  # a failed: counts as 30 s latency -> 10 min penalty
    assert {fs.select(queues, rr, None).broker_name for _ in range(10)} == {"b"}
    now[0] += 599_000
    assert {fs.select(queues, rr, None).broker_name for _ in range(10)} == {"b"}
    now[0] += 1_001
    assert {fs.select(queues, rr, None).broker_name for _ in range(10)} == {"a", "b"}
    fs.update("b", 120, isolation=False)  # fast enough: no penalty
    assert {fs.select(queues, rr, None).broker_name for _ in range(10)} == {"a", "b"}
    # every broker penalised: still pick one (the least bad)
    fs.update("a", 0, True)
    fs.update("b", 0, True)
    assert fs.select(queues, rr, None).broker_name in {"a", "b"}


def test_not_available_duration_table() -> None:
    assert [not_available_duration(x) for x in (0, 50, 100, 549, 550, 1000, 2000, 3000, 15000, 30000)] == [
        0, 0, 0, 0, 30000, 60000, 120000, 180000, 600000, 600000]


# ---- encoding ---------------------------------------------------------------------------------------------

def test_send_header_v2_round_trips_through_the_binary_serialization() -> None:
    h = codec.send_header_v2(group="PG", topic="T", queue_id=3, sysflag=1, born_timestamp=123, flag=7,
                             properties="TAGS\x01A\x02", reconsume_times=2, max_reconsume_times=16, batch=True,
                             broker_name="b")
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=h, body=b"x",
                          serialize_type=SerializeType.ROCKETMQ)
    frame = encode_frame(cmd)
    back = decode_frame_body(frame[4:])
    assert back.serialize_type == SerializeType.ROCKETMQ
    named = SendMessageRequestHeader.parse(back.ext_fields, SEND_V2)  # as the broker reads it
    assert named.producer_group == "PG" and named.topic == "T" and named.queue_id == 3
    assert named.default_topic == "TBW102" and named.sys_flag == 1 and named.born_timestamp == 123
    assert named.flag == 7 and decode_properties(named.properties) == {"TAGS": "A"}
    assert named.reconsume_times == 2 and named.max_reconsume_times == 16 and named.batch is True
    assert named.broker_name == "b" and set(back.ext_fields) <= {f.name for f in SendMessageRequestHeader.fields(SEND_V2)}


def test_batch_body_is_what_the_broker_decodes() -> None:
    msgs = [Message("T", f"body-{i}".encode(), tags="A", keys=[f"k{i}"], flag=i, properties={"p": str(i)})
            for i in range(5)]
    for i, m in enumerate(msgs):
        m.properties["UNIQ_KEY"] = f"U{i}"
    body = codec.encode_batch(msgs)
    records = encode_batch_records(body, topic="T", queue_id=0, sysflag=0, born_timestamp=0, born_host=bytes(4),
                                   born_port=0, store_host=bytes(4), store_port=0)
    decoded = [decode_record(r) for r in records.records()]
    assert [(m.flag, m.body) for m in decoded] == [(i, f"body-{i}".encode()) for i in range(5)]
    assert decoded[2].properties == {"TAGS": "A", "KEYS": "k2", "p": "2", "UNIQ_KEY": "U2"}
    assert codec.decode_batch(body) == [(m.flag, m.body, m.properties) for m in decoded]


def test_compression_threshold_and_pull_decode() -> None:
    small = b"a" * 4095
    assert codec.compress_body(small, 4096) == (small, False)
    big = b"abc" * 2000
    data, compressed = codec.compress_body(big, 4096)
    assert compressed and zlib.decompress(data) == big and len(data) < len(big)
    rec1 = encode_record(topic="T", queue_id=1, body=data, properties={"UNIQ_KEY": "U1"},
                         sysflag=sf.COMPRESSED_FLAG, queue_offset=5, physical_offset=100)
    rec2 = encode_record(topic="T", queue_id=1, body=b"plain", properties={"TAGS": "x"}, queue_offset=6)
    msgs = codec.decode_messages(bytes(rec1 + rec2), "b")
    assert [m.body for m in msgs] == [big, b"plain"]
    assert msgs[0].msg_id == "U1" and msgs[0].queue_offset == 5 and msgs[0].broker_name == "b"
    assert msgs[1].tags == "x" and msgs[1].msg_id == msgs[1].offset_msg_id


def test_pull_body_with_a_damaged_record_delivers_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    """A 32-record pull body: a record that does not decode is skipped (one warning naming its queue
    offset); only a broken TOTALSIZE loses what follows it, and the warning says so."""
    recs = [encode_record(topic="T", queue_id=0, body=b"b%d" % i, properties={"TAGS": "t"}, queue_offset=i)
            for i in range(32)]
    bad_props, bad_magic = bytearray(recs[10]), bytearray(recs[20])
    bad_props[len(bad_props) - 5] ^= 0x80  # a property byte that is not UTF-8
    bad_magic[4] ^= 0x01
    body = b"".join([*recs[:10], bad_props, *recs[11:20], bad_magic, *recs[21:]])
    with caplog.at_level(logging.WARNING, logger="tidalmq.client.codec"):
        msgs = codec.decode_messages(body, "b")
    assert [m.queue_offset for m in msgs] == [i for i in range(32) if i not in (10, 20)]
    assert [m.body for m in msgs][:10] == [b"b%d" % i for i in range(10)]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "2 undecodable record(s) at queue offset(s) [10, 20]" in warning
    caplog.clear()
    torn = bytearray(recs[5])
    struct.pack_into(">i", torn, 0, 10**6)  # TOTALSIZE past the body: the next record cannot be found
    with caplog.at_level(logging.WARNING, logger="tidalmq.client.codec"):
        msgs = codec.decode_messages(b"".join([*recs[:5], torn, *recs[6:]]), "b")
    assert [m.queue_offset for m in msgs] == list(range(5))
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "queue offset(s) [5]" in warning and "unreadable" in warning


def test_route_parsing_with_fastjson_integer_keys() -> None:
    raw = ('{"brokerDatas":[{"brokerAddrs":{0:"h:1",1:"h:2"},"brokerName":"b2","cluster":"C"},'
           '{"brokerAddrs":{0:"h:3"},"brokerName":"b1","cluster":"C"},{"brokerAddrs":{1:"h:4"},"brokerName":"b3"}],'
           '"queueDatas":[{"brokerName":"b2","perm":6,"readQueueNums":2,"writeQueueNums":2},'
           '{"brokerName":"b1","perm":4,"readQueueNums":3,"writeQueueNums":3},'
           '{"brokerName":"b3","perm":6,"readQueueNums":1,"writeQueueNums":1}]}')
    r = codec.TopicRoute.parse("T", raw)
    assert r.master_addr("b2") == "h:1" and r.master_addr("b3") is None
    # b1 read-only, b3 has no master: only b2 takes sends
    assert r.publish_queues() == mqs(2, "b2")
    assert r.subscribe_queues() == sorted(mqs(3, "b1") + mqs(2, "b2") + mqs(1, "b3"))


def test_heartbeat_json_has_the_java_client_shape() -> None:
    sub = codec.Subscription.build("T", "TagA || TagB", 42)
    body = codec.heartbeat_body("1.2.3.4@1", ["PG"], [codec.consumer_data(
        "CG", consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET", subscriptions=[sub])])
    obj = json.loads(body)
    assert obj["clientID"] == "1.2.3.4@1" and obj["producerDataSet"] == [{"groupName": "PG"}]
    cd = obj["consumerDataSet"][0]
    assert cd["groupName"] == "CG" and cd["consumeType"] == "CONSUME_PASSIVELY" and cd["unitMode"] is False
    sd = cd["subscriptionDataSet"][0]
    assert sd["topic"] == "T" and sd["subString"] == "TagA || TagB" and sd["tagsSet"] == ["TagA", "TagB"]
    assert sd["codeSet"] == sorted([java_hash("TagA"), java_hash("TagB")]) and sd["subVersion"] == 42
    assert sd["expressionType"] == "TAG" and sd["classFilterMode"] is False
    assert codec.Subscription.build("T", "", 0).matches_all
    assert sub.matches("TagA") and not sub.matches("TagC") and not sub.matches(None)


# ---- validation --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic,needle", [("", "blank"), ("a b", "illegal characters"), ("x" * 128, "max length"),
                                          ("SCHEDULE_TOPIC_XXXX", "forbidden")])
def test_bad_topics(topic: str, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        v.check_message(Message(topic, b"x"))


def test_topic_checks_hold_on_every_send() -> None:
    """Names that passed are remembered (a send's fast path); refusals never are, and a full memory starts over."""
    for _ in range(3):
        v.check_message(Message("T_ok", b"x"))
        for topic, needle in (("a b", "illegal characters"), ("SCHEDULE_TOPIC_XXXX", "forbidden")):
            with pytest.raises(ValidationError, match=needle):
                v.check_message(Message(topic, b"x"))
        with pytest.raises(ValidationError, match="must be a string"):
            v.check_topic_sendable(["T_ok"])  # type: ignore[arg-type]
    for i in range(nm.LEGAL_TOPICS_MAX + 1):
        v.check_topic_sendable(f"T{i}")
    assert len(nm._LEGAL_TOPICS) <= nm.LEGAL_TOPICS_MAX  # noqa: SLF001
    with pytest.raises(ValidationError, match="illegal characters"):
        v.check_topic_sendable("a b")


def test_bad_bodies_and_groups() -> None:
    with pytest.raises(ValidationError, match="length is zero"):
        v.check_message(Message("T", b""))
    with pytest.raises(ValidationError, match="over max value, MAX: 10"):
        v.check_message(Message("T", b"x" * 11), max_message_size=10)
    with pytest.raises(ValidationError, match="group is blank"):
        Producer("")
    with pytest.raises(ValidationError, match="illegal characters"):
        PushConsumer("bad group")
    with pytest.raises(ValidationError, match="DEFAULT_CONSUMER"):
        PushConsumer("DEFAULT_CONSUMER")
    with pytest.raises(ValidationError, match="pull_batch_size"):
        PushConsumer("G", pull_batch_size=0)


def test_delay_arguments() -> None:
    v.check_delay(Message("T", b"x", delay_level=3))
    v.check_delay(Message("T", b"x", deliver_time_ms=now_ms() + 5000))
    v.check_delay(Message("T", b"x", delay_ms=1500))
    v.check_delay(Message("T", b"x", delay_sec=2))
    with pytest.raises(ValidationError, match="out of range 1..18"):
        v.check_delay(Message("T", b"x", delay_level=19))
    with pytest.raises(ValidationError, match="out of range"):
        v.check_delay(Message("T", b"x", delay_level=-1))
    with pytest.raises(ValidationError, match="not both"):
        v.check_delay(Message("T", b"x", delay_level=2, delay_ms=100))
    with pytest.raises(ValidationError, match="only one of"):
        v.check_delay(Message("T", b"x", delay_ms=100, delay_sec=1))
    with pytest.raises(ValidationError, match="must be positive"):
        v.check_delay(Message("T", b"x", delay_ms=0))
    with pytest.raises(ValidationError, match="timerMaxDelaySec"):
        v.check_delay(Message("T", b"x", delay_sec=401 * 24 * 3600))
    v.check_delay(Message("T", b"x", delay_sec=10 * 24 * 3600))  # the broker's 400 days, not RocketMQ's 3
    with pytest.raises(ValidationError, match="must be an integer"):
        v.check_delay(Message("T", b"x", properties={"TIMER_DELIVER_MS": "soon"}))


def test_batch_validation() -> None:
    with pytest.raises(ValidationError, match="empty"):
        v.check_batch([])
    with pytest.raises(ValidationError, match="should be the same"):
        v.check_batch([Message("A", b"x"), Message("B", b"x")])
    with pytest.raises(ValidationError, match="not supported for batching"):
        v.check_batch([Message("A", b"x", delay_level=1)])
    with pytest.raises(ValidationError, match="Retry Group"):
        v.check_batch([Message("%RETRY%G", b"x")])


def test_batch_of_timer_messages_validation() -> None:
    at = now_ms() + 60_000
    v.check_batch([Message("A", b"x", deliver_time_ms=at), Message("A", b"y", delay_ms=500), Message("A", b"z", delay_sec=2)])
    with pytest.raises(ValidationError, match="cannot share a batch"):
        v.check_batch([Message("A", b"x", deliver_time_ms=at), Message("A", b"y")])
    with pytest.raises(ValidationError, match="cannot share a batch"):
        v.check_batch([Message("A", b"y"), Message("A", b"x", delay_ms=5)])
    with pytest.raises(ValidationError, match="only one of"):
        v.check_batch([Message("A", b"x", delay_ms=5, delay_sec=1)])
    with pytest.raises(ValidationError, match="timerMaxDelaySec"):
        v.check_batch([Message("A", b"x", delay_sec=7200)], timer_max_delay_sec=3600)
    with pytest.raises(ValidationError, match="sent alone"):
        v.check_batch([Message("A", b"x", properties={"TIMER_DEL_UNIQKEY": "A+U", "TIMER_DELIVER_MS": str(at)})])
    # deliver times alone are checked together: the first at fault is named as a single send names it
    ok = [Message("A", b"x", deliver_time_ms=at + i) for i in range(5)]
    for bad, words in ((Message("A", b"b", properties={"TIMER_DELIVER_MS": "soon"}), "must be an integer, got 'soon'"),
                       (Message("A", b"b", properties={"TIMER_DELIVER_MS": "-5"}), "must be a positive epoch time"),
                       (Message("A", b"b", deliver_time_ms=at + 7_200_000), "7259 s away|7260 s away")):
        with pytest.raises(ValidationError, match=words):
            v.check_batch([*ok, bad, *ok], timer_max_delay_sec=3600)
        with pytest.raises(ValidationError, match=words):
            v.check_delay(bad, timer_max_delay_sec=3600)


def test_calls_before_start_and_after_shutdown() -> None:
    async def go() -> None:
        p = Producer("PG", "127.0.0.1:1")
        with pytest.raises(IllegalStateError, match="not started: call start"):
            await p.send(Message("T", b"x"))
        with pytest.raises(IllegalStateError, match="not started"):
            p.send_async(Message("T", b"x"))
        await p.shutdown()
        with pytest.raises(IllegalStateError, match="shut down"):
            await p.send(Message("T", b"x"))
        with pytest.raises(IllegalStateError, match="cannot start again"):
            await p.start()
        c = PushConsumer("CG", "127.0.0.1:1")
        with pytest.raises(IllegalStateError, match="no listener"):
            await c.start()
        c.register_listener(lambda msgs: None)
        with pytest.raises(IllegalStateError, match="no subscription"):
            await c.start()
        pc = PullConsumer("CG", "127.0.0.1:1")
        with pytest.raises(IllegalStateError, match="not started"):
            await pc.fetch_queues("T")
        pop = PopConsumer("CG", "127.0.0.1:1")
        with pytest.raises(IllegalStateError, match="the pop consumer CG is not started"):
            await pop.receive("T")
        await pop.shutdown()
        with pytest.raises(IllegalStateError, match="the pop consumer CG has been shut down and cannot start again"):
            await pop.start()

    asyncio.run(go())


def test_validation_happens_before_the_network() -> None:
    async def go() -> None:
        p = Producer("PG", "127.0.0.1:1")  # nothing listens there
        await p.start()
        try:
            with pytest.raises(ValidationError, match="length is zero"):
                await p.send(Message("T", b""))
            with pytest.raises(ValidationError, match="forbidden"):
                p.send_async(Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"))
        finally:
            await p.shutdown()

    asyncio.run(go())


# ---- misc ---------------------------------------------------------------------------------------------------

def test_namesrv_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    assert resolve_namesrv(None) == ["127.0.0.1:9876"]
    monkeypatch.setenv("NAMESRV_ADDR", "a:1; b:2;")
    assert resolve_namesrv(None) == ["a:1", "b:2"]
    assert resolve_namesrv("c:3") == ["c:3"]


def test_backoff_doubles_up_to_cap() -> None:
    now = [0.0]
    b = Backoff(0.1, 1.0, clock=lambda: now[0])
    assert b.wait_left("x") == 0
    assert [b.failed("x") for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.wait_left("x") == 1.0
    b.succeeded("x")
    assert b.wait_left("x") == 0


def _ext(off: int, size: int = 10) -> MessageExt:
    return MessageExt("T", b"x" * size, 0, off, 0, {})


def test_process_queue_commit_offset_is_the_smallest_in_flight() -> None:
    pq = ProcessQueue()
    msgs = [_ext(o) for o in range(10, 15)]
    pq.put(msgs)
    assert pq.count == 5 and pq.msg_size == 50 and pq.max_span() == 4
    assert pq.remove([msgs[1], msgs[2]]) == 10
    assert pq.remove([msgs[0]]) == 13
    assert pq.remove([msgs[4]]) == 13
    assert pq.remove([msgs[3]]) == 15
    assert pq.count == 0 and pq.msg_size == 0


def test_process_queue_orderly_take_commit_rollback() -> None:
    pq = ProcessQueue()
    pq.put([_ext(o) for o in range(5)])
    assert [m.queue_offset for m in pq.take(2)] == [0, 1]
    pq.rollback()
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert pq.commit() == 3
    assert [m.queue_offset for m in pq.take(5)] == [3, 4]
    assert pq.commit() == 5 and pq.count == 0
