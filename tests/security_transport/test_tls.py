"""TLS on the remoting ports (docs/tls.md): tidalmq.client against a real standalone in each mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.client.helpers import create_topic, uniq
from tests.mqadmin.support import run_mqadmin
from tests.security_transport.conftest import Certs, server_tls
from tests.support import Standalone, wait_for
from tidalmq.client import Message, Producer, PullConsumer, PullStatus, tls_context
from tidalmq.remoting.tls import TlsOption

pytestmark = pytest.mark.timeout(90)

SMALL = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}


def run(coro, timeout: float = 45):
    async def go():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(go())


async def send_and_pull(ns: str, tls: TlsOption) -> list[bytes]:
    """Create a topic, send two messages and pull them back, all over ``tls``."""
    topic = uniq("Tls")
    await create_topic(ns, topic, 1, tls=tls)
    async with Producer(uniq("PG"), ns, tls=tls) as p:
        r1 = await p.send(Message(topic, b"one"))
        await p.send(Message(topic, b"two"))
    async with PullConsumer(uniq("CG"), ns, tls=tls) as c:
        res = await c.pull(r1.message_queue, 0, 32, block_timeout=5.0)
        assert res.status == PullStatus.FOUND
        return [m.body for m in res.messages]


async def refused(ns: str, tls: TlsOption) -> Exception:
    """A send that must fail: the error it failed with."""
    try:
        async with Producer(uniq("PG"), ns, tls=tls, send_timeout=2.0, retry_times_when_send_failed=0) as p:
            await p.send(Message("TBW102", b"x"))
    except Exception as e:  # the client's error for a refused or closed connection
        return e
    raise AssertionError("the send went through")


def test_enforcing_tls_round_trip_and_plain_refused(tmp_path: Path, certs: Certs) -> None:
    settings = {**SMALL, **server_tls(certs, "enforcing")}
    with Standalone(tmp_path / "data", settings) as s:
        # The CA-verifying context and tls=True (no verification, RocketMQ's default) both work.
        assert run(send_and_pull(s.namesrv_addr, tls_context(trust_cert_path=str(certs.ca)))) == [b"one", b"two"]
        assert run(send_and_pull(s.namesrv_addr, True)) == [b"one", b"two"]
        run(refused(s.namesrv_addr, None))
        # A client that verifies against another CA refuses the server.
        run(refused(s.namesrv_addr, tls_context(trust_cert_path=str(certs.other_ca))))
        # mqadmin takes TLS as RocketMQ's tools do, from the tls.* keys (the environment's here)
        out = run_mqadmin(s.namesrv_addr, "topicList", env={"tls.enable": "true", "tls.client.authServer": "true",
                                                            "tls.client.trustCertPath": str(certs.ca)})
        assert out.returncode == 0, out.stderr
        assert "TBW102" in out.stdout
        out = run_mqadmin(s.namesrv_addr, "topicList", env={"tls.enable": "true", "tls.client.authServer": "true",
                                                            "tls.client.trustCertPath": str(certs.other_ca)})
        assert out.returncode == 1, out.stdout  # the server's certificate is not signed by that CA
        line = "a plain connection, and tls.server.mode is enforcing"  # read from the log by a thread: waited for
        wait_for(lambda: line in s.log_tail(200), 10, what=f"{line!r} in the log")


def test_permissive_serves_plain_and_tls_on_one_port(tmp_path: Path, certs: Certs) -> None:
    with Standalone(tmp_path / "data", {**SMALL, **server_tls(certs, "permissive")}) as s:
        assert run(send_and_pull(s.namesrv_addr, True)) == [b"one", b"two"]
        assert run(send_and_pull(s.namesrv_addr, None)) == [b"one", b"two"]


def test_client_auth_required(tmp_path: Path, certs: Certs) -> None:
    settings = {**SMALL, **server_tls(certs, "enforcing", **{
        "tls.server.need.client.auth": "require", "tls.server.trustCertPath": str(certs.ca),
        # The broker's own connection to the NameServer presents a client certificate too.
        "tls.client.certPath": str(certs.client_cert), "tls.client.keyPath": str(certs.client_key)})}
    with Standalone(tmp_path / "data", settings) as s:
        with_cert = tls_context(trust_cert_path=str(certs.ca), cert_path=str(certs.client_cert),
                                key_path=str(certs.client_key))
        assert run(send_and_pull(s.namesrv_addr, with_cert)) == [b"one", b"two"]
        run(refused(s.namesrv_addr, tls_context(trust_cert_path=str(certs.ca))))
        line = "TLS handshake failed"  # read from the log by a thread: waited for
        wait_for(lambda: line in s.log_tail(200), 10, what=f"{line!r} in the log")


def test_disabled_refuses_tls_clients(standalone: Standalone) -> None:
    run(refused(standalone.namesrv_addr, True))
    line = "a TLS handshake, and this port does not speak TLS"  # read from the log by a thread: waited for
    wait_for(lambda: line in standalone.log_tail(200), 10, what=f"{line!r} in the log")


def test_tls_config_file_and_bad_settings(tmp_path: Path, certs: Certs) -> None:
    conf = tmp_path / "tls.properties"
    conf.write_text(f"tls.server.certPath={certs.server_cert}\ntls.server.keyPath={certs.server_key}\n")
    with Standalone(tmp_path / "data", {**SMALL, "tls.server.mode": "enforcing", "tls.config.file": str(conf)}) as s:
        assert run(send_and_pull(s.namesrv_addr, True)) == [b"one", b"two"]
    bad = Standalone(tmp_path / "bad", {**SMALL, "tls.server.mode": "strict"})
    with pytest.raises(RuntimeError, match="did not start"):
        bad.start(timeout=20)
    assert "tls.server.mode: expected one of disabled, permissive, enforcing" in bad.log_tail()
