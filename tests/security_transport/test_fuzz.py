"""Fuzzing of the remoting layer with Hypothesis (docs/tls.md, "Fuzzing").

The frame codec is fed random bytes and mutated valid frames split at random points: it yields
commands or raises FrameError, nothing else. A real in-process broker is sent random request codes
with random extFields and bodies: every request is answered (or its connection closed cleanly), no
processor fails with an exception (the transport logs those at ERROR: a handler catches them), and
the broker still takes a valid send afterwards. The long runs are behind ``--run-slow``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.broker.rawclient import send_cmd
from tests.support import ModuleTmp
from tidalmq.broker.broker_controller import BrokerController
from tidalmq.broker.config import BrokerConfig
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import (
    FLAG_ONEWAY,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    SerializeType,
    decode_frame_body,
    encode_frame,
)
from tidalmq.remoting.transport import RemotingClient, RemotingConnectError, RemotingTimeout
from tidalmq.store.config import MessageStoreConfig

pytestmark = pytest.mark.timeout(600)

QUICK = 150
LONG = 20_000
FUZZ: dict[str, Any] = {"deadline": None, "database": None, "suppress_health_check": list(HealthCheck)}

# ---------------------------------------------------------------------------------------- codec
texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=30)
valid_commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767), opaque=st.integers(0, 2**31 - 1), flag=st.sampled_from([0, 1, 2]),
    remark=st.one_of(st.none(), texts.filter(bool)),
    ext_fields=st.dictionaries(texts.filter(bool), texts, max_size=5),
    body=st.one_of(st.none(), st.binary(min_size=1, max_size=100)),
    serialize_type=st.sampled_from(list(SerializeType)),
)


def decode_all(chunks: list[bytes]) -> list[RemotingCommand]:
    """Feed the chunks; the decoder's only way to refuse is FrameError."""
    dec = FrameDecoder(max_frame=1 << 20)
    out: list[RemotingCommand] = []
    try:
        for c in chunks:
            dec.feed(c)
            out.extend(dec.commands())
    except FrameError:
        pass
    return out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    data = bytearray(b"".join(encode_frame(c) for c in draw(st.lists(valid_commands, min_size=1, max_size=3))))
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "byte", "cut", "insert"]))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            data[i] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x16, 0x01]))
        elif op == "cut":
            del data[i : i + draw(st.integers(1, 8))]
        else:
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        if not data:
            break
    return bytes(data)


def fuzz_codec(n: int) -> None:
    @settings(max_examples=n, **FUZZ)
    @given(st.one_of(st.binary(max_size=300), mutated_frames()), st.lists(st.integers(0, 1000), max_size=6))
    def check(data: bytes, cuts: list[int]) -> None:
        whole = decode_all([data])
        assert decode_all(split(data, cuts)) == whole  # the same, however the bytes arrive
        for cmd in whole:  # whatever decodes encodes again
            encode_frame(cmd)

    check()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=10)
header_fields = st.fixed_dictionaries({}, optional={
    "code": json_values, "opaque": json_values, "flag": json_values, "language": json_values,
    "version": json_values, "remark": json_values, "extFields": json_values})


def fuzz_headers(n: int) -> None:
    @settings(max_examples=n, **FUZZ)
    @given(header_fields, st.binary(max_size=120))
    def check(obj: dict[str, object], rocketmq_header: bytes) -> None:
        for stype, header in ((0, json.dumps(obj).encode()), (1, rocketmq_header)):
            frame = struct.pack(">I", (stype << 24) | len(header)) + header
            try:
                cmd = decode_frame_body(frame)
            except FrameError:
                continue
            assert -(2**31) <= min(cmd.code, cmd.opaque, cmd.flag, cmd.version)
            assert max(cmd.code, cmd.opaque, cmd.flag, cmd.version) < 2**31
            assert all(type(v) is str for v in cmd.ext_fields.values())
            encode_frame(cmd.make_response(0, "ok"))

    check()


def test_codec_fuzz_quick() -> None:
    fuzz_codec(QUICK * 2)
    fuzz_headers(QUICK * 2)


@pytest.mark.slow
def test_codec_fuzz_long() -> None:
    fuzz_codec(LONG)
    fuzz_headers(LONG)


# ---------------------------------------------------------------------------------------- broker
KEYS = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "topic", "queueId", "queueOffset",
        "consumerGroup", "producerGroup", "group", "groupName", "offset", "maxMsgNums", "maxMsgBytes", "sysFlag",
        "commitOffset", "suspendTimeoutMillis", "subscription", "subVersion", "expressionType", "msgId", "key",
        "maxNum", "beginTimestamp", "endTimestamp", "timestamp", "commitLogOffset", "commitOrRollback",
        "tranStateTableOffset", "transactionId", "delayLevel", "maxReconsumeTimes", "originTopic", "clientId",
        "readQueueNums", "writeQueueNums", "perm", "topicFilterType", "topicSysFlag", "order", "isForce",
        "index", "count", "defaultTopic", "defaultTopicQueueNums", "properties", "batch", "unitMode"]
