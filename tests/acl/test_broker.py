"""A standalone with ``aclEnable=true``: who may do what, over the wire."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.acl.conftest import ADMIN, USER, acl_text
from tests.broker.rawclient import pull_cmd, run, send_cmd
from tests.client.helpers import create_topic, uniq
from tests.mqadmin.support import MQADMIN
from tests.support import Standalone, free_port
from tidalmq.acl import RequestSigner, SessionCredentials, namesrv_validator
from tidalmq.client import Admin, Message, MQBrokerError, Producer, PullConsumer, ValidationError
from tidalmq.client.codec import encode_batch
from tidalmq.client.message import MessageQueue
from tidalmq.common import fastjson
from tidalmq.common.record import decode_record
from tidalmq.namesrv.server import NameServer
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import SEND_V2, SendMessageRequestHeader
from tidalmq.remoting.transport import RemotingClient

ACL_REMARK = "org.apache.rocketmq.acl.common.AclException: "

# The requests that administer a broker, with headers that would succeed for an admin.
ADMIN_REQUESTS = [
    (RC.UPDATE_AND_CREATE_TOPIC, {"topic": "made_by_stranger", "defaultTopic": "TBW102", "readQueueNums": "4",
                                  "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG"}),
    (RC.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"}),
    (RC.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "both", "group": "g", "timestamp": "0", "isForce": "true"}),
    (RC.TRIGGER_DELETE_FILES, {}),
    (RC.GET_BROKER_CONFIG, {}),
    (RC.UPDATE_BROKER_CONFIG, {}),
    (RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g"}),
    (RC.GET_BROKE_CONSUME_STATS, {"isOrder": "false"}),
]


def _request(code: int, ext: dict[str, str], creds: SessionCredentials | None = None,
             body: bytes | None = None) -> RemotingCommand:
    cmd = RemotingCommand(code=code, ext_fields=dict(ext), body=body)
    if creds is not None:
        RequestSigner(creds).sign(cmd.ext_fields, body)
    return cmd


async def _invoke(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    c = RemotingClient()
    try:
        return await c.invoke(addr, cmd, 5.0)
    finally:
        await c.close()


def _refused(resp: RemotingCommand) -> str:
    assert resp.code == ResponseCode.SYSTEM_ERROR, (resp.code, resp.remark)
    assert resp.remark is not None and resp.remark.startswith(ACL_REMARK), resp.remark
    return resp.remark[len(ACL_REMARK):]


def test_anonymous_requests_are_refused(acl_standalone: Standalone) -> None:
    addr = acl_standalone.broker_addr

    async def go() -> None:
        for code, ext in ADMIN_REQUESTS:
            assert _refused(await _invoke(addr, _request(code, ext))) == "No accessKey is configured", code
        # everyday codes too: the stranger cannot read the broker at all
        for cmd in (send_cmd("both", b"x"), pull_cmd("both", 0, 0),
                    _request(RC.GET_BROKER_RUNTIME_INFO, {}), _request(RC.VIEW_MESSAGE_BY_ID, {"offset": "0"})):
            assert _refused(await _invoke(addr, cmd)) == "No accessKey is configured"
        # nothing happened: the topic was not created, TBW102 is still there
        async with Admin(acl_standalone.namesrv_addr, credentials=ADMIN) as admin:
            assert await admin.topic_config("made_by_stranger") == {}
            assert [c["topicName"] for c in (await admin.topic_config("TBW102")).values()] == ["TBW102"]

    run(go())


def test_unknown_key_and_wrong_secret_are_refused(acl_standalone: Standalone) -> None:
    addr = acl_standalone.broker_addr
    ext = {"topic": "both", "queueId": "0"}

    async def go() -> None:
        r = await _invoke(addr, _request(RC.GET_MAX_OFFSET, ext, SessionCredentials("strangerKey", "whatever1")))
        assert _refused(r) == "No acl config for strangerKey"
        r = await _invoke(addr, _request(RC.GET_MAX_OFFSET, ext, SessionCredentials(USER.access_key, "notTheSecret")))
        assert _refused(r) == f"Check signature failed for accessKey={USER.access_key}"
        unsigned = _request(RC.GET_MAX_OFFSET, {**ext, "AccessKey": USER.access_key})
        assert _refused(await _invoke(addr, unsigned)) == f"Check signature failed for accessKey={USER.access_key}"
        assert (await _invoke(addr, _request(RC.GET_MAX_OFFSET, ext, USER))).code == ResponseCode.SUCCESS

    run(go())


async def _interleaved_large_sends(addr: str, topic: str, body: bytes, wrong: SessionCredentials,
                                   busy_ok: bool = False) -> None:
    """24 sends of ``body`` in flight on one connection, every third signed with ``wrong``: each answered
    by its own verdict (``busy_ok``: a right one may be refused as waiting too long, SYSTEM_BUSY)."""
    c = RemotingClient()
    try:
        cmds = [_request(RC.SEND_MESSAGE_V2, send_cmd(topic, body + bytes([i])).ext_fields,
                         wrong if i % 3 == 1 else USER, body + bytes([i])) for i in range(24)]
        replies = await asyncio.gather(*(c.invoke(addr, cmd, 15.0) for cmd in cmds))
        for i, r in enumerate(replies):
            if i % 3 == 1:
                assert _refused(r) == f"Check signature failed for accessKey={USER.access_key}"
            elif not (busy_ok and r.code == ResponseCode.SYSTEM_BUSY):
                assert r.code == ResponseCode.SUCCESS, (i, r.code, r.remark)
    finally:
        await c.close()


def test_pipelined_large_sends_each_get_their_own_verdict(acl_standalone: Standalone) -> None:
    """Many large signed sends in flight on one connection (judged ahead together, docs/acl.md), right and
    wrong signatures interleaved: each is answered by its own verdict and only the right ones are stored."""
    ns, addr = acl_standalone.namesrv_addr, acl_standalone.broker_addr
    body = os.urandom(64 * 1024)
    wrong = SessionCredentials(USER.access_key, "notTheSecret")

    async def go() -> None:
        await create_topic(ns, "bulk", 1, credentials=ADMIN)
        await _interleaved_large_sends(addr, "bulk", body, wrong)
        async with PullConsumer("readers", ns, credentials=USER) as consumer:
            mq = MessageQueue("bulk", (await consumer.fetch_queues("bulk"))[0].broker_name, 0)
            stored: list[int] = []
            offset = 0
            while offset < 16:  # a pull carries at most 256 KiB of these 64 KiB bodies
                got = await consumer.pull(mq, offset, max_nums=32)
                assert got.messages, got.status
                stored += [m.body[-1] for m in got.messages]
                offset = got.next_begin_offset
            assert sorted(stored) == [i for i in range(24) if i % 3 != 1]
            assert (await consumer.pull(mq, offset)).status.name == "NO_NEW_MSG"

    run(go(), 90)


def test_large_sends_are_checked_by_the_signature_worker_and_without_it(acl_standalone: Standalone) -> None:
    """Large signed requests have their signatures checked in the broker's signature worker (docs/acl.md,
    "Cost"). A worker that stops answering is replaced: meanwhile every request is still judged by its own
    verdict, on the event loop, and a new worker takes over."""
    ns, addr = acl_standalone.namesrv_addr, acl_standalone.broker_addr
    body = os.urandom(32 * 1024)
    wrong = SessionCredentials(USER.access_key, "notTheSecret")
    assert acl_standalone.proc is not None
    broker = psutil.Process(acl_standalone.proc.pid)

    def workers() -> list[int]:
        return [p.pid for p in broker.children() if "signature_worker" in " ".join(p.cmdline())]

    async def go() -> None:
        await create_topic(ns, "bulk", 1, credentials=ADMIN)
        deadline = time.monotonic() + 30
        while len(workers()) != 1:
            assert time.monotonic() < deadline, "no signature worker"
            await asyncio.sleep(0.05)
        (stuck,) = workers()
        await _interleaved_large_sends(addr, "bulk", body, wrong)
        os.kill(stuck, signal.SIGSTOP)  # its answers stop: the broker replaces it (ANSWER_TIMEOUT_S)
        try:  # the requests waiting for its answers may wait longer than a send may (waitTimeMillsInSendQueue)
            # Large requests reach it and wait for its answers: it is killed for not answering. (A send that
            # came while the worker's socket was full was judged inline, so this may take more than one round.)
            while stuck in workers():
                assert time.monotonic() < deadline, "the stopped signature worker was not replaced"
                await _interleaved_large_sends(addr, "bulk", body, wrong, busy_ok=True)
            while not workers():  # a new one once RESTART_AFTER_S has passed and large requests come
                assert time.monotonic() < deadline, "no new signature worker"
                await _interleaved_large_sends(addr, "bulk", body, wrong)
        finally:
            if psutil.pid_exists(stuck):
                os.kill(stuck, signal.SIGKILL)

    run(go(), 90)


def test_non_admin_account_is_refused_admin_codes(acl_standalone: Standalone) -> None:
    addr = acl_standalone.broker_addr

    async def go() -> None:
        for code, ext in ADMIN_REQUESTS:
            why = _refused(await _invoke(addr, _request(code, ext, USER)))
            assert why == f"Need admin permission for request code={int(code)}, but accessKey={USER.access_key} is not"
        # the admin account may
        r = await _invoke(addr, _request(RC.GET_BROKER_CONFIG, {}, ADMIN))
        assert r.code == ResponseCode.SUCCESS and b"aclEnable=true" in r.body_bytes()

    run(go())


def test_topic_permissions_on_send_and_pull(acl_standalone: Standalone) -> None:
    ns = acl_standalone.namesrv_addr

    async def go() -> None:
        for topic in ("pubOnly", "subOnly", "both", "denied", "unlisted"):
            await create_topic(ns, topic, 1, credentials=ADMIN)
        async with Producer(uniq("pg"), ns, credentials=USER, retry_times_when_send_failed=0) as p:
            for topic in ("pubOnly", "both"):
                assert (await p.send(Message(topic, b"hello"))).status.name == "SEND_OK"
            for topic, why in (("subOnly", "No permission for topic:subOnly"),
                               ("denied", "No permission for topic:denied"),
                               ("unlisted", "No default permission for topic:unlisted")):
                with pytest.raises(MQBrokerError) as e:
                    await p.send(Message(topic, b"hello"))
                assert e.value.code == ResponseCode.SYSTEM_ERROR and e.value.remark == ACL_REMARK + why
        async with PullConsumer("readers", ns, credentials=USER) as c:
            got = await c.pull(MessageQueue("both", (await c.fetch_queues("both"))[0].broker_name, 0), 0)
            assert [m.body for m in got.messages] == [b"hello"]
            broker = (await c.fetch_queues("subOnly"))[0].broker_name
            assert (await c.pull(MessageQueue("subOnly", broker, 0), 0)).status.name == "NO_NEW_MSG"
            for topic in ("pubOnly", "denied"):
                with pytest.raises(MQBrokerError, match=f"No permission for topic:{topic}"):
                    await c.pull(MessageQueue(topic, broker, 0), 0)
            # The pipelined raw pulls (the Spark source's) are signed one by one, their fields built each time.
            for topic, allowed in (("both", True), ("denied", False)):
                pipe = await c.raw_pipeline(MessageQueue(topic, broker, 0))
                for offset, nums in ((-1, 32), (0, 0)):  # refused before anything is sent, as pull_raw does
                    with pytest.raises(ValidationError):
                        pipe.send(offset, nums)
                fut = pipe.send(0, 32)
                assert fut is not None
                answer = await fut
                if allowed:
                    raw = pipe.result(answer, 0)
                    assert raw.status.name == "FOUND" and raw.next_begin_offset == 1
                    assert decode_record(memoryview(raw.body)).body == b"hello"
                else:
                    with pytest.raises(MQBrokerError, match="No permission for topic:denied"):
                        pipe.result(answer, 0)
        async with PullConsumer("deniedGroup", ns, credentials=USER) as c:
            with pytest.raises(MQBrokerError, match="No permission for group:deniedGroup"):
                await c.pull(MessageQueue("both", broker, 0), 0)

    run(go(), 90)


def _batch(topic: str, form: int, creds: SessionCredentials, n: int = 3) -> RemotingCommand:
    """A SEND_BATCH_MESSAGE of ``n`` messages with the header in spelling ``form`` (0: the Java client's full
    names, SEND_V2: the C++ client's V2 letters)."""
    ext = SendMessageRequestHeader(producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
                                   queue_id=0, born_timestamp=int(time.time() * 1000), batch=True).to_ext(form)
    body = encode_batch([Message(topic, b"batched %d" % i) for i in range(n)])
    return _request(RC.SEND_BATCH_MESSAGE, ext, creds, body)


def test_a_batch_in_either_spelling_needs_pub_on_its_topic(acl_standalone: Standalone) -> None:
    """The topic of a SEND_BATCH_MESSAGE is read from the spelling its header uses, by the ACL as by the
    send path: a batch in the full names (as the Java client sends it) to a topic the account has no
    right on is refused, stores nothing and creates no topic."""
    addr, ns = acl_standalone.broker_addr, acl_standalone.namesrv_addr

    async def go() -> None:
        await create_topic(ns, "denied", 1, credentials=ADMIN)
        await create_topic(ns, "both", 1, credentials=ADMIN)
        fresh = uniq("protected")
        async with Admin(ns, credentials=ADMIN) as admin:
            before = [q.max_offset for q in await admin.topic_status("denied")]
            for form in (0, SEND_V2):
                for topic, why in (("denied", "No permission for topic:denied"),
                                   (fresh, f"No default permission for topic:{fresh}")):
                    assert _refused(await _invoke(addr, _batch(topic, form, USER))) == why, (form, topic)
                # the same connection's cached verdicts: a right topic in one spelling lets no other through
                c = RemotingClient()
                try:
                    for topic, ok in (("both", True), ("denied", False), ("both", True), (fresh, False)):
                        r = await c.invoke(addr, _batch(topic, form, USER), 5.0)
                        assert (r.code == ResponseCode.SUCCESS) == ok, (form, topic, r.code, r.remark)
                finally:
                    await c.close()
            assert [q.max_offset for q in await admin.topic_status("denied")] == before
            assert await admin.topic_config(fresh) == {}

    run(go(), 60)


async def _wait_code(addr: str, cmd_factory, want_ok: bool, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        r = await _invoke(addr, cmd_factory())
        if (r.code == ResponseCode.SUCCESS) == want_ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout}s the broker still answers [{r.code}] {r.remark}")
        await asyncio.sleep(0.1)


def test_file_change_is_picked_up_and_a_broken_file_ignored(acl_standalone: Standalone) -> None:
    addr = acl_standalone.broker_addr
    path = acl_standalone.data_dir / "conf" / "plain_acl.yml"

    def anonymous() -> RemotingCommand:
        return _request(RC.GET_BROKER_CONFIG, {})

    async def go() -> None:
        try:
            assert (await _invoke(addr, anonymous())).code == ResponseCode.SYSTEM_ERROR
            path.write_text(acl_text(["127.0.0.1"]))  # the loopback becomes a global white address
            await _wait_code(addr, anonymous, want_ok=True)
            path.write_text("accounts: [ {accessKey: broken")  # kept out: the previous ACL stays
            await _wait_log(acl_standalone, "ACL not reloaded")
            assert (await _invoke(addr, anonymous())).code == ResponseCode.SUCCESS
        finally:
            path.write_text(acl_text())
        await _wait_code(addr, anonymous, want_ok=False)
        # The NameServer watches the same file on its own: wait until it has the restored ACL too, so
        # the tests after this one see both servers without the loopback white address.
        await _wait_code(acl_standalone.namesrv_addr,
                         lambda: _request(RC.PUT_KV_CONFIG, {"namespace": "acltest", "key": "k", "value": "v"}),
                         want_ok=False)

    run(go(), 60)


async def _wait_log(s: Standalone, text: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in s.log_path.read_text():
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never appeared in the log\n{s.log_tail()}")
        await asyncio.sleep(0.1)


# ---- the NameServer -----------------------------------------------------------------------------------

def _register_fake(creds: SessionCredentials | None) -> RemotingCommand:
    body = fastjson.dumpb({"topicConfigSerializeWrapper": {"topicConfigTable": {"both": {
        "topicName": "both", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}, "dataVersion": {}},
        "filterServerList": []})
    ext = {"brokerName": "fake", "brokerAddr": "10.9.9.9:10911", "clusterName": "DefaultCluster",
           "haServerAddr": "10.9.9.9:10912", "brokerId": "0"}
    return _request(RC.REGISTER_BROKER, ext, creds, body)


def test_namesrv_refuses_anonymous_registration_and_writes(acl_standalone: Standalone) -> None:
    ns = acl_standalone.namesrv_addr

    async def go() -> None:
        assert _refused(await _invoke(ns, _register_fake(None))) == "No accessKey is configured"
        why = _refused(await _invoke(ns, _register_fake(USER)))
        assert why == f"Need admin permission for request code={int(RC.REGISTER_BROKER)}, but accessKey={USER.access_key} is not"
        for code, ext in ((RC.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}),
                          (RC.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}),
                          (RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "both"}),
                          (RC.UNREGISTER_BROKER, {"brokerName": "x", "brokerAddr": "1.2.3.4:1", "clusterName": "c",
                                                  "brokerId": "0"})):
            assert _refused(await _invoke(ns, _request(code, ext))) == "No accessKey is configured"
        # reads stay open, and the real broker (signing with the standalone's own account) is routed
        route = await _invoke(ns, _request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}))
        assert route.code == ResponseCode.SUCCESS
        addrs = [a for b in fastjson.loads(route.body_bytes())["brokerDatas"] for a in b["brokerAddrs"].values()]
        assert addrs == [acl_standalone.broker_addr]
        # an admin may write
        ok = await _invoke(ns, _request(RC.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}, ADMIN))
        assert ok.code == ResponseCode.SUCCESS

    run(go())


