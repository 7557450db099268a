"""The gRPC endpoint's credential pieces without sockets (proxy/auth.py), against the official 5.x
client's own Signature code."""

from __future__ import annotations

from rocketmq import ClientConfiguration, Credentials
from rocketmq.v5.util.signature import Signature

from tidalmq.proxy import auth


def client_metadata(ak: str, sk: str) -> dict[str, str]:
    return auth.metadata_dict(Signature.metadata(ClientConfiguration("127.0.0.1:1", Credentials(ak, sk)), "c1"))


def test_the_official_clients_signature_verifies_with_its_secret_only() -> None:
    md = client_metadata("ak1", "sk1")
    parsed = auth.parse_authorization(md[auth.AUTHORIZATION])
    assert parsed is not None and parsed.access_key == "ak1" and parsed.signed_headers == (auth.DATE_TIME,)
    assert auth.verify(parsed, "sk1", md[auth.DATE_TIME])
    assert not auth.verify(parsed, "sk2", md[auth.DATE_TIME])
    assert not auth.verify(parsed, "sk1", "20200101T000000Z")  # another date-time: another signature
    assert not auth.verify(parsed, "sk1", None)


def test_authorization_that_is_not_mqv2_or_lacks_a_part_is_none() -> None:
    assert auth.parse_authorization("") is None
    assert auth.parse_authorization("Basic Zm9vOmJhcg==") is None
    assert auth.parse_authorization("MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=ab") is None
    assert auth.parse_authorization("MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time") is None
    assert client_metadata("", "")[auth.AUTHORIZATION].startswith("MQv2-HMAC-SHA1 Credential=,")  # no credentials


def test_peer_host() -> None:
    assert auth.peer_host("ipv4:127.0.0.1:5555") == "127.0.0.1"
    assert auth.peer_host("ipv6:[::1]:5555") == "::1"
    assert auth.peer_host("unix:/tmp/s") == "/tmp/s"