VALUES = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "2", "4", "32", "2147483647", "2147483648", "-2147483649",
                     "9223372036854775808", "1e5", "abc", "true", "false", "null", "FuzzTopic", "TBW102",
                     "%RETRY%FuzzGroup", "FuzzGroup", "*", "TagA || TagB", "a > 1", "SQL92", "TAG", "{}",
                     "[]", "\u0001\u0002", "DEFAULT_BROKER", "0A0B0C0D00002A9F0000000000000000", "x" * 300]),
    texts)
CODES = st.one_of(st.sampled_from([int(c) for c in RequestCode]), st.integers(-32768, 32767))
BODIES = st.one_of(
    st.none(), st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(["clientID", "producerDataSet", "consumerDataSet", "topicConfig", "mqSet",
                                     "consumerGroup", "offsetTable", "groupName", "topic"]), json_values,
                    max_size=4).map(lambda v: json.dumps(v).encode()),
)
requests = st.builds(
    RemotingCommand, code=CODES, ext_fields=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=10),
    body=BODIES, serialize_type=st.sampled_from(list(SerializeType)), version=st.integers(0, 500))


class ErrorLog(logging.Handler):
    """The transport logs a processor's exception at ERROR: every such record is a finding."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def inproc(module_tmp: ModuleTmp) -> Iterator[tuple[asyncio.AbstractEventLoop, BrokerController]]:
    root = Path(module_tmp("fuzz"))
    sc = MessageStoreConfig(store_path_root_dir=str(root / "store"), mapped_file_size_commit_log=16 * 1024 * 1024)
    bc = BrokerConfig(broker_name="fuzz-broker", listen_port=0, namesrv_addr="")
    loop = asyncio.new_event_loop()
    broker = BrokerController(bc, sc, host="127.0.0.1")
    loop.run_until_complete(broker.start())
    try:
        yield loop, broker
    finally:
        loop.run_until_complete(broker.stop())
        loop.close()


def tame(cmd: RemotingCommand) -> RemotingCommand:
    cmd.flag &= ~FLAG_ONEWAY
    if not -32768 <= cmd.code <= 32767:  # the binary (ROCKETMQ) header holds a 16-bit code: pop's 2000xx go as JSON
        cmd.serialize_type = SerializeType.JSON
    if cmd.code == RequestCode.PULL_MESSAGE:  # a long-polled pull is answered, but not within our wait
        cmd.ext_fields.pop("suspendTimeoutMillis", None)
    return cmd


def fuzz_broker(inproc: tuple[asyncio.AbstractEventLoop, BrokerController], n: int) -> None:
    loop, broker = inproc
    errors = ErrorLog()
    logging.getLogger("tidalmq").addHandler(errors)
    client = RemotingClient()
    addr = f"127.0.0.1:{broker.server.port}"
    findings: list[str] = []
    tried = [0]

    async def one(cmd: RemotingCommand) -> None:
        try:
            resp = await client.invoke(addr, cmd, timeout=10.0)
        except RemotingConnectError:
            return  # a clean close is an answer too
        except RemotingTimeout:
            findings.append(f"code {cmd.code}: no response within 10 s to {cmd}")
            return
        if resp.code == ResponseCode.SYSTEM_ERROR and resp.remark and "Error:" in resp.remark:
            findings.append(f"code {cmd.code}: {resp.remark}")

    @settings(max_examples=n, **FUZZ)
    @given(requests)
    def check(cmd: RemotingCommand) -> None:
        tried[0] += 1
        before = len(errors.records)
        loop.run_until_complete(one(tame(cmd)))
        new = [r.getMessage() + (f" {r.exc_info[1]!r}" if r.exc_info else "") for r in errors.records[before:]]
        assert not new, f"{cmd}: {new}"
        assert not findings, findings

    try:
        check()
        # Still serving: a valid send after it all.
        resp = loop.run_until_complete(client.invoke(addr, send_cmd("TBW102", b"after the fuzz"), 5.0))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        loop.run_until_complete(client.close())
        logging.getLogger("tidalmq").removeHandler(errors)
    print(f"broker fuzz: {tried[0]} requests, no processor exception")


def test_broker_request_fuzz_quick(inproc: tuple[asyncio.AbstractEventLoop, BrokerController]) -> None:
    fuzz_broker(inproc, QUICK)


@pytest.mark.slow
def test_broker_request_fuzz_long(inproc: tuple[asyncio.AbstractEventLoop, BrokerController]) -> None:
    fuzz_broker(inproc, LONG)
