"""ACL 1.0 pieces without sockets: signatures, address patterns, plain_acl.yml, the request checks."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tidalmq.acl import acl_files, load_acl
from tidalmq.acl.address import AddressPatternError, parse_host, parse_pattern
from tidalmq.acl.config import AclConfigError, parse_acl_document
from tidalmq.acl.permission import BROKER_ADMIN_CODES, DENY, PUB, SUB, check_permission, parse_perm
from tidalmq.acl.resources import request_resources
from tidalmq.acl.signature import RequestSigner, SessionCredentials, calc_signature, signed_content
from tidalmq.acl.validator import PlainAccessValidator
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand, SerializeType, decode_frame_body, encode_frame
from tidalmq.remoting.transport import Connection

# Vectors computed outside Python, with RocketMQ's recipe spelled out for openssl:
#   printf 'RocketMQgroupTopicAhello' | openssl dgst -sha1 -hmac 12345678 -binary | base64
VECTOR_EXT = {"b": "TopicA", "AccessKey": "RocketMQ", "a": "group"}
VECTOR_BODY = b"hello"
VECTOR_SIG = "vzb11ea6GY1+lwBpi/gKeK4ATSY="


# ---- signatures ------------------------------------------------------------------------------------

def test_signed_content_is_sorted_values_then_body() -> None:
    # 'AccessKey' sorts before 'a' (upper case first, as Java's TreeMap orders strings)
    assert signed_content(VECTOR_EXT, VECTOR_BODY) == b"RocketMQgroupTopicAhello"
    with_sig = {**VECTOR_EXT, "Signature": "x", "_UNIQUE_KEY_QUERY": "true"}
    assert signed_content(with_sig, VECTOR_BODY) == b"RocketMQgroupTopicAhello"


def test_signed_content_of_key_sets_of_one_size_in_turn() -> None:
    """The signer remembers one key order per number of keys: sets of equal size must not share it."""
    for _ in range(2):
        for ext in ({"a": "1", "b": "2", "AccessKey": "K"}, {"a": "1", "b": "2", "c": "3", "AccessKey": "K"},
                    {"a": "1", "c": "3", "AccessKey": "K"},
                    {"b": "2", "c": "3", "Signature": "s", "AccessKey": "K"}, {"z": "9", "A": "0", "AccessKey": "K"}):
            expected = "".join(ext[k] for k in sorted(ext) if k != "Signature").encode()
            assert signed_content(ext, b"!") == expected + b"!"


def test_a_field_added_after_signing_is_refused(tmp_path: Path) -> None:
    v = _validator(tmp_path)
    conn = _conn("127.0.0.1")
    for _ in range(2):  # the second time with every signer cache warm
        assert v(conn, _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"})) is None
        assert v(conn, _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB", "f": "0"})) is None
        added = _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"})
        added.ext_fields["f"] = "0"
        assert _remark(v(conn, added)) == "Check signature failed for accessKey=RocketMQ"
        # ... but for _UNIQUE_KEY_QUERY, which the Java client adds after signing
        added = _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"})
        added.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
        assert v(conn, added) is None


def test_signature_matches_the_openssl_vector() -> None:
    assert calc_signature(b"RocketMQgroupTopicAhello", "12345678") == VECTOR_SIG
    ext = {"b": "TopicA", "a": "group"}
    RequestSigner(SessionCredentials("RocketMQ", "12345678")).sign(ext, VECTOR_BODY)
    assert ext == {**VECTOR_EXT, "Signature": VECTOR_SIG}


def test_signer_covers_security_token_and_wire_form_of_values() -> None:
    # printf '1tok' | openssl dgst -sha1 -hmac 12345678 -binary | base64  (AccessKey '1', SecurityToken 'tok')
    ext: dict[str, str] = {}
    RequestSigner(SessionCredentials("1", "12345678", security_token="tok")).sign(ext, None)
    assert ext["SecurityToken"] == "tok"
    assert ext["Signature"] == "D6taPdA/SgQ1L7ASheCyBGiKilw="
    # values that are not strings are signed as the encoder writes them (true, 3), None left out
    odd: dict[str, object] = {"n": 3, "flag": True, "gone": None}
    RequestSigner(SessionCredentials("RocketMQ", "12345678")).sign(odd, None)  # type: ignore[arg-type]
    assert odd["Signature"] == "QOTFmnXWLoXymKkVBiQLuERxlX4="  # of 'RocketMQtrue3', by openssl likewise
    assert "gone" not in odd


def test_signature_survives_both_header_encodings() -> None:
    for ser in (SerializeType.JSON, SerializeType.ROCKETMQ):
        cmd = RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_fields={"b": "TopicA", "a": "group", "u": "é"},
                              body=VECTOR_BODY, serialize_type=ser)
        RequestSigner(SessionCredentials("RocketMQ", "12345678")).sign(cmd.ext_fields, cmd.body)
        got = decode_frame_body(encode_frame(cmd)[4:])
        assert calc_signature(signed_content(got.ext_fields, got.body_bytes()), "12345678") == got.ext_fields["Signature"]


def test_signature_of_long_secrets_and_bodies_in_pieces() -> None:
    """The signer's own HMAC (SHA-1 states of the key blocks, copied per request) against the standard
    library's: secrets shorter than, as long as, and longer than a SHA-1 block; a body in pieces."""
    from tidalmq.acl.signature import Hmac

    body = [memoryview(b"x" * 100), memoryview(b"y" * 1000)]
    for secret in ("k", "s" * 64, "long-" * 40, "é" * 50):
        ext = {"a": "group", "b": "TopicA", "AccessKey": "ak"}
        expected = calc_signature(signed_content(ext, b"".join(body)), secret)
        assert Hmac(secret).sign(ext, body) == expected
        assert Hmac(secret).sign(ext, b"".join(body)) == expected
        assert Hmac(secret).sign(ext, None) == calc_signature(signed_content(ext, None), secret)


