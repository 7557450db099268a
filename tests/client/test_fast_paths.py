"""The client's fast paths give the same observable results as the general ones: templated send headers
carry every field, lazily decoded messages equal eagerly decoded ones, frames written in one loop turn
keep their order, async sends answered by callbacks still retry, time out and fail promptly when the
connection is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.client.fakes import FakeCluster
from tidalmq.client import (
    Message,
    MessageExt,
    MQBrokerError,
    MQClientError,
    Producer,
    SendTimeoutError,
    codec,
)
from tidalmq.common import message as mc
from tidalmq.common.record import encode_record, view_record
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import (
    FrameDecoder,
    RemotingCommand,
    SerializeType,
    decode_frame_body,
    encode_frame,
)
from tidalmq.remoting.transport import Connection

pytestmark = pytest.mark.timeout(30)


def run(fn: Callable[[FakeCluster], Awaitable[None]], brokers: list[str] | None = None) -> None:
    async def go() -> None:
        fake = await FakeCluster(brokers or ["a", "b"]).start()
        try:
            await asyncio.wait_for(fn(fake), 20)
        finally:
            await fake.stop()

    asyncio.run(go())


# ---- templated headers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fields", [
    {"group": "PG", "topic": "T", "queue_id": 3, "sysflag": 0, "flag": 0, "broker_name": "broker-a"},
    {"group": "PG", "topic": "%RETRY%CG", "queue_id": 0, "sysflag": 1, "flag": 7, "reconsume_times": 2,
     "max_reconsume_times": 16, "broker_name": None},
    {"group": "PG", "topic": "Tö", "queue_id": 1, "sysflag": 0, "flag": 0, "batch": True, "broker_name": "b",
     "default_topic_queue_nums": 8},
])
def test_templated_send_header_decodes_to_the_fields_of_send_header_v2(fields: dict[str, Any]) -> None:
    templates = codec.SendHeaderTemplates()
    for ts, props in ((1732386000123, "UNIQ_KEY\x01A1\x02"), (1732386000999, "KEYS\x01ключ\x02UNIQ_KEY\x01A2\x02")):
        encoded = templates.encode(born_timestamp=ts, properties=props, **fields)
        frame = encode_frame(RemotingCommand(code=RC.SEND_MESSAGE_V2, opaque=9, ext_encoded=encoded,
                                             serialize_type=SerializeType.ROCKETMQ))
        got = decode_frame_body(frame[4:])
        assert got.ext_fields == codec.send_header_v2(born_timestamp=ts, properties=props, **fields)
        assert got.code == RC.SEND_MESSAGE_V2 and got.opaque == 9


def test_pre_encoded_fields_combine_with_the_dict_and_refuse_json() -> None:
    templates = codec.SendHeaderTemplates()
    enc = templates.encode(group="PG", topic="T", queue_id=0, sysflag=0, born_timestamp=1, flag=0, properties="")
    cmd = RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_encoded=enc, ext_fields={"AccessKey": "ak"},
                          serialize_type=SerializeType.ROCKETMQ)
    got = decode_frame_body(encode_frame(cmd)[4:]).ext_fields
    assert got["AccessKey"] == "ak" and got["b"] == "T" and got["g"] == "1"
    with pytest.raises(ValueError):
        encode_frame(RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_encoded=enc))  # JSON cannot carry it


def test_async_sends_carry_the_right_header_fields_to_the_broker() -> None:
    async def body(fake: FakeCluster) -> None:
        async with Producer("PG", fake.namesrv_addr) as p:
            await p.send(Message("T", b"warm"))  # route and connection: later sends take the fast path
            t0 = int(time.time() * 1000)
            futs = [p.send_async(Message("T", f"m{i}".encode(), tags=f"tag{i % 3}", keys=[f"k{i}"]))
                    for i in range(40)]
            results = await asyncio.gather(*futs)
            t1 = int(time.time() * 1000)
        sends = fake.of_code(RC.SEND_MESSAGE_V2)[1:]
        assert len(sends) == 40
        by_uniq = {mc.decode_properties(c.ext_fields["i"])[mc.UNIQ_KEY]: c for c in sends}
        for i, r in enumerate(results):
            h = by_uniq[r.msg_id].ext_fields
            assert (h["a"], h["b"], h["c"], h["n"]) == ("PG", "T", codec.DEFAULT_TOPIC, r.message_queue.broker_name)
            assert int(h["e"]) == r.message_queue.queue_id
            assert t0 <= int(h["g"]) <= t1
            assert (h["f"], h["h"], h["j"], h["k"], h["m"]) == ("0", "0", "0", "false", "false")
            props = mc.decode_properties(h["i"])
            assert props[mc.TAGS] == f"tag{i % 3}" and props[mc.KEYS] == f"k{i}"
            assert by_uniq[r.msg_id].body_bytes() == f"m{i}".encode()
        # round robin over both brokers' queues, as the general path does
        assert {(r.message_queue.broker_name, r.message_queue.queue_id) for r in results} == \
            {(b, q) for b in ("a", "b") for q in range(2)}

    run(body)


# ---- lazy MessageExt ---------------------------------------------------------------------------------

@pytest.mark.parametrize("hosts", [(b"\x0a\x00\x00\x05", b"\xc0\xa8\x01\x02"),
                                   (bytes(15) + b"\x01", b"\x20\x01\x0d\xb8" + bytes(11) + b"\x07")])
def test_lazily_decoded_message_equals_the_eagerly_decoded_one(hosts: tuple[bytes, bytes]) -> None:
    born, store = hosts
    rec = bytes(encode_record(topic="T", queue_id=2, body=b"payload", properties={mc.UNIQ_KEY: "U1", mc.TAGS: "a"},
                              flag=3, born_timestamp=111, born_host=born, born_port=4001, store_host=store,
                              store_port=10911, reconsume_times=1, queue_offset=42, physical_offset=9000,
                              store_timestamp=222))
    lazy = codec.decode_messages(rec, "broker-a")[0]
    v = view_record(rec)
    eager = MessageExt(topic=v.topic, body=v.body(), queue_id=v.queue_id, queue_offset=v.queue_offset,
                       commit_log_offset=v.physical_offset, properties=v.properties, flag=v.flag, sysflag=v.sysflag,
                       born_timestamp=v.born_timestamp, born_host=v.born_host, store_timestamp=v.store_timestamp,
                       store_host=v.store_host, reconsume_times=v.reconsume_times, offset_msg_id=v.msg_id,
                       broker_name="broker-a", store_size=v.total,
                       prepared_transaction_offset=v.prepared_transaction_offset)
    assert lazy == eager
    assert lazy.born_host == eager.born_host and lazy.store_host == eager.store_host
    assert lazy.offset_msg_id == eager.offset_msg_id != ""
    assert lazy.msg_id == "U1" and lazy.tags == "a" and lazy.body == b"payload"
    lazy.born_host = ("h", 1)  # still settable, as the dataclass fields were
    assert lazy.born_host == ("h", 1) and lazy != eager


# ---- corked writes -----------------------------------------------------------------------------------

class _RecordingTransport:
    """Just enough of a transport for a Connection: records each writelines call."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def is_closing(self) -> bool:
        return False

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        self.writes.append(b"".join(bytes(p) for p in parts))

    def close(self) -> None:
        pass