WHITE_USER = SessionCredentials("whiteUser1", "whiteSecret1")


def test_namesrv_account_white_address_is_no_admin(tmp_path: Path) -> None:
    """At the NameServer an account's whiteRemoteAddress spares the signature, not the need to be an admin:
    REGISTER_BROKER unsigned from a non-admin account's white address is refused; from a global white
    address, or signed by an admin, it is routed."""
    conf = tmp_path / "conf"
    conf.mkdir()
    accounts = (f"accounts:\n  - accessKey: {WHITE_USER.access_key}\n    secretKey: {WHITE_USER.secret_key}\n"
                "    whiteRemoteAddress: 127.0.0.1\n    admin: false\n    defaultTopicPerm: PUB|SUB\n"
                f"  - accessKey: {ADMIN.access_key}\n    secretKey: {ADMIN.secret_key}\n    admin: true\n")
    (conf / "plain_acl.yml").write_text("globalWhiteRemoteAddresses: []\n" + accounts)
    v = namesrv_validator(tmp_path)

    def fake(name: str) -> RemotingCommand:
        cmd = _register_fake(None)
        cmd.ext_fields.update(brokerName=name, brokerAddr=f"10.9.9.{len(name)}:10911")
        return cmd

    async def go() -> None:
        ns = NameServer("127.0.0.1", 0, acl=v)
        await ns.start()
        addr = f"127.0.0.1:{ns.port}"
        c = RemotingClient()  # one connection: the NameServer drops a broker whose connection closes
        try:
            unsigned = fake("fakeWhite")
            unsigned.ext_fields["AccessKey"] = WHITE_USER.access_key
            assert _refused(await c.invoke(addr, unsigned, 5.0)) == (
                f"Need admin permission for request code={int(RC.REGISTER_BROKER)}, "
                f"but accessKey={WHITE_USER.access_key} is not")
            assert _refused(await c.invoke(addr, _request(RC.REGISTER_BROKER, fake("fakeSigned").ext_fields,
                                                          WHITE_USER, fake("x").body_bytes()), 5.0)).startswith("Need admin")
            signed = fake("fakeAdmin")
            RequestSigner(ADMIN).sign(signed.ext_fields, signed.body)
            assert (await c.invoke(addr, signed, 5.0)).code == ResponseCode.SUCCESS
            (conf / "plain_acl.yml").write_text("globalWhiteRemoteAddresses: ['127.0.0.1']\n" + accounts)
            assert v.reload_if_changed()
            assert (await c.invoke(addr, fake("fakeGlobal"), 5.0)).code == ResponseCode.SUCCESS
            assert set(ns.routes.cluster_info()["brokerAddrTable"]) == {"fakeAdmin", "fakeGlobal"}
        finally:
            await c.close()
            await ns.stop()

    run(go(), 30)