def test_credentials_need_both_keys() -> None:
    with pytest.raises(ValueError):
        SessionCredentials("RocketMQ", "")


# ---- permissions and address patterns ---------------------------------------------------------------

def test_permission_names_and_checks() -> None:
    assert parse_perm("PUB|SUB") == parse_perm("SUB|PUB") == PUB | SUB
    assert parse_perm(None) == parse_perm("nonsense") == DENY
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB)
    assert not check_permission(PUB, SUB) and not check_permission(SUB, PUB)
    assert not check_permission(PUB, DENY | PUB)
    for code in (RC.UPDATE_AND_CREATE_TOPIC, RC.DELETE_TOPIC_IN_BROKER, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                 RC.DELETE_SUBSCRIPTIONGROUP, RC.UPDATE_BROKER_CONFIG, RC.INVOKE_BROKER_TO_RESET_OFFSET,
                 RC.TRIGGER_DELETE_FILES, RC.GET_BROKER_CONFIG):
        assert code in BROKER_ADMIN_CODES


@pytest.mark.parametrize(("pattern", "inside", "outside"), [
    ("*", ["1.2.3.4", "::1"], []),
    ("*.*.*.*", ["10.0.0.1"], []),
    ("", [], ["127.0.0.1"]),
    ("192.168.0.1", ["192.168.0.1", "::ffff:192.168.0.1"], ["192.168.0.2"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3"]),
    ("192.168.0.1,10.0.0.7", ["10.0.0.7"], ["10.0.0.8"]),
    ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.6", "192.168.2.3"]),
    ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1"]),
    ("192.168.*", ["192.168.7.9"], ["192.169.0.1"]),
    ("192.168.*.*", ["192.168.7.9"], ["10.168.7.9"]),
    ("10.1-3.*.*", ["10.2.200.1"], ["10.4.0.1"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["::2", "127.0.0.1"]),
    ("1050:0000:0000:0000:0005:0600:300c:326b", ["1050::5:600:300c:326b"], ["1050::5:600:300c:326c"]),
    ("1050::0005:600:300c:{1,2}", ["1050::5:600:300c:1", "1050::5:600:300c:2"], ["1050::5:600:300c:3"]),
    ("1050::0005:600:300c:*", ["1050::5:600:300c:ffff"], ["1050::5:600:300d:1"]),
    ("2::ac5:78:1-200", ["2::ac5:78:1ff"], ["2::ac5:78:201"]),
])
def test_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    p = parse_pattern(pattern)
    for a in inside:
        assert p.matches(parse_host(a)), a
    for a in outside:
        assert not p.matches(parse_host(a)), a


@pytest.mark.parametrize("bad", ["192.168.0.300", "192.168.1.5-1", "10.0.0.x", "1.2.3.{4,x}", "hostname"])
def test_bad_address_patterns_are_refused(bad: str) -> None:
    with pytest.raises(AddressPatternError):
        parse_pattern(bad)


def test_parse_host_unmaps_ipv4() -> None:
    assert parse_host("::ffff:10.0.0.1") == ipaddress.ip_address("10.0.0.1")
    assert parse_host("not an address") is None


# ---- plain_acl.yml ----------------------------------------------------------------------------------

# RocketMQ's distribution/conf/plain_acl.yml (4.9), as operators have it.
SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_distribution_sample_parses() -> None:
    white, accounts = parse_acl_document(yaml.safe_load(SAMPLE), "plain_acl.yml")
    assert [w.text for w in white] == ["10.10.103.*", "192.168.0.*"]
    rmq, admin = accounts
    assert rmq.access_key == "RocketMQ" and rmq.secret_key == "12345678" and not rmq.admin
    assert rmq.default_topic_perm == DENY and rmq.default_group_perm == SUB
    assert rmq.perms == {"topicA": DENY, "topicB": PUB | SUB, "topicC": SUB,
                         "%RETRY%groupA": DENY, "%RETRY%groupB": PUB | SUB, "%RETRY%groupC": SUB}
    assert not rmq.white.matches(parse_host("127.0.0.1"))
    assert admin.admin and admin.white.matches(parse_host("192.168.1.9"))
    assert admin.default_topic_perm == DENY  # unset means DENY, as in RocketMQ


@pytest.mark.parametrize("doc", [
    "accounts:\n  - accessKey: short\n    secretKey: 12345678\n",  # keys must be longer than 6
    "accounts:\n  - accessKey: RocketMQ\n",
    "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms: [topicA]\n",
    "globalWhiteRemoteAddresses: [999.1.1.1]\n",
    "accounts: 7\n",
    "- just a list\n",
])
def test_broken_documents_are_refused(doc: str) -> None:
    with pytest.raises(AclConfigError):
        parse_acl_document(yaml.safe_load(doc), "x.yml")


def test_files_where_rocketmq_looks(tmp_path: Path) -> None:
    (tmp_path / "conf" / "acl" / "more").mkdir(parents=True)
    (tmp_path / "conf" / "plain_acl.yml").write_text(SAMPLE)
    (tmp_path / "conf" / "acl" / "a.yml").write_text(
        "accounts:\n  - accessKey: fromDirA\n    secretKey: 12345678\n"
        "  - accessKey: RocketMQ\n    secretKey: other-secret\n")
    (tmp_path / "conf" / "acl" / "more" / "b.yaml").write_text("globalWhiteRemoteAddresses: ['10.0.0.1']\n")
    (tmp_path / "conf" / "acl" / "notes.txt").write_text("not ACL")
    files = acl_files(tmp_path)
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "conf/acl/a.yml", "conf/acl/more/b.yaml", "conf/plain_acl.yml"]
    acl = load_acl(files)
    assert set(acl.accounts) == {"fromDirA", "RocketMQ", "rocketmq2"}
    assert acl.accounts["RocketMQ"].secret_key == "other-secret"  # the first file that defines a key wins
    assert len(acl.global_white) == 3
    # rocketmq.acl.plain.file: relative to the home directory, or absolute
    assert acl_files(tmp_path, "etc/x.yml")[-1] == tmp_path / "etc" / "x.yml"
    assert acl_files(tmp_path, "/abs/x.yml")[-1] == Path("/abs/x.yml")


# ---- resources and the validator ---------------------------------------------------------------------

def test_resources_of_requests() -> None:
    def res(code: int, ext: dict[str, str], body: bytes | None = None) -> dict[str, int]:
        return request_resources(RemotingCommand(code=code, ext_fields=ext, body=body))

    assert res(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "T"}) == {"T": PUB}
    assert res(RC.SEND_BATCH_MESSAGE, {"a": "pg", "b": "T"}) == {"T": PUB}
    # a batch in the full names, as the Java client sends it; with both, the letters count, as on the send path
    assert res(RC.SEND_BATCH_MESSAGE, {"producerGroup": "pg", "topic": "T1"}) == {"T1": PUB}
    assert res(RC.SEND_BATCH_MESSAGE, {"topic": "T1", "b": "T2"}) == {"T2": PUB}
    assert res(RC.SEND_MESSAGE, {"producerGroup": "pg", "topic": "%RETRY%G"}) == {"%RETRY%G": SUB}
    assert res(RC.PULL_MESSAGE, {"consumerGroup": "G", "topic": "T"}) == {"T": SUB, "%RETRY%G": SUB}
    assert res(RC.CONSUMER_SEND_MSG_BACK, {"group": "G"}) == {"%RETRY%G": SUB}
    assert res(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T"}) == {"%RETRY%G": SUB, "T": SUB}
    hb = fastjson.dumpb({"clientID": "c", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": [
        {"groupName": "G", "subscriptionDataSet": [{"topic": "T1"}, {"topic": "%RETRY%G"}]}]})
    assert res(RC.HEART_BEAT, {}, hb) == {"%RETRY%G": SUB, "T1": SUB}
    assert res(RC.GET_MAX_OFFSET, {"topic": "T"}) == {}


def _conn(host: str) -> Connection:
    c = Connection(None)
    c.remote = (host, 40000)
    return c


def _validator(tmp_path: Path, text: str = SAMPLE) -> PlainAccessValidator:
    (tmp_path / "plain_acl.yml").write_text(text)
    v = PlainAccessValidator(lambda: [tmp_path / "plain_acl.yml"], admin_codes=BROKER_ADMIN_CODES)
    v.load()
    return v


def _signed(code: int, ext: dict[str, str], ak: str = "RocketMQ", sk: str = "12345678",
            body: bytes | None = None) -> RemotingCommand:
    cmd = RemotingCommand(code=code, ext_fields=dict(ext), body=body)
    RequestSigner(SessionCredentials(ak, sk)).sign(cmd.ext_fields, body)
    return cmd


def _remark(r: RemotingCommand | None) -> str | None:
    if r is None:
        return None
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark is not None and r.remark.startswith("org.apache.rocketmq.acl.common.AclException: ")
    return r.remark.split(": ", 1)[1]


def test_validator_decisions(tmp_path: Path) -> None:
    v = _validator(tmp_path)
    local = _conn("127.0.0.1")
    send = {"a": "pg", "b": "topicB"}
    assert _remark(v(local, RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_fields=dict(send)))) == "No accessKey is configured"
    assert _remark(v(local, _signed(RC.SEND_MESSAGE_V2, send, ak="nobody12"))) == "No acl config for nobody12"
    assert _remark(v(local, _signed(RC.SEND_MESSAGE_V2, send, sk="wrong-secret"))) == \
        "Check signature failed for accessKey=RocketMQ"
    assert v(local, _signed(RC.SEND_MESSAGE_V2, send, body=b"payload")) is None
    tampered = _signed(RC.SEND_MESSAGE_V2, send, body=b"payload")
    tampered.body = b"payloaD"
    assert _remark(v(local, tampered)) == "Check signature failed for accessKey=RocketMQ"
    assert _remark(v(local, _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicA"}))) == "No permission for topic:topicA"
    assert _remark(v(local, _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicC"}))) == "No permission for topic:topicC"
    assert _remark(v(local, _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "other"}))) == \
        "No default permission for topic:other"
    assert v(local, _signed(RC.PULL_MESSAGE, {"consumerGroup": "groupC", "topic": "topicC"})) is None
    assert _remark(v(local, _signed(RC.PULL_MESSAGE, {"consumerGroup": "groupA", "topic": "topicC"}))) == \
        "No permission for group:groupA"
    assert _remark(v(local, _signed(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}))) == \
        f"Need admin permission for request code={int(RC.UPDATE_AND_CREATE_TOPIC)}, but accessKey=RocketMQ is not"
    assert v(local, _signed(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}, ak="rocketmq2")) is None
    # a message trace is let through whatever the topic permissions say
    assert v(local, _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "RMQ_SYS_TRACE_TOPIC"})) is None
    # global white addresses pass unsigned; an account's white address passes with its key alone
    assert v(_conn("10.10.103.7"), RemotingCommand(code=RC.TRIGGER_DELETE_FILES)) is None
    assert v(_conn("192.168.1.3"), RemotingCommand(code=RC.UPDATE_AND_CREATE_TOPIC, ext_fields={"AccessKey": "rocketmq2"})) is None
    assert _remark(v(_conn("192.168.2.3"), RemotingCommand(code=RC.UPDATE_AND_CREATE_TOPIC,
                                                            ext_fields={"AccessKey": "rocketmq2"}))) is not None