def test_frames_written_in_one_loop_turn_go_out_in_one_write_in_order() -> None:
    async def go() -> None:
        conn = Connection(None)
        t = _RecordingTransport()
        conn.connection_made(t)  # type: ignore[arg-type]
        futs = [conn.request(RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_fields={"i": str(i)}, body=b"x" * i))
                for i in range(50)]
        assert t.writes == []  # corked until the loop turn ends
        await asyncio.sleep(0)
        assert len(t.writes) == 1
        dec = FrameDecoder()
        dec.feed(t.writes[0])
        got = list(dec.commands())
        assert [c.ext_fields["i"] for c in got] == [str(i) for i in range(50)]
        assert [c.body_bytes() for c in got] == [b"x" * i if i else b"" for i in range(50)]
        # answers in any order reach their own request
        for c in reversed(got):
            conn.data_received(encode_frame(RemotingCommand(code=0, opaque=c.opaque, flag=1, remark=c.ext_fields["i"])))
        assert [f.result().remark for f in futs] == [str(i) for i in range(50)]

    asyncio.run(go())


def test_request_timeout_fails_the_future_and_a_late_answer_is_dropped() -> None:
    async def go() -> None:
        conn = Connection(None)
        conn.connection_made(_RecordingTransport())  # type: ignore[arg-type]
        cmd = RemotingCommand(code=RC.SEND_MESSAGE_V2)
        fut = conn.request(cmd, 0.05)
        with pytest.raises(Exception, match="timeout 50ms"):
            await asyncio.wait_for(fut, 2)
        conn.data_received(encode_frame(RemotingCommand(code=0, opaque=cmd.opaque, flag=1)))  # no error

    asyncio.run(go())


# ---- async sends: retries, timeouts, lost connections -------------------------------------------------------

def test_fast_async_send_retries_on_another_broker() -> None:
    async def body(fake: FakeCluster) -> None:
        fake.handlers["a"][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.SYSTEM_ERROR, "bad")
        async with Producer("PG", fake.namesrv_addr, send_latency_fault_enable=False) as p:
            await p.send(Message("T", b"warm"))
            results = await asyncio.gather(*(p.send_async(Message("T", b"x")) for _ in range(8)))
            assert {r.message_queue.broker_name for r in results} == {"b"}
            # a refusal that is not worth a retry comes back as it is
            fake.handlers["b"][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, "no")
            fake.handlers["a"][RC.SEND_MESSAGE_V2] = fake.handlers["b"][RC.SEND_MESSAGE_V2]
            before = len(fake.of_code(RC.SEND_MESSAGE_V2))
            with pytest.raises(MQBrokerError) as ei:
                await p.send_async(Message("T", b"x"))
            assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert len(fake.of_code(RC.SEND_MESSAGE_V2)) == before + 1

    run(body)