def test_broker_signs_with_its_configured_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """accessKey/secretKey in broker.conf sign REGISTER_BROKER; rocketmq.acl.plain.file names the file."""
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    acl = tmp_path / "elsewhere" / "acl.yml"
    acl.parent.mkdir()
    acl.write_text(acl_text())
    conf = tmp_path / "broker.conf"
    conf.write_text(f"aclEnable=true\nrocketmq.acl.plain.file={acl}\naccessKey={ADMIN.access_key}\n"
                    f"secretKey={ADMIN.secret_key}\n")
    s = Standalone(tmp_path / "data")
    s.command = lambda: [*Standalone.command(s), "-c", str(conf)]  # type: ignore[method-assign]
    with s:
        async def go() -> None:
            r = await _invoke(s.namesrv_addr, _request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}))
            assert r.code == ResponseCode.SUCCESS
            r = await _invoke(s.broker_addr, _request(RC.GET_BROKER_CONFIG, {}, ADMIN))
            text = r.body_bytes().decode()
            assert "secretKey=******" in text and ADMIN.secret_key not in text
            assert _refused(await _invoke(s.broker_addr, _request(RC.GET_BROKER_CONFIG, {}))) == "No accessKey is configured"

        run(go())


# ---- mqadmin and tidalmq admin ---------------------------------------------------------------------------

