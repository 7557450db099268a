"""Broker behaviour over raw remoting: long polling, tag filtering, admin, restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.broker.rawclient import pull_cmd, records, run, runtime_info, send_cmd, wait_max_offset
from tests.mqadmin.support import run_mqadmin
from tests.support import Standalone
from tidalmq.common import fastjson
from tidalmq.common.record import decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient


def test_long_polling_answers_when_a_message_arrives(shared_standalone: Standalone) -> None:
    addr = shared_standalone.broker_addr

    async def scenario() -> None:
        c = RemotingClient()
        try:
            assert (await c.invoke(addr, send_cmd("LongPoll", b"first"), 5)).code == ResponseCode.SUCCESS
            # Drain queue 0 first so that the next pull has nothing to read (held until dispatched).
            r = await c.invoke(addr, pull_cmd("LongPoll", 0, 0, suspend_ms=5000), 10)
            assert r.code == ResponseCode.SUCCESS
            nxt = int(r.ext_fields["nextBeginOffset"])
            t0 = time.monotonic()
            held = asyncio.ensure_future(c.invoke(addr, pull_cmd("LongPoll", 0, nxt, suspend_ms=15000), 20))
            # A request sent after the pull on the same connection is answered: the broker has handled the
            # pull by then, and an empty pull not held would have been answered already.
            await runtime_info(c, addr)
            assert not held.done()  # held, not answered empty
            assert (await c.invoke(addr, send_cmd("LongPoll", b"second"), 5)).code == ResponseCode.SUCCESS
            r = await held
            waited = time.monotonic() - t0
            assert r.code == ResponseCode.SUCCESS
            assert [m.body for m in records(r.body_bytes())] == [b"second"]
            assert waited < 5, f"the held pull took {waited:.2f}s to answer"
            # With no message, the pull is answered PULL_NOT_FOUND once its suspend time is up.
            t0 = time.monotonic()
            r = await c.invoke(addr, pull_cmd("LongPoll", 0, nxt + 1, suspend_ms=500), 10)
            assert r.code == ResponseCode.PULL_NOT_FOUND
            assert 0.4 < time.monotonic() - t0 < 5
        finally:
            await c.close()

    run(scenario())


def test_tag_filter_by_hash_on_the_broker(shared_standalone: Standalone) -> None:
    addr = shared_standalone.broker_addr

    async def scenario() -> None:
        c = RemotingClient()
        try:
            for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA"]):
                r = await c.invoke(addr, send_cmd("TagFilter", b"m%d" % i, props={"TAGS": tag}), 5)
                assert r.code == ResponseCode.SUCCESS
            await wait_max_offset(c, addr, "TagFilter", 0, 4)
            r = await c.invoke(addr, pull_cmd("TagFilter", 0, 0, sub="TagA || TagC"), 5)
            assert r.code == ResponseCode.SUCCESS
            got = records(r.body_bytes())
            assert [(m.body, m.tags) for m in got] == [(b"m0", "TagA"), (b"m2", "TagC"), (b"m3", "TagA")]
            assert r.ext_fields["nextBeginOffset"] == "4"
            r = await c.invoke(addr, pull_cmd("TagFilter", 0, 0, sub="TagZ"), 5)
            assert r.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND)
        finally:
            await c.close()

    run(scenario())


def test_query_by_key_and_view_by_id(shared_standalone: Standalone) -> None:
    addr = shared_standalone.broker_addr

    async def scenario() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(addr, send_cmd("Lookup", b"findme", props={"KEYS": "order-1 order-2", "UNIQ_KEY": "AB" * 16}), 5)
            assert r.code == ResponseCode.SUCCESS
            msg_id = r.ext_fields["msgId"]
            v = await c.invoke(addr, RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID,
                                                     ext_fields={"offset": str(int(msg_id[-16:], 16))}), 5)
            assert v.code == ResponseCode.SUCCESS and decode_record(v.body_bytes()).body == b"findme"
            now = int(time.time() * 1000)
            for key in ("order-2", "AB" * 16):
                q = None
                for _ in range(100):  # the index is built by reput, just after the append
                    q = await c.invoke(addr, RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={
                        "topic": "Lookup", "key": key, "maxNum": "32", "beginTimestamp": str(now - 60000),
                        "endTimestamp": str(now + 60000)}), 5)
                    if q.code == ResponseCode.SUCCESS:
                        break
                    await asyncio.sleep(0.05)
                assert q is not None and q.code == ResponseCode.SUCCESS
                assert [m.body for m in records(q.body_bytes())] == [b"findme"]
            q = await c.invoke(addr, RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={
                "topic": "Lookup", "key": "nope", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(now + 60000)}), 5)
            assert q.code == ResponseCode.QUERY_NOT_FOUND
        finally:
            await c.close()

    run(scenario())


def admin(s: Standalone, *args: str) -> subprocess.CompletedProcess[str]:
    return run_mqadmin(s.namesrv_addr, *args)


def _lag(progress: subprocess.CompletedProcess[str]) -> int:
    assert progress.returncode == 0, progress.stderr
    (line,) = [ln for ln in progress.stdout.splitlines() if ln.startswith("Consume Diff Total:")]
    return int(line.split(":")[1])


def test_admin_topics_and_progress_survive_restart(standalone: Standalone) -> None:
    out = admin(standalone, "updateTopic", "-b", standalone.broker_addr, "-t", "AdminT", "-r", "2", "-w", "2")
    assert out.returncode == 0, out.stderr
    assert "AdminT" in admin(standalone, "topicList").stdout.split()
    bad = admin(standalone, "updateTopic", "-b", standalone.broker_addr, "-t", "bad name")
    assert bad.returncode == 2 and "illegal characters" in bad.stderr

    async def produce_and_commit() -> None:
        c = RemotingClient()
        try:
            for i in range(5):
                assert (await c.invoke(standalone.broker_addr, send_cmd("AdminT", b"x", queue_id=i % 2), 5)).code == 0
            r = await c.invoke(standalone.broker_addr, RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
                "consumerGroup": "AdminG", "topic": "AdminT", "queueId": "0", "commitOffset": "2"}), 5)
            assert r.code == 0
        finally:
            await c.close()

    run(produce_and_commit())
    status = admin(standalone, "topicStatus", "-t", "AdminT")
    assert status.returncode == 0, status.stderr
    assert status.stdout.split()[:4] == ["#Broker", "Name", "#QID", "#Min"]
    # queue 0: 3 sent, 2 consumed; queue 1: 2 sent, none consumed -> 1 + 2
    assert _lag(admin(standalone, "consumerProgress", "-g", "AdminG", "-t", "AdminT")) == 3
    standalone.stop()
    standalone.start()

    async def check_after_restart() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(standalone.broker_addr, RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields={
                "consumerGroup": "AdminG", "topic": "AdminT", "queueId": "0"}), 5)
            assert r.code == 0 and r.ext_fields["offset"] == "2"
            r = await c.invoke(standalone.broker_addr, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG), 5)
            assert "AdminT" in fastjson.loads(r.body_bytes())["topicConfigTable"]
        finally:
            await c.close()

    run(check_after_restart())
    assert _lag(admin(standalone, "consumerProgress", "-g", "AdminG", "-t", "AdminT")) == 3


def test_unreachable_namesrv_is_a_clear_admin_error() -> None:
    from tests.support import free_port

    out = run_mqadmin(f"127.0.0.1:{free_port()}", "topicList")
    assert out.returncode == 1 and "connect failed" in out.stderr


@pytest.mark.parametrize("flag", ["--set", "-c"])
def test_bad_configuration_is_refused(tmp_path, flag: str) -> None:
    arg = "listenPort=notanumber"
    if flag == "-c":
        conf = tmp_path / "broker.conf"
        conf.write_text("# comment\nlistenPort = notanumber\n")
        arg = str(conf)
    # Free ports (Standalone.command), never the defaults: were the check done after binding, a taken 9876
    # would fail the command for another reason.
    out = subprocess.run(Standalone(tmp_path / "d").command() + [flag, arg], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "listenPort" in out.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_process_group_is_one_clean_stop(tmp_path, sig: signal.Signals) -> None:
    """Ctrl-C in a terminal, or ``timeout``, signals every process of the job, the schedule process too: the
    broker alone answers it and stops that process in order, which is not taken for a crash (no "exited ...
    restarting it" error) and leaves no process behind."""
    s = Standalone(tmp_path / "data", new_session=True)
    s.start()
    assert s.proc is not None
    children = psutil.Process(s.proc.pid).children(recursive=True)
    assert any("timer_host" in " ".join(c.cmdline()) for c in children), "no schedule process to signal"
    os.killpg(s.proc.pid, sig)
    assert s.proc.wait(30) == 0, s.log_tail()
    log = s.log_path.read_text()
    assert "TidalMQ stopped" in "".join(s._lines)
    assert "restarting it" not in log and "ERROR" not in log, s.log_tail()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def test_sigterm_right_after_ready_is_a_clean_stop(tmp_path) -> None:
    """The standalone handles SIGTERM from the moment it says it is ready: stopped at once, it shuts down
    cleanly (exit 0, not the default action's -15) and its next start finds the clean-exit mark instead of
    recovering. (The window was the few instructions between the "ready" line and the handlers: a stop
    at once hit it about one start in six; three tries here.)"""
    s = Standalone(tmp_path / "data")
    for _ in range(3):
        s.start()
        assert s.stop() == 0, s.log_tail()
    assert "".join(s._lines).count("TidalMQ stopped") == 3
    assert s.log_path.read_text().count("store load: last exit ok") == 3  # never a recovery