def test_reload_keeps_the_previous_acl_when_the_file_breaks(tmp_path: Path) -> None:
    v = _validator(tmp_path)
    assert not v.reload_if_changed()  # nothing changed
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts: [ {accessKey: RocketMQ")  # broken YAML
    assert not v.reload_if_changed()
    assert "RocketMQ" in v.acl.accounts
    path.write_text("accounts:\n  - accessKey: newcomer\n    secretKey: 12345678\n    admin: true\n")
    assert v.reload_if_changed()
    assert set(v.acl.accounts) == {"newcomer"}
    # a connection judged against the old ACL is judged again against the new one
    conn = _conn("127.0.0.1")
    path.write_text(SAMPLE.replace("10.10.103.*", "127.0.0.1"))
    assert _remark(v(conn, RemotingCommand(code=RC.GET_MAX_OFFSET))) == "No accessKey is configured"
    assert v.reload_if_changed()
    assert v(conn, RemotingCommand(code=RC.GET_MAX_OFFSET)) is None


def test_decisions_follow_the_account_and_a_reload_on_one_connection(tmp_path: Path) -> None:
    """What a connection was allowed is judged again when it signs as another account, and when the
    ACL file changes (the validator remembers decisions per loaded ACL)."""
    v = _validator(tmp_path)
    conn = _conn("127.0.0.1")
    to_b = {"a": "pg", "b": "topicB"}
    to_a = {"a": "pg", "b": "topicA"}
    assert v(conn, _signed(RC.SEND_MESSAGE_V2, to_b)) is None
    assert v(conn, _signed(RC.SEND_MESSAGE_V2, to_a, ak="rocketmq2")) is None  # admin
    assert _remark(v(conn, _signed(RC.SEND_MESSAGE_V2, to_a))) == "No permission for topic:topicA"
    assert v(conn, _signed(RC.SEND_MESSAGE_V2, to_a, ak="rocketmq2")) is None
    assert _remark(v(conn, _signed(RC.SEND_MESSAGE_V2, to_b, sk="wrong-secret"))) == \
        "Check signature failed for accessKey=RocketMQ"  # a known decision never skips the signature
    (tmp_path / "plain_acl.yml").write_text(SAMPLE.replace("topicB=PUB|SUB", "topicB=DENY"))
    assert v.reload_if_changed()
    assert _remark(v(conn, _signed(RC.SEND_MESSAGE_V2, to_b))) == "No permission for topic:topicB"
    # an account's white address is the account's: another key on the same connection must sign
    white = _conn("192.168.1.3")
    unsigned = {"AccessKey": "rocketmq2", "b": "topicA"}
    assert v(white, RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_fields=dict(unsigned))) is None
    unsigned["AccessKey"] = "RocketMQ"
    assert _remark(v(white, RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_fields=unsigned))) == \
        "Check signature failed for accessKey=RocketMQ"


