"""The 5.x clients' credentials on the gRPC endpoint of an ACL-on standalone (tests/acl/conftest.py's
plain_acl.yml: adminUser is admin; appUser1 may PUB|SUB ``both``, only SUB ``subOnly``, nothing else)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.util.signature import Signature

import grpc
from tests.acl.conftest import ADMIN, USER, acl_standalone  # noqa: F401 (the fixture)
from tests.compat.harness import create_topic, uniq
from tests.grpc.conftest import adopt_client_loop
from tests.grpc.test_messaging import message, receive_all
from tests.support import Standalone, free_port

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def topics(acl_standalone: Standalone) -> Standalone:  # noqa: F811
    for name in ("both", "subOnly"):
        create_topic(acl_standalone.namesrv_addr, name, queues=1, credentials=ADMIN)
    return acl_standalone


def config(broker: Standalone, ak: str, sk: str) -> ClientConfiguration:
    return ClientConfiguration(broker.grpc_endpoint, Credentials(ak, sk), request_timeout=5)


@pytest.fixture
def stub(topics: Standalone) -> Iterator[MessagingServiceStub]:
    with grpc.insecure_channel(topics.grpc_endpoint) as channel:
        yield MessagingServiceStub(channel)


def signed(broker: Standalone, ak: str, sk: str) -> list[tuple[str, str]]:
    """The metadata the official client puts on every call (its own Signature code)."""
    return Signature.metadata(config(broker, ak, sk), "test-client")


def send(stub: MessagingServiceStub, topic: str, metadata: list[tuple[str, str]] | None) -> int:
    m = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=b"x")
    m.system_properties.message_id = "0123456789ABCDEF0123456789ABCDEF"
    m.system_properties.message_type = definition_pb2.MessageType.NORMAL
    m.system_properties.body_encoding = definition_pb2.Encoding.IDENTITY
    resp = stub.SendMessage(service_pb2.SendMessageRequest(messages=[m]), metadata=metadata, timeout=10)
    return resp.status.code


def test_right_secret_sends_and_receives(topics: Standalone) -> None:
    """An account's right secret is accepted; the endpoint's own requests to the ACL-on broker pass."""
    p = Producer(config(topics, USER.access_key, USER.secret_key), ("both",))
    c = SimpleConsumer(config(topics, USER.access_key, USER.secret_key), uniq("g5acl"),
                       {"both": FilterExpression("*")}, await_duration=1)
    try:
        adopt_client_loop()
        p.startup()
        c.startup()
        sent = p.send(message("both", b"signed")).message_id
        got = receive_all(c, 1, deadline_s=20)
        assert [(m.message_id, m.body) for m in got] == [(sent, b"signed")]
    finally:
        c.shutdown()
        p.shutdown()


def test_wrong_secret_fails_the_clients_send(topics: Standalone) -> None:
    p = Producer(config(topics, USER.access_key, "not-the-secret"), ("both",))
    try:
        adopt_client_loop()
        p.startup()
        with pytest.raises(Exception, match="route"):  # the client hides the status behind this
            p.send(message("both", b"never"))
    finally:
        p.shutdown()


@pytest.mark.parametrize(("ak", "sk"), [(USER.access_key, "not-the-secret"), ("nobody", "x"), ("", "")],
                         ids=["wrong-secret", "unknown-account", "no-credentials"])
def test_bad_credentials_are_unauthorized(topics: Standalone, stub: MessagingServiceStub, ak: str, sk: str) -> None:
    assert send(stub, "both", signed(topics, ak, sk)) == Code.UNAUTHORIZED
    route = stub.QueryRoute(service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="both")),
                            metadata=signed(topics, ak, sk), timeout=10)
    assert route.status.code == Code.UNAUTHORIZED and not route.message_queues


def test_no_metadata_is_unauthorized(stub: MessagingServiceStub) -> None:
    assert send(stub, "both", None) == Code.UNAUTHORIZED


def test_permissions_are_the_topics_and_groups(topics: Standalone, stub: MessagingServiceStub) -> None:
    """Signed right, but no PUB on subOnly: FORBIDDEN; PUB|SUB on both: sent."""
    user = signed(topics, USER.access_key, USER.secret_key)
    assert send(stub, "subOnly", user) == Code.FORBIDDEN
    assert send(stub, "both", user) == Code.OK
    q = definition_pb2.MessageQueue(topic=definition_pb2.Resource(name="both"), id=-1)
    denied = service_pb2.ReceiveMessageRequest(group=definition_pb2.Resource(name="deniedGroup"), message_queue=q,
                                               batch_size=1, auto_renew=False)
    (resp,) = list(stub.ReceiveMessage(denied, metadata=user, timeout=10))
    assert resp.status.code == Code.FORBIDDEN
    assert send(stub, "subOnly", signed(topics, ADMIN.access_key, ADMIN.secret_key)) == Code.OK  # admin: anything


def test_proxy_command_checks_credentials_and_signs_as_tools_yml(topics: Standalone, tmp_path: Path) -> None:
    """``tidalmq proxy`` with aclEnable: the accounts of $ROCKETMQ_HOME/conf/plain_acl.yml for clients,
    tools.yml's admin account for its own requests to the ACL-on broker."""
    conf = tmp_path / "conf"
    conf.mkdir()
    shutil.copy(topics.data_dir / "conf" / "plain_acl.yml", conf / "plain_acl.yml")
    (conf / "tools.yml").write_text(f"accessKey: {ADMIN.access_key}\nsecretKey: {ADMIN.secret_key}\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidalmq.cli", "proxy", "-n", topics.namesrv_addr, "--grpc-port",
                             str(port), "--set", "aclEnable=true"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, "ROCKETMQ_HOME": str(tmp_path)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "proxy ready" in line, line
        endpoint = f"127.0.0.1:{port}"
        with grpc.insecure_channel(endpoint) as channel:
            stub = MessagingServiceStub(channel)
            assert send(stub, "both", signed(topics, USER.access_key, "not-the-secret")) == Code.UNAUTHORIZED
            assert send(stub, "subOnly", signed(topics, USER.access_key, USER.secret_key)) == Code.FORBIDDEN
            assert send(stub, "both", signed(topics, USER.access_key, USER.secret_key)) == Code.OK
    finally:
        proc.terminate()
        proc.wait(10)


def test_malformed_body_authenticated_before_it_is_decoded(topics: Standalone) -> None:
    """A body that is not a SendMessageRequest: UNAUTHORIZED for a stranger (nothing of it parsed),
    BAD_REQUEST for a signed account; neither writes a traceback."""
    with grpc.insecure_channel(topics.grpc_endpoint) as channel:
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                  response_deserializer=service_pb2.SendMessageResponse.FromString)
        assert raw(b"\xff", metadata=signed(topics, "nobody", "x"), timeout=10).status.code == Code.UNAUTHORIZED
        assert raw(b"\xff", timeout=10).status.code == Code.UNAUTHORIZED
        resp = raw(b"\xff", metadata=signed(topics, USER.access_key, USER.secret_key), timeout=10)
        assert resp.status.code == Code.BAD_REQUEST
        assert resp.status.message == "the request is not a valid SendMessageRequest"
    assert "Traceback" not in topics.log_tail(400)


def test_notify_client_termination_needs_credentials(topics: Standalone, stub: MessagingServiceStub) -> None:
    request = service_pb2.NotifyClientTerminationRequest(group=definition_pb2.Resource(name="anyGroup"))
    client = [("x-mq-client-id", "someone-elses-client")]
    assert stub.NotifyClientTermination(request, metadata=client, timeout=10).status.code == Code.UNAUTHORIZED
    bad = signed(topics, USER.access_key, "not-the-secret") + client
    assert stub.NotifyClientTermination(request, metadata=bad, timeout=10).status.code == Code.UNAUTHORIZED
    admin = signed(topics, ADMIN.access_key, ADMIN.secret_key) + client
    assert stub.NotifyClientTermination(request, metadata=admin, timeout=10).status.code == Code.OK
