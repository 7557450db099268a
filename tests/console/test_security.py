"""The console's guards, over plain HTTP (no browser needed): the login with ACL, the CSRF token on every
state-changing action, bad HTTP refused, and ``tidalmq console -n`` in front of a running cluster."""

from __future__ import annotations

import asyncio
import re
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acl.conftest import ADMIN, acl_text
from tests.console.support import admin_call, console_process, http, run
from tests.support import ModuleTmp, Standalone, free_port
from tidalmq.client import Admin, Message, Producer
from tidalmq.common.msgid import encode_offset_msg_id, host_bytes

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(scope="module")
def acl_console(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    data = module_tmp("acl-console") / "data"
    (data / "conf").mkdir(parents=True)
    (data / "conf" / "plain_acl.yml").write_text(acl_text())
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ROCKETMQ_HOME", raising=False)  # the data directory is the home
        s = Standalone(data, {"aclEnable": "true", "accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key})
        s.start()
    try:
        yield s
    finally:
        s.stop()


def test_with_acl_the_console_asks_for_the_login_and_signs_with_it(acl_console: Standalone) -> None:
    s = acl_console
    status, _ = http(s.console_url + "/topics")
    assert status == 401
    assert http(s.console_url + "/topics", auth=(ADMIN.access_key, "wrong"))[0] == 401
    assert http(s.console_url + "/topics", auth=("appUser1", ADMIN.secret_key))[0] == 401
    status, page = http(s.console_url + "/topics", auth=(ADMIN.access_key, ADMIN.secret_key))
    assert status == 200 and "TBW102" in page  # its requests to the broker are signed: the list came back
    token = CSRF.search(page)
    assert token is not None
    status, page = http(s.console_url + "/topics/create", {"csrf": token.group(1), "topic": "AclConsole",
                                                           "queues": "2"}, auth=(ADMIN.access_key, ADMIN.secret_key))
    assert status == 200 and "topic AclConsole created" in page

    async def listed() -> list[str]:
        async with Admin(s.namesrv_addr, credentials=ADMIN) as admin:
            return await admin.topic_list()

    assert "AclConsole" in run(listed())


def test_a_post_without_the_csrf_token_changes_nothing(shared_standalone: Standalone) -> None:
    s = shared_standalone
    for form in ({"topic": "CsrfVictim", "queues": "2"}, {"csrf": "guessed", "topic": "CsrfVictim", "queues": "2"}):
        status, text = http(s.console_url + "/topics/create", form)
        assert status == 403 and "CSRF" in text
    assert "CsrfVictim" not in run(admin_call(s, "topic_list"))
    # state changes are POST only: the same action by GET is no page
    assert http(s.console_url + "/topics/create?topic=CsrfVictim&queues=2")[0] == 404
    assert "CsrfVictim" not in run(admin_call(s, "topic_list"))


def test_a_request_naming_another_host_is_refused(shared_standalone: Standalone) -> None:
    """DNS rebinding: evil.example re-pointed at 127.0.0.1 reaches the port, but the console answers only
    to IP addresses, localhost and consoleAllowedHosts."""
    s = shared_standalone
    refused = raw(s, b"GET /topics HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n" % s.console_port)
    assert refused.startswith(b"HTTP/1.1 421 ") and b"csrf" not in refused
    for host in (b"localhost", b"127.0.0.1", b"[::1]"):
        ok = raw(s, b"GET /topics HTTP/1.1\r\nHost: " + host + b":%d\r\n\r\n" % s.console_port)
        assert ok.startswith(b"HTTP/1.1 200 "), host


def test_system_topics_are_not_deleted(shared_standalone: Standalone) -> None:
    s = shared_standalone
    status, page = http(s.console_url + "/topics")
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", page) if ">TBW102<" in r)
    assert "Delete" not in row
    token = CSRF.search(page)
    assert token is not None
    status, page = http(s.console_url + "/topics/delete", {"csrf": token.group(1), "topic": "TBW102"})
    assert 'class="error"' in page and "TBW102 is a system topic" in page
    assert "TBW102" in run(admin_call(s, "topic_list"))


def raw(s: Standalone, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", s.console_port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_bad_http_is_refused_and_the_console_keeps_serving(shared_standalone: Standalone) -> None:
    s = shared_standalone
    assert raw(s, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(s, b"GET / HTTP/1.1\r\nX: " + b"a" * 40_000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431 ")
    assert raw(s, b"POST /topics/create HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999\r\n\r\n").startswith(b"HTTP/1.1 413 ")
    assert raw(s, b"DELETE / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert raw(s, b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 404 ")
    status, page = http(s.console_url + "/messages?topic=NoSuchTopic&key=k")
    assert status == 200 and 'class="error"' in page  # the broker's refusal, on the page
    assert http(s.console_url + "/")[0] == 200


def test_tidalmq_console_command_serves_a_running_cluster(shared_standalone: Standalone, tmp_path: Path) -> None:
    s = shared_standalone
    port = free_port()
    with console_process("-n", s.namesrv_addr, "--port", str(port)):
        status, page = http(f"http://127.0.0.1:{port}/")
        assert status == 200 and s.broker_addr in page


def test_with_acl_but_no_account_the_standalone_serves_no_console(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No accessKey/secretKey: no login to ask for, so no console (an open one would administer for anyone)."""
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    data = tmp_path / "data"
    (data / "conf").mkdir(parents=True)
    (data / "conf" / "plain_acl.yml").write_text(acl_text())
    with Standalone(data, {"aclEnable": "true"}) as s:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", s.console_port), timeout=5).close()
        assert "web console is not served" in s.log_tail()


def test_console_enable_false_serves_no_console(tmp_path: Path) -> None:
    with Standalone(tmp_path / "data", {"consoleEnable": "false"}) as s:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", s.console_port), timeout=5).close()
        assert not any(" console http" in line for line in s._lines)  # the ready line names no console


def test_a_cluster_that_does_not_answer_is_reported_and_the_console_keeps_serving() -> None:
    """A NameServer nobody listens on: each page says so (502 with the reason); the console stays up."""
    from tidalmq.console.server import ConsoleServer

    async def scenario() -> list[bytes]:
        console = ConsoleServer("127.0.0.1", 0, f"127.0.0.1:{free_port()}")
        await console.start()
        try:
            answers = []
            for path in (b"/", b"/topics", b"/groups", b"/schedule"):
                reader, writer = await asyncio.open_connection("127.0.0.1", console.port)
                writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answers.append(await reader.read())
                writer.close()
            return answers
        finally:
            await console.stop()

    for answer in run(scenario()):
        assert answer.startswith(b"HTTP/1.1 502 ") and b'class="error"' in answer, answer[:300]


def test_a_request_never_finished_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that opens a connection and sends half a request holds it no longer than READ_TIMEOUT_S."""
    from tidalmq.console import http as console_http
    from tidalmq.console.server import ConsoleServer

    monkeypatch.setattr(console_http, "READ_TIMEOUT_S", 0.3)

    async def scenario() -> tuple[bytes, float]:
        console = ConsoleServer("127.0.0.1", 0, f"127.0.0.1:{free_port()}")
        await console.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", console.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: 127")
            t0 = asyncio.get_running_loop().time()
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return answer, asyncio.get_running_loop().time() - t0
        finally:
            await console.stop()

    answer, waited = run(scenario())
    assert answer == b"" and waited < 5  # closed without an answer, once the time ran out


# --- the console only talks to the cluster's own brokers ------------------------------------------------

@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port nobody serves but the test: what connects lands in its accept queue."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as srv:
        srv.setblocking(False)
        yield srv


def nothing_connected(srv: socket.socket) -> bool:
    """No connection waits to be accepted. Called once the console has answered: a connect it made before
    answering has completed its handshake by then, so the queue holds it without any waiting."""
    readable, _, _ = select.select([srv], [], [], 0)
    return not readable


def pointing_at(srv: socket.socket, offset: int = 0) -> str:
    """An offset msgId whose store host and port are the listener's."""
    return encode_offset_msg_id(host_bytes("127.0.0.1"), srv.getsockname()[1], offset)


def test_a_message_id_pointing_at_an_unlisted_address_is_refused_unconnected(
        shared_standalone: Standalone, listener: socket.socket) -> None:
    s = shared_standalone
    msg_id = pointing_at(listener, 4096)
    status, page = http(s.console_url + f"/messages?id={msg_id}")
    assert nothing_connected(listener)
    assert status == 404 and f"127.0.0.1:{listener.getsockname()[1]}" in page
    assert "not a broker of this cluster" in page
    # with a topic it is looked up as a client id in that topic's index instead: still no connection
    status, page = http(s.console_url + f"/messages?id={msg_id}&topic=TBW102")
    assert status == 404 and f"no message with id {msg_id}" in page
    assert nothing_connected(listener)
    # the console itself still works for the next visitor, and its broker is where it always was
    assert http(s.console_url + "/")[0] == 200


def test_a_message_id_of_a_listed_broker_is_shown(shared_standalone: Standalone) -> None:
    s = shared_standalone

    async def send() -> str:
        async with Admin(s.namesrv_addr) as admin:
            await admin.create_topic("ConsoleById", 2)
        async with Producer("console-by-id", s.namesrv_addr) as p:
            return (await p.send(Message("ConsoleById", "found by its offset id"))).offset_msg_id

    offset_id = run(send())
    status, page = http(s.console_url + f"/messages?id={offset_id}")
    assert status == 200 and "found by its offset id" in page


def test_with_acl_nothing_signed_goes_to_an_unlisted_address(acl_console: Standalone,
                                                              listener: socket.socket) -> None:
    s = acl_console
    login = (ADMIN.access_key, ADMIN.secret_key)
    status, page = http(s.console_url + f"/messages?id={pointing_at(listener)}", auth=login)
    assert nothing_connected(listener)  # no request, hence no signature to capture and replay
    assert status == 404 and "not a broker of this cluster" in page
    status, page = http(s.console_url + f"/messages?id={pointing_at(listener)}&topic=TBW102", auth=login)
    assert status == 404 and nothing_connected(listener)


def test_an_address_the_cluster_does_not_list_gets_no_request(shared_standalone: Standalone,
                                                             listener: socket.socket) -> None:
    """The check is the console's admin client's, under every page: a broker address the NameServer
    lists is asked, any other is refused before a connection is made."""
    from tidalmq.console.cluster_admin import ClusterAdmin, UnlistedAddress

    async def scenario() -> None:
        async with ClusterAdmin(shared_standalone.namesrv_addr) as admin:
            assert (await admin.broker_runtime_info(shared_standalone.broker_addr))["brokerRole"]
            with pytest.raises(UnlistedAddress, match="not a broker the NameServer lists"):
                await admin.broker_config(f"127.0.0.1:{listener.getsockname()[1]}")

    run(scenario())
    assert nothing_connected(listener)


def test_get_pages_change_nothing(shared_standalone: Standalone) -> None:
    """Every page the console serves by GET, with every parameter it reads, leaves the cluster's topics
    and groups as they were: state changes are the POST actions' only."""
    s = shared_standalone
    before = run(admin_call(s, "topic_list")), run(admin_call(s, "group_list"))
    for path in ("/", "/topics", "/groups", "/messages?topic=GetTopic", "/messages?topic=GetTopic&key=k",
                 "/messages?id=0A0B0C0D00002A9F0000000000000000&topic=GetTopic",
                 "/messages?topic=GetTopic&begin=2026-01-01T00:00:00&end=2026-01-02T00:00:00",
                 "/dlq?group=GetGroup", "/schedule", "/schedule?topic=GetTopic&key=k",
                 "/topics/create?topic=GetTopic&queues=2", "/topics/delete?topic=TBW102",
                 "/dlq/resend?group=GetGroup&all=1", "/schedule/cancel?topic=GetTopic&uniq_key=k"):
        status, _ = http(s.console_url + path)
        assert status in (200, 404), path
    assert (run(admin_call(s, "topic_list")), run(admin_call(s, "group_list"))) == before


# --- malformed requests: 400, never 500 ------------------------------------------------------------------

@pytest.mark.parametrize("request_bytes", [
    pytest.param(b"GET /dlq?group=a/b HTTP/1.1\r\n", id="illegal-group"),
    pytest.param(b"GET /dlq?group=%FF%FE HTTP/1.1\r\n", id="non-utf8-group"),
    pytest.param(b"POST /topics/create HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n", id="5000-digit-length"),
    pytest.param(b"POST /topics/create HTTP/1.1\r\nContent-Length: \xb2\r\n", id="superscript-length"),
    pytest.param(b"POST /topics/create HTTP/1.1\r\nContent-Length: -1\r\n", id="negative-length"),
    pytest.param(b"GET /[ HTTP/1.1\r\n", id="bracket"),
    pytest.param(b"GET //[ HTTP/1.1\r\n", id="double-slash-bracket"),
    pytest.param(b"GET http://[/ HTTP/1.1\r\n", id="absolute-url"),
    pytest.param(b"GET * HTTP/1.1\r\n", id="asterisk"),
    pytest.param(b"GET /messages?topic=\xff\xfe HTTP/1.1\r\n", id="raw-non-ascii"),
    pytest.param(b"GET /messages?topic=T&begin=yesterday HTTP/1.1\r\n", id="bad-begin"),
    pytest.param(b"GET /messages?topic=T&end=2026-13-45T99:00:00 HTTP/1.1\r\n", id="bad-end"),
])
def test_malformed_requests_get_400_and_no_traceback(shared_standalone: Standalone, request_bytes: bytes) -> None:
    s = shared_standalone
    logged_before = s.log_path.stat().st_size
    answer = raw(s, request_bytes + b"Host: 127.0.0.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert b"Traceback" not in answer and b"internal error" not in answer
    # a failed page logs before it answers: by now the line would be in the file
    with open(s.log_path, "rb") as f:
        f.seek(logged_before)
        assert b"console page failed" not in f.read()
    assert http(s.console_url + "/")[0] == 200


def test_a_failing_page_answers_500_and_logs_one_short_line(caplog: pytest.LogCaptureFixture) -> None:
    """A bug a request can reach, asked for in a loop, writes one line without a traceback, not one a request."""
    from tidalmq.console.server import ConsoleServer

    async def broken(_req: object) -> object:
        raise KeyError("a bug")

    async def scenario() -> list[bytes]:
        console = ConsoleServer("127.0.0.1", 0, f"127.0.0.1:{free_port()}")
        console.gets["/"] = broken  # type: ignore[assignment]
        await console.start()
        try:
            answers = []
            for _ in range(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", console.port)
                writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answers.append(await reader.read())
                writer.close()
            return answers
        finally:
            await console.stop()

    with caplog.at_level("WARNING", logger="tidalmq.console"):
        answers = run(scenario())
    assert all(a.startswith(b"HTTP/1.1 500 ") and b"a bug" not in a for a in answers)
    lines = [r for r in caplog.records if r.name == "tidalmq.console"]
    assert len(lines) == 1 and lines[0].exc_info is None and "KeyError" in lines[0].getMessage()


@pytest.mark.parametrize("form, reason", [
    pytest.param({"topic": "BadQueues", "queues": "many"}, "queues must be a whole number", id="word"),
    pytest.param({"topic": "BadQueues", "queues": "9" * 5000}, "queues must be a whole number", id="5000-digits"),
    pytest.param({"topic": "a/b", "queues": "2"}, "contains illegal characters", id="illegal-topic"),
])
def test_a_form_with_bad_values_gets_400_and_changes_nothing(shared_standalone: Standalone, form: dict[str, str],
                                                             reason: str) -> None:
    s = shared_standalone
    token = CSRF.search(http(s.console_url + "/topics")[1])
    assert token is not None
    before = run(admin_call(s, "topic_list"))
    status, page = http(s.console_url + "/topics/create", {"csrf": token.group(1), **form})
    assert status == 400 and 'class="error"' in page and reason in page
    assert len(page) < 20_000  # the value is not echoed in full
    assert run(admin_call(s, "topic_list")) == before