def test_fast_async_send_tries_one_plus_retry_times() -> None:
    async def body(fake: FakeCluster) -> None:
        for b in ("a", "b"):
            fake.handlers[b][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.SYSTEM_ERROR, "no")
        async with Producer("PG", fake.namesrv_addr, retry_times_when_send_async_failed=2,
                            send_latency_fault_enable=False) as p:
            fake.handlers["a"].pop(RC.SEND_MESSAGE_V2)
            fake.handlers["b"].pop(RC.SEND_MESSAGE_V2)
            await p.send(Message("T", b"warm"))
            await p.send(Message("T", b"warm"))  # both connections open
            for b in ("a", "b"):
                fake.handlers[b][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.SYSTEM_ERROR, "no")
            before = len(fake.of_code(RC.SEND_MESSAGE_V2))
            with pytest.raises(MQBrokerError):
                await p.send_async(Message("T", b"x"))
            assert len(fake.of_code(RC.SEND_MESSAGE_V2)) - before == 3

    run(body)


def test_fast_async_send_times_out() -> None:
    async def body(fake: FakeCluster) -> None:
        async with Producer("PG", fake.namesrv_addr, send_timeout=0.3) as p:
            await p.send(Message("T", b"warm"))
            await p.send(Message("T", b"warm"))
            for b in ("a", "b"):
                fake.handlers[b][RC.SEND_MESSAGE_V2] = lambda c, cmd: None  # never answers
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(SendTimeoutError):
                await p.send_async(Message("T", b"x"))
            assert loop.time() - t0 < 1.5

    run(body)


def test_a_lost_connection_fails_every_pending_async_send_promptly() -> None:
    async def body(fake: FakeCluster) -> None:
        async with Producer("PG", fake.namesrv_addr, send_timeout=10.0) as p:
            await p.send(Message("T", b"warm"))
            fake.handlers["a"][RC.SEND_MESSAGE_V2] = lambda c, cmd: None  # holds every send
            futs = [p.send_async(Message("T", b"x")) for _ in range(50)]
            await fake.wait_for(lambda: len(fake.of_code(RC.SEND_MESSAGE_V2)) >= 51)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await fake.servers["a"].stop()  # closes the connection: the broker is gone
            done, pending = await asyncio.wait(futs, timeout=5.0)
            assert not pending and loop.time() - t0 < 5.0  # far from the 10 s send timeout
            for f in done:
                assert isinstance(f.exception(), MQClientError)

    run(body, ["a"])


def test_lazy_fields_survive_a_pull_through_the_consumer_codec() -> None:
    recs = b"".join(bytes(encode_record(topic="T", queue_id=0, body=f"b{i}".encode(), properties={mc.UNIQ_KEY: f"U{i}"},
                                        queue_offset=i, physical_offset=1000 + i * 200, store_port=10911))
                    for i in range(5))
    msgs = codec.decode_messages(recs, "bn")
    assert [m.msg_id for m in msgs] == [f"U{i}" for i in range(5)]
    assert len({m.offset_msg_id for m in msgs}) == 5
    assert all(m.store_host == ("127.0.0.1", 10911) for m in msgs)


def test_shutdown_waits_for_async_sends_in_flight_and_retried() -> None:
    """Sends answered late, and sends retried on the other broker after a failure, are all finished
    when shutdown returns; none stays tracked afterwards."""
    async def body(fake: FakeCluster) -> None:
        p = Producer("PG", fake.namesrv_addr, send_latency_fault_enable=False)
        await p.start()
        await p.send(Message("T", b"warm"))
        await p.send(Message("T", b"warm"))  # both connections open: every send takes the fast path
        loop = asyncio.get_running_loop()

        def late(c: Connection, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
            fut: asyncio.Future[RemotingCommand] = loop.create_future()
            loop.call_later(0.3, fut.set_result, fake.send_ok("b", cmd))
            return fut

        fake.handlers["a"][RC.SEND_MESSAGE_V2] = lambda c, cmd: cmd.make_response(ResponseCode.SYSTEM_ERROR, "bad")
        fake.handlers["b"][RC.SEND_MESSAGE_V2] = late
        futs = [p.send_async(Message("T", b"x")) for _ in range(8)]
        await p.shutdown()
        assert all(f.done() for f in futs)
        assert {f.result().message_queue.broker_name for f in futs} == {"b"}
        assert len(fake.of_code(RC.SEND_MESSAGE_V2, "a")) >= 2  # some went to a first and were retried
        assert not p._pending  # noqa: SLF001

    run(body)