def _cli(s: Standalone, *args: str, env: dict[str, str] | None = None, tool: str = "admin") -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("TIDALMQ_ACCESS_KEY", "TIDALMQ_SECRET_KEY", "ROCKETMQ_HOME")}
    cmd = [MQADMIN, *args, "-n", s.namesrv_addr] if tool == "mqadmin" else \
        [sys.executable, "-m", "tidalmq.cli", "admin", "-n", s.namesrv_addr, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**base, **(env or {})})


def test_admin_cli_signs_with_options_environment_or_tools_yml(acl_standalone: Standalone, tmp_path: Path) -> None:
    topic, addr = uniq("cli"), acl_standalone.broker_addr
    create = ["updateTopic", "-b", addr, "-t", topic, "-r", "2", "-w", "2"]
    refused = _cli(acl_standalone, *create, tool="mqadmin")
    assert refused.returncode == 1
    assert f"CODE: 1 DESC: {ACL_REMARK}No accessKey is configured" in refused.stderr
    user = {"TIDALMQ_ACCESS_KEY": USER.access_key, "TIDALMQ_SECRET_KEY": USER.secret_key}
    not_admin = _cli(acl_standalone, *create, env=user, tool="mqadmin")
    assert not_admin.returncode == 1 and "Need admin permission" in not_admin.stderr
    env = {"TIDALMQ_ACCESS_KEY": ADMIN.access_key, "TIDALMQ_SECRET_KEY": ADMIN.secret_key}
    ok = _cli(acl_standalone, *create, env=env, tool="mqadmin")
    assert ok.returncode == 0, ok.stderr
    status = _cli(acl_standalone, "topicStatus", "-t", topic, env=env, tool="mqadmin")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = [ln for ln in status.stdout.splitlines()[1:] if ln.strip() and not ln.startswith("Topic Put TPS")]
    assert len(rows) == 2, status.stdout  # a row per queue
    # mqadmin's $ROCKETMQ_HOME/conf/tools.yml
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "tools.yml").write_text(f"accessKey: {ADMIN.access_key}\nsecretKey: {ADMIN.secret_key}\n")
    deleted = _cli(acl_standalone, "deleteTopic", "-c", "DefaultCluster", "-t", topic,
                   env={"ROCKETMQ_HOME": str(tmp_path)}, tool="mqadmin")
    assert deleted.returncode == 0, deleted.stderr
    half = _cli(acl_standalone, "topicList", env={"TIDALMQ_ACCESS_KEY": ADMIN.access_key}, tool="mqadmin")
    assert half.returncode == 2 and "secret key" in half.stderr
    # tidalmq admin's options, the same account resolution
    group = uniq("cliG")
    listed = _cli(acl_standalone, "--access-key", ADMIN.access_key, "--secret-key", ADMIN.secret_key, "dlq", "list", group)
    assert listed.returncode == 0 and f"group {group} has no dead letters" in listed.stdout, listed.stderr
    half = _cli(acl_standalone, "--access-key", ADMIN.access_key, "dlq", "list", group)
    assert half.returncode == 2 and "secret key" in half.stderr


def test_namesrv_command_acl_option(tmp_path: Path) -> None:
    """``tidalmq namesrv --acl-enable --acl-file F``: its own ACL, the same rules as the standalone's."""
    (tmp_path / "acl.yml").write_text(acl_text())
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidalmq.cli", "namesrv", "-p", str(port), "--data-dir",
                             str(tmp_path / "data"), "--acl-enable", "--acl-file", str(tmp_path / "acl.yml")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None and "ready" in proc.stdout.readline()
        ns = f"127.0.0.1:{port}"

        async def go() -> None:
            assert _refused(await _invoke(ns, _register_fake(None))) == "No accessKey is configured"
            c = RemotingClient()  # one connection: the NameServer forgets a broker whose connection closes
            try:
                assert (await c.invoke(ns, _register_fake(ADMIN), 5)).code == ResponseCode.SUCCESS
                route = await c.invoke(ns, _request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "both"}), 5)  # unsigned read
                assert route.code == ResponseCode.SUCCESS and b"10.9.9.9:10911" in route.body_bytes()
            finally:
                await c.close()

        run(go())
    finally:
        proc.terminate()
        proc.wait(10)
