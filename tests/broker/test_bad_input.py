"""Bad input gets RocketMQ's error code and a clear remark, and the broker keeps serving others."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from tests.broker.rawclient import pull_cmd, run, runtime_info, send_cmd, wait_max_offset
from tests.support import ModuleTmp, Standalone
from tidalmq.common.record import decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import FrameDecoder, RemotingCommand
from tidalmq.remoting.transport import RemotingClient


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp):
    s = Standalone(module_tmp("bad") / "data",
                   {"maxMessageSize": str(64 * 1024), "mappedFileSizeCommitLog": str(8 * 1024 * 1024)})
    s.start()
    yield s
    s.stop()


def raw_exchange(addr: tuple[str, int], payload: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send raw bytes, return (what came back, whether the broker closed the connection)."""
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(payload)
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return data, True
                data += chunk
        except TimeoutError:
            return data, False


async def good_send(client: RemotingClient, addr: str, topic: str, body: bytes) -> RemotingCommand:
    return await client.invoke(addr, send_cmd(topic, body), 5)


def test_illegal_topics_and_sizes(broker: Standalone) -> None:
    async def scenario() -> None:
        c = RemotingClient()
        addr = broker.broker_addr
        try:
            cases = [
                ("A" * 128, ResponseCode.SYSTEM_ERROR, "longer than topic max length"),
                ("bad topic!", ResponseCode.SYSTEM_ERROR, "illegal characters"),
                ("SCHEDULE_TOPIC_XXXX", ResponseCode.NO_PERMISSION, "forbidden"),
                ("RMQ_SYS_TRANS_HALF_TOPIC", ResponseCode.NO_PERMISSION, "forbidden"),
            ]
            for topic, code, remark in cases:
                r = await c.invoke(addr, send_cmd(topic, b"x"), 5)
                assert r.code == code, (topic, r.code, r.remark)
                assert remark in (r.remark or "")
            r = await c.invoke(addr, send_cmd("BadInputBig", b"x" * (64 * 1024 + 1)), 5)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "over max value" in (r.remark or "")
            r = await c.invoke(addr, send_cmd("BadInputQ", b"x", queue_id=1000), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[1000] is illegal" in (r.remark or "")
            r = await c.invoke(addr, RemotingCommand(code=31337), 5)
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "31337" in (r.remark or "")
            r = await c.invoke(addr, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={"topic": "x"}), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (r.remark or "")
            # And a good message still goes through and reads back.
            ok = await good_send(c, addr, "BadInputOk", b"fine")
            assert ok.code == ResponseCode.SUCCESS
        finally:
            await c.close()

    run(scenario())


def test_pull_offsets_out_of_range(broker: Standalone) -> None:
    async def scenario() -> None:
        c = RemotingClient()
        addr = broker.broker_addr
        try:
            for i in range(3):
                assert (await c.invoke(addr, send_cmd("PullRange", b"m%d" % i), 5)).code == ResponseCode.SUCCESS
            await wait_max_offset(c, addr, "PullRange", 0, 3)
            r = await c.invoke(addr, pull_cmd("PullRange", 0, 0), 5)
            assert r.code == ResponseCode.SUCCESS
            assert r.ext_fields["nextBeginOffset"] == "3" and r.ext_fields["maxOffset"] == "3"
            dec = r.body_bytes()
            first = decode_record(dec, 0)
            assert first.body == b"m0" and first.queue_offset == 0
            r = await c.invoke(addr, pull_cmd("PullRange", 0, 3), 5)
            assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "3"
            r = await c.invoke(addr, pull_cmd("PullRange", 0, 1000), 5)
            assert r.code == ResponseCode.PULL_OFFSET_MOVED
            r = await c.invoke(addr, pull_cmd("PullRange", 99, 0), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in (r.remark or "")
            r = await c.invoke(addr, pull_cmd("NoSuchTopicHere", 0, 0), 5)
            assert r.code == ResponseCode.TOPIC_NOT_EXIST
        finally:
            await c.close()

    run(scenario())


def test_malformed_and_oversized_frames_close_only_that_connection(broker: Standalone) -> None:
    host, port = broker.broker_addr.split(":")
    addr = (host, int(port))
    # Oversized: refused with SYSTEM_ERROR, connection closed.
    data, closed = raw_exchange(addr, struct.pack(">I", 1 << 30) + b"\x00" * 16)
    assert closed
    dec = FrameDecoder()
    dec.feed(data)
    (resp,) = list(dec.commands())
    assert resp.code == ResponseCode.SYSTEM_ERROR and "exceeds the maximum" in (resp.remark or "")
    # Garbage header: refused, closed.
    data, closed = raw_exchange(addr, struct.pack(">II", 8, 4) + b"{nope")
    assert closed
    # A frame cut off mid-way and a client that goes away: nothing leaks.
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(struct.pack(">I", 1000) + b"\x00\x00\x00\x10")

    async def scenario() -> None:
        c = RemotingClient()
        try:
            ok = await good_send(c, broker.broker_addr, "AfterGarbage", b"still here")
            assert ok.code == ResponseCode.SUCCESS
            for _ in range(100):
                info = await runtime_info(c, broker.broker_addr)
                if info["connectionCount"] == "1":
                    break
                await asyncio.sleep(0.05)
            assert info["connectionCount"] == "1"  # only ours is left
        finally:
            await c.close()

    run(scenario())


def test_batch_with_a_delay_property_is_refused(broker: Standalone) -> None:
    from tidalmq.common.message import encode_properties

    def item(body: bytes, props: dict[str, str]) -> bytes:
        pb = encode_properties(props).encode()
        return struct.pack(">iiiii", 20 + len(body) + 2 + len(pb), 0, 0, 0, len(body)) + body + struct.pack(">h", len(pb)) + pb

    async def scenario() -> None:
        c = RemotingClient()
        try:
            # A timer deliver time is accepted in a batch whose messages all carry one (tests/schedule/
            # test_timer_broker.py::test_batch_of_timer_messages_each_delivered_at_its_time_never_early).
            for props, refusal in (({"MYDELAY": "3"}, None), ({"DELAY": "3"}, "not supported for batched"),
                                   ({"TIMER_DELAY_SEC": "9"}, "cannot share a batch")):
                req = send_cmd("BatchDelay", item(b"a", {"KEYS": "x"}) + item(b"b", props))
                req.ext_fields["m"] = "true"
                r = await c.invoke(broker.broker_addr, req, 5)
                if refusal is None:
                    assert r.code == ResponseCode.SUCCESS, r.remark
                else:
                    assert r.code == ResponseCode.MESSAGE_ILLEGAL and refusal in (r.remark or ""), r.remark
        finally:
            await c.close()

    run(scenario())