# Requests a connection may send, for judge_many against one check at a time: each account, right and
# wrong secrets, unsigned, allowed and refused topics, an admin code, a heartbeat (resources in its body),
# a response.
_HB = fastjson.dumpb({"clientID": "c", "consumerDataSet": [{"groupName": "groupB", "subscriptionDataSet": []}]})
_MIX: list[tuple[str, object]] = [
    ("send topicB", lambda: _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"}, body=b"x")),
    ("send topicB, other body", lambda: _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB", "e": "3"}, body=b"yy")),
    ("send topicA (DENY)", lambda: _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicA"})),
    ("send topicC (SUB only)", lambda: _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicC"})),
    ("wrong secret", lambda: _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"}, sk="wrong-secret")),
    ("admin account", lambda: _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicA"}, ak="rocketmq2")),
    ("unknown account", lambda: _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"}, ak="nobody12")),
    ("unsigned", lambda: RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_fields={"a": "pg", "b": "topicB"})),
    ("admin code", lambda: _signed(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "topicB"})),
    ("pull groupB", lambda: _signed(RC.PULL_MESSAGE, {"consumerGroup": "groupB", "topic": "topicB"})),
    ("heartbeat", lambda: _signed(RC.HEART_BEAT, {}, body=_HB)),
    ("a field added after signing", lambda: _tampered()),
    ("response", lambda: RemotingCommand(code=0, flag=1)),
]


def _tampered() -> RemotingCommand:
    cmd = _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"})
    cmd.ext_fields["f"] = "0"
    return cmd


def _verdicts(got: list[tuple[RemotingCommand, RemotingCommand | None] | None],
              cmds: list[RemotingCommand]) -> list[str | None]:
    out: list[str | None] = []
    for cmd, v in zip(cmds, got, strict=True):
        if cmd.is_response:
            assert v is None
            out.append("response")
        else:
            assert v is not None and v[0] is cmd
            out.append(_remark(v[1]))
    return out


@settings(max_examples=150, deadline=None)
@given(picks=st.lists(st.integers(0, len(_MIX) - 1), max_size=40), split=st.integers(1, 41),
       host=st.sampled_from(["127.0.0.1", "192.168.1.3", "192.168.0.7"]), reload_at=st.integers(0, 41))
def test_a_chunk_is_judged_as_its_requests_one_at_a_time(tmp_path_factory: pytest.TempPathFactory, picks: list[int],
                                                         split: int, host: str, reload_at: int) -> None:
    """judge_many (the connection's requests read together) gives each request the verdict of checking it
    alone, in any order of accounts, refusals and decisions, from any address (globally white, white for
    one account, neither), in chunks of any size, with the ACL file changed between two chunks."""
    tmp = tmp_path_factory.mktemp("acl")
    alone, many = _validator(tmp), _validator(tmp)
    c1, c2 = _conn(host), _conn(host)
    cmds = [_MIX[i][1]() for i in picks]  # type: ignore[operator]
    expected, got = [], []
    for start in range(0, len(cmds), split):
        if start >= reload_at > start - split:  # the same file change seen by both
            (tmp / "plain_acl.yml").write_text(SAMPLE.replace("topicB=PUB|SUB", "topicB=SUB").replace("topicC=SUB", "topicC=PUB"))
            os.utime(tmp / "plain_acl.yml", ns=(1, 1))
            assert alone.reload_if_changed() and many.reload_if_changed()
        chunk = cmds[start:start + split]
        expected += ["response" if c.is_response else _remark(alone(c1, c)) for c in chunk]
        got += _verdicts(many.judge_many(c2, chunk), chunk)
    assert got == expected, [_MIX[i][0] for i in picks]


def test_signatures_that_are_not_text_are_refused(tmp_path: Path) -> None:
    v = _validator(tmp_path)
    conn = _conn("127.0.0.1")
    cmd = _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"})
    cmd.ext_fields["Signature"] = "é" + cmd.ext_fields["Signature"][1:]
    assert _remark(v(conn, cmd)) == "Check signature failed for accessKey=RocketMQ"
    # a JSON header can carry a lone surrogate, which no client can have signed (it has no utf-8)
    cmd = _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"})
    cmd.ext_fields["a"] = "\ud800"
    assert _remark(v(conn, cmd)) == "Check signature failed for accessKey=RocketMQ"


def test_a_captured_signature_holds_for_the_request_re_cut(tmp_path: Path) -> None:
    """ACL 1.0 signs the values without their keys (docs/acl.md, "The signature is malleable"): a signed
    request's text moved between fields, into the body, or under another field name keeps its signature;
    only the account's rights are judged again."""
    v = _validator(tmp_path)
    conn = _conn("127.0.0.1")
    sent = _signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"}, body=b"payload")
    assert v(conn, sent) is None

    def re_cut(ext: dict[str, str], body: bytes) -> RemotingCommand:
        keep = {k: sent.ext_fields[k] for k in ("AccessKey", "Signature")}
        return RemotingCommand(code=RC.SEND_MESSAGE_V2, ext_fields={**ext, **keep}, body=body)

    assert v(conn, re_cut({"a0": "pg", "b": "topicB"}, b"payload")) is None  # another field name, same place
    assert _remark(v(conn, re_cut({"a": "pgtopi", "b": "cB"}, b"payload"))) == "No default permission for topic:cB"
    assert _remark(v(conn, re_cut({"a": "pg", "b": "topic"}, b"Bpayload"))) == "No default permission for topic:topic"
    assert _remark(v(conn, re_cut({"a": "pg", "b": "topicC"}, b"payload"))) == \
        "Check signature failed for accessKey=RocketMQ"  # other text is not signed


def test_resource_key_changes_with_every_field_the_resources_come_from() -> None:
    """Decisions are remembered by resource_key: every ext field request_resources reads must be in it."""
    from tidalmq.acl.resources import resource_key

    class Recording(dict[str, str]):
        def __init__(self, values: dict[str, str]) -> None:
            super().__init__(values)
            self.read: set[str] = set()

        def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
            self.read.add(key)
            return super().get(key, default)

    names = ("topic", "b", "consumerGroup", "group", "producerGroup", "a", "queueId", "brokerName", "key")
    checked = 0
    for code in RC:
        if code in (RC.HEART_BEAT, RC.BATCH_ACK_MESSAGE):
            assert resource_key(RemotingCommand(code=code)) is None  # its resources are in its body
            continue
        ext = Recording({n: "x" + n for n in names})
        cmd = RemotingCommand(code=code, ext_fields=ext)
        request_resources(cmd)
        key = resource_key(RemotingCommand(code=code, ext_fields=dict(ext)))
        for name in ext.read:
            changed = RemotingCommand(code=code, ext_fields={**ext, name: "other"})
            assert resource_key(changed) != key, (code, name)
            checked += 1
    assert checked >= 11  # the fields of sends, pulls, send-backs, offsets, queries, consumer lists
