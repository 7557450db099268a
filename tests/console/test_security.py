"""The console's guards, over plain HTTP (no browser needed): the login with ACL, the CSRF token on every
state-changing action, bad HTTP refused, and ``tidalmq console -n`` in front of a running cluster."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acl.conftest import ADMIN, acl_text
from tests.console.support import admin_call, http, run
from tests.support import ModuleTmp, Standalone, free_port
from tidalmq.client import Admin

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
    proc = subprocess.Popen([sys.executable, "-m", "tidalmq.cli", "console", "-n", s.namesrv_addr, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready = threading.Event()
        lines: list[str] = []

        def reader() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "console ready" in line:
                    ready.set()

        threading.Thread(target=reader, daemon=True).start()
        assert ready.wait(30), "".join(lines)
        status, page = http(f"http://127.0.0.1:{port}/")
        assert status == 200 and s.broker_addr in page
    finally:
        proc.terminate()
        proc.wait(10)


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
