"""The measured attacks on the remoting port, scaled down, against a real standalone (docs/tls.md,
"Connection limits"): each time the broker closes what it must, its memory stays bounded, and a
normal client is still served afterwards."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from pathlib import Path

import pytest

from tests.broker.rawclient import pull_cmd, runtime_info
from tests.client.helpers import create_topic, uniq
from tests.support import ModuleTmp, Standalone
from tidalmq.client import Message, Producer
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand, decode_frame_body, encode_frame
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.timeout(90)

LIMITS = {
    "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
    "serverChannelMaxIdleTimeSeconds": "1",
    "serverFrameTimeoutSeconds": "1",
    "serverMaxBufferedBytes": str(8 * 1024 * 1024),
    # The broker's registration keeps its NameServer connection busy: with a 1 s idle limit it has to
    # register more often than that (RocketMQ's 30 s period is well under its 120 s default).
    "registerNameServerPeriod": "300",
}


@pytest.fixture(scope="module")
def limited(module_tmp: ModuleTmp):
    with Standalone(module_tmp("limits") / "data", LIMITS) as s:
        yield s


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s


def read_until_closed(s: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection; fails if it does not within timeout."""
    s.settimeout(timeout)
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return got
        except TimeoutError:
            break
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the server kept the connection open for {timeout}s")


def first_frame(data: bytes) -> RemotingCommand:
    (n,) = struct.unpack(">I", data[:4])
    return decode_frame_body(data[4 : 4 + n])


def still_serves(s: Standalone) -> None:
    async def go() -> None:
        topic = uniq("After")
        await create_topic(s.namesrv_addr, topic, 1)
        async with Producer(uniq("PG"), s.namesrv_addr) as p:
            assert (await p.send(Message(topic, b"still here"))).ok

    asyncio.run(asyncio.wait_for(go(), 30))


def test_idle_connections_are_closed(limited: Standalone) -> None:
    socks = [connect(limited.broker_port) for _ in range(50)] + [connect(limited.namesrv_port) for _ in range(10)]
    started = time.monotonic()
    for s in socks:
        assert read_until_closed(s, 10) == b""
        s.close()
    # serverChannelMaxIdleTimeSeconds=1: closed after about a second, well before RocketMQ's 120 s default.
    assert time.monotonic() - started < 8
    still_serves(limited)


def test_unfinished_frames_bounded_by_the_buffer_budget(limited: Standalone) -> None:
    assert limited.proc is not None
    before = rss_kib(limited.proc.pid)
    socks = []
    closed = 0
    for _ in range(12):  # 12 x 3 MiB of frames announced as 15 MiB: more than the 8 MiB budget
        s = connect(limited.broker_port)
        try:
            s.sendall(struct.pack(">I", 15 * 1024 * 1024) + b"\0" * (3 * 1024 * 1024))
        except (ConnectionResetError, BrokenPipeError):  # closed by the budget while its frame still came in
            closed += 1
            s.close()
            continue
        socks.append(s)
    for s in socks:
        got = read_until_closed(s, 10)  # by the budget or, for those within it, the frame timeout
        closed += 1
        if got:
            assert first_frame(got).code == ResponseCode.SYSTEM_ERROR
        s.close()
    assert closed == 12
    grown_mib = (rss_kib(limited.proc.pid) - before) / 1024
    assert grown_mib < 64, f"broker RSS grew {grown_mib:.0f} MiB"
    assert "serverMaxBufferedBytes" in limited.log_tail(400)
    still_serves(limited)


def test_frame_longer_than_the_maximum_refused_from_its_length(limited: Standalone) -> None:
    s = connect(limited.broker_port)
    s.sendall(struct.pack(">I", 1 << 30) + b"x" * 100)
    reply = first_frame(read_until_closed(s, 5))
    assert reply.code == ResponseCode.SYSTEM_ERROR and "exceeds the maximum" in (reply.remark or "")
    s.close()


def test_slowloris_frame_times_out(limited: Standalone) -> None:
    s = connect(limited.broker_port)
    frame = encode_frame(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=1, body=b"{}" * 100))
    started = time.monotonic()
    closed = False
    for b in frame[:-1]:  # one byte at a time, never the last: the frame is never finished
        try:
            s.send(bytes([b]))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        s.settimeout(0.1)
        try:
            if s.recv(65536, socket.MSG_PEEK) is not None:
                closed = True
                break
        except TimeoutError:
            pass
    assert closed, "the trickling connection was never closed"
    assert time.monotonic() - started < 6
    assert "serverFrameTimeoutSeconds" in limited.log_tail(400)
    s.close()


def test_held_pulls_released_when_their_connection_closes(limited: Standalone) -> None:
    topic = uniq("Held")

    async def go() -> None:
        await create_topic(limited.namesrv_addr, topic, 1)
        attacker = RemotingClient()
        observer = RemotingClient()
        conn = await attacker.connection(limited.broker_addr)
        for _ in range(2000):
            conn.request(pull_cmd(topic, 0, 0, group="HeldCG", suspend_ms=600_000))

        async def held() -> int:
            return int((await runtime_info(observer, limited.broker_addr))["pullHoldCount"])

        deadline = time.monotonic() + 20
        while await held() < 2000:
            assert time.monotonic() < deadline, "the pulls were never held"
            await asyncio.sleep(0.05)
        await attacker.close()
        while await held() != 0:
            assert time.monotonic() < deadline, "held pulls outlived their connection"
            await asyncio.sleep(0.05)
        await observer.close()

    asyncio.run(asyncio.wait_for(go(), 40))
    still_serves(limited)


def raw_json_frame(header: bytes) -> bytes:
    return struct.pack(">II", 4 + len(header), len(header)) + header


@pytest.mark.parametrize(("header", "remark"), [
    (b'{"code":1e999,"opaque":7,"flag":0}', "code is not an integer"),
    (b'{"code":34,"opaque":7,"flag":1099511627776}', "flag 1099511627776 is out of Java's int range"),
    (b'{"code":34,"extFields":' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested too deeply"),
    (b'{"code":34,"extFields":{"a":{"b":"c"}}}', "extField a is not a string"),
    (b'{"code":34,"language":{"x":1}}', "language is not a language name"),
])
def test_bad_header_answered_with_a_remark(limited: Standalone, header: bytes, remark: str) -> None:
    s = connect(limited.broker_port)
    s.sendall(raw_json_frame(header))
    reply = first_frame(read_until_closed(s, 5))
    s.close()
    assert reply.code == ResponseCode.SYSTEM_ERROR
    assert remark in (reply.remark or "")
    assert "Traceback" not in limited.log_tail(400)


def test_null_language_is_the_default(limited: Standalone) -> None:
    s = connect(limited.broker_port)
    header = json.dumps({"code": int(RequestCode.GET_BROKER_RUNTIME_INFO), "opaque": 9, "language": None}).encode()
    s.sendall(raw_json_frame(header))
    s.settimeout(5)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = s.recv(65536)
        assert chunk, "closed instead of answered"
        data += chunk
    s.close()
    reply = first_frame(data)
    assert (reply.code, reply.opaque) == (ResponseCode.SUCCESS, 9)
