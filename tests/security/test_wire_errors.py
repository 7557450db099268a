"""Bad input that once reached a processor's generic failure path (a traceback in the log for each
request, Python's exception text as the remark): each is answered with RocketMQ's code and a short remark
naming the field, logs at most a line or so however often it comes, and leaves the server serving.
HOSTILE_INPUTS is the corpus: add what a fuzzer finds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from tests.broker.rawclient import run, send_cmd
from tests.support import Standalone
from tidalmq.acl.resources import ResourceError, request_resources
from tidalmq.common import message as mc
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import Connection, RemotingClient, RemotingServer

DEEP = b"[" * 50_000 + b"]" * 50_000
_BROKER = {"brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "C"}


def _timer_send() -> RemotingCommand:
    return send_cmd("TBW102", b"x", props={mc.TIMER_DELIVER_MS: "\u00b2"})


# (what, to the NameServer?, request, expected code, a word the remark must hold)
HOSTILE_INPUTS: list[tuple[str, bool, Callable[[], RemotingCommand], int, str]] = [
    ("deep JSON heartbeat", False, lambda: RemotingCommand(code=RC.HEART_BEAT, body=DEEP),
     ResponseCode.SYSTEM_ERROR, "nested too deeply"),
    ("deep JSON object heartbeat", False,
     lambda: RemotingCommand(code=RC.HEART_BEAT, body=b'{"a":' * 30_000 + b"1" + b"}" * 30_000),
     ResponseCode.SYSTEM_ERROR, "nested too deeply"),
    ("TIMER_DELIVER_MS of a superscript two", False, _timer_send, ResponseCode.MESSAGE_ILLEGAL, "TIMER_DELIVER_MS"),
    ("UNREGISTER_BROKER with an empty brokerId", True,
     lambda: RemotingCommand(code=RC.UNREGISTER_BROKER, ext_fields={**_BROKER, "brokerId": ""}),
     ResponseCode.SYSTEM_ERROR, "brokerId"),
    ("QUERY_DATA_VERSION with a body that is not JSON", True,
     lambda: RemotingCommand(code=RC.QUERY_DATA_VERSION, ext_fields={**_BROKER, "brokerId": "0"}, body=b"not json"),
     ResponseCode.SYSTEM_ERROR, "not JSON"),
    ("QUERY_DATA_VERSION with deep JSON", True,
     lambda: RemotingCommand(code=RC.QUERY_DATA_VERSION, ext_fields={**_BROKER, "brokerId": "0"}, body=DEEP),
     ResponseCode.SYSTEM_ERROR, "nested too deeply"),
]
REPEATS = 200


def _log_size(s: Standalone) -> int:
    return s.log_path.stat().st_size if s.log_path.exists() else 0


@pytest.mark.parametrize("what,to_namesrv,make,code,word", HOSTILE_INPUTS, ids=[i[0] for i in HOSTILE_INPUTS])
def test_bad_input_gets_a_code_a_short_remark_and_one_log_line(
        shared_standalone: Standalone, what: str, to_namesrv: bool, make: Callable[[], RemotingCommand],
        code: int, word: str) -> None:
    s = shared_standalone
    addr = s.namesrv_addr if to_namesrv else s.broker_addr

    async def go() -> None:
        c = RemotingClient()
        try:
            first = _log_size(s)
            r = await c.invoke(addr, make(), 10.0)
            assert r.code == code and word in (r.remark or ""), (r.code, r.remark)
            assert len(r.remark or "") <= 200 and "Error:" not in (r.remark or ""), r.remark
            for _ in range(REPEATS):
                again = await c.invoke(addr, make(), 10.0)
                assert (again.code, again.remark) == (r.code, r.remark)
            # still serving, on the same connection
            ok = await c.invoke(s.broker_addr, send_cmd("TBW102", b"after " + what.encode()), 10.0)
            assert ok.code == ResponseCode.SUCCESS, ok.remark
        finally:
            await c.close()
        added = s.log_path.read_bytes()[first:].decode(errors="replace")
        assert "Traceback" not in added and len(added.splitlines()) <= 3, added[-2000:]

    run(go(), 120)


def test_the_acl_reads_a_deep_heartbeat_as_unreadable() -> None:
    with pytest.raises(ResourceError, match="heartbeat body cannot be read"):
        request_resources(RemotingCommand(code=RC.HEART_BEAT, body=DEEP))


def test_a_failing_processor_logs_one_traceback_an_interval_and_answers_a_short_remark(
        caplog: pytest.LogCaptureFixture) -> None:
    """Whatever still reaches the generic path (a processor's bug): one traceback a request code an interval,
    and the remark is the exception's type and the start of its text."""

    def broken(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raise ValueError("boom " + "x" * 500)

    async def later(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0)
        raise KeyError("gone")

    async def go() -> None:
        server = RemotingServer("127.0.0.1", 0)
        server.register(9001, broken)
        server.register(9002, lambda conn, cmd: later(conn, cmd))
        await server.start()
        c = RemotingClient()
        try:
            for code, remark in ((9001, "ValueError: boom x"), (9002, "KeyError: 'gone'")):
                for _ in range(REPEATS):
                    r = await c.invoke(f"127.0.0.1:{server.port}", RemotingCommand(code=code), 5.0)
                    assert r.code == ResponseCode.SYSTEM_ERROR and (r.remark or "").startswith(remark), r.remark
                    assert len(r.remark or "") <= 160
        finally:
            await c.close()
            await server.stop()

    with caplog.at_level(logging.INFO, logger="tidalmq.remoting.transport"):
        run(go(), 60)
    failed = [r for r in caplog.records if "failed" in r.getMessage() and r.levelno >= logging.INFO]
    assert len(failed) == 2 and all(r.exc_info for r in failed), [r.getMessage() for r in failed]
