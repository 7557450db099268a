"""Property test: every request code that carries a name, driven with traversal strings (``../``,
absolute paths, ``%DLQ%../..``, newlines, NUL, backslashes, unicode dots, very long names) against a
real standalone. Nothing outside the store is created, changed or removed, every ConsumeQueue
directory has a legal name, and the broker still serves a normal send and pull afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.broker.rawclient import pull_cmd, records, run, send_cmd, wait_max_offset
from tests.security.support import heartbeat, plant_canary, snapshot, up_to_root
from tests.support import ModuleTmp, Standalone
from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import SendMessageRequestHeader
from tidalmq.remoting.protocol.header import Kind
from tidalmq.remoting.protocol.requests import REQUESTS, Server, spellings
from tidalmq.remoting.transport import RemotingClient

NAMESRV_CODES = {RC.REGISTER_BROKER, RC.UNREGISTER_BROKER, RC.QUERY_DATA_VERSION, RC.GET_ROUTEINFO_BY_TOPIC,
                 RC.GET_TOPICS_BY_CLUSTER, RC.DELETE_TOPIC_IN_NAMESRV, RC.PUT_KV_CONFIG, RC.GET_KV_CONFIG,
                 RC.DELETE_KV_CONFIG, RC.GET_KVLIST_BY_NAMESPACE}
LEGAL = {Kind.TOPIC: "SecFuzzT", Kind.GROUP: "SecFuzzG", Kind.BROKER: "fuzz-b", Kind.CLUSTER: "FuzzC",
         Kind.ADDR: "127.0.0.1:1", Kind.CONFIG_KEY: "k", Kind.INT32: "0", Kind.INT64: "0", Kind.PERM: "6",
         Kind.TEXT: "0 0 1000 0 0 fuzz-b 0 0", Kind.BOOL: "false"}
NAME_KINDS = {Kind.TOPIC, Kind.GROUP, Kind.BROKER, Kind.CLUSTER, Kind.ADDR, Kind.CONFIG_KEY}

# (code, spelling, field) for every name an ext field carries, straight from the request table (both
# spellings of a header that has two), plus the bodies.
HEADER_TARGETS = sorted((code, form, f.name) for code, r in REQUESTS.items() if r.servers - {Server.CLIENT}
                        for form, fields in enumerate(spellings(code)) for f in fields if f.kind in NAME_KINDS)
BODY_TARGETS = ["heartbeat.group", "heartbeat.topic", "lock.group", "lock.topic", "register.topic", "subgroup.group"]


def _ext(code: int, form: int, field: str, value: str) -> dict[str, str]:
    fields = spellings(code)[form]
    ext = {f.name: LEGAL[f.kind] for f in fields}
    if SendMessageRequestHeader.FORMS[0] == fields:  # a send in the full names
        ext[SendMessageRequestHeader.key_of("default_topic")] = "TBW102"
    ext[field] = value
    return ext


def _body_request(target: str, value: str) -> tuple[RemotingCommand, bool]:
    kind, _, what = target.partition(".")
    if kind == "heartbeat":
        return heartbeat("fuzz", value if what == "group" else "SecFuzzG", value if what == "topic" else "SecFuzzT"), False
    if kind == "lock":
        body: dict[str, Any] = {"consumerGroup": value if what == "group" else "SecFuzzG", "clientId": "fuzz",
                "mqSet": [{"topic": value if what == "topic" else "SecFuzzT", "brokerName": "fuzz-b", "queueId": 0}]}
        return RemotingCommand(code=RC.LOCK_BATCH_MQ, body=fastjson.dumpb(body)), False
    if kind == "register":
        body = {"topicConfigSerializeWrapper": {"topicConfigTable": {value: {"topicName": value, "perm": 6,
                                                                               "readQueueNums": 1, "writeQueueNums": 1}}}}
        ext = {"brokerName": "fuzz-b", "brokerAddr": "127.0.0.1:1", "clusterName": "FuzzC", "brokerId": "0",
               "compressed": "false"}
        return RemotingCommand(code=RC.REGISTER_BROKER, ext_fields=ext, body=fastjson.dumpb(body)), True
    body = {"groupName": value}
    return RemotingCommand(code=RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=fastjson.dumpb(body)), False


@pytest.fixture(scope="module")
def site(module_tmp: ModuleTmp):
    root = module_tmp("fuzz")
    canary = plant_canary(root)
    with Standalone(root / "data", {"mappedFileSizeCommitLog": str(8 * 1024 * 1024)}) as s:
        yield s, root, canary


def _outside_store(root: Path, s: Standalone) -> dict[str, str]:
    """Everything under the test's root but the store, the log and the NameServer's KV file (which a
    legal PUT_KV_CONFIG is allowed to change)."""
    return snapshot(root, skip=(s.data_dir / "store", s.log_path, s.data_dir / "namesrv"))


def hostile_names(canary: Path) -> st.SearchStrategy[str]:
    cores = st.sampled_from([
        up_to_root(canary / "x" / "planted"), up_to_root(canary), "../../../canary", "../" * 200 + str(canary).lstrip("/"),
        str(canary), str(canary / "x"), "..\\..\\canary", "..", ".", "/", "\\", "a/b", "\u2025", "\u2024\u2024/canary",
        "\uff0e\uff0e/canary", "Newline\n", "SCHEDULE_TOPIC_XXXX\n", "nul\x00", "A" * 300, "G" * 249, "%",
    ])
    affixes = st.sampled_from(["", "%DLQ%", "%RETRY%", "%DLQ%../..", "T/"])
    tails = st.sampled_from(["", "\n", "\x00", "/", "\\", "/.."])
    built = st.builds(lambda a, c, t: a + c + t, affixes, cores, tails)
    return st.one_of(built, st.text(max_size=80), st.text(alphabet="./\\%|_-aZ\n\x00", max_size=40))


def _exercise(site, target, name: str) -> None:
    s, root, canary = site
    before = _outside_store(root, s)

    async def one() -> None:
        c = RemotingClient()
        try:
            if isinstance(target, tuple):
                code, form, field = target
                cmd = RemotingCommand(code=code, ext_fields=_ext(code, form, field, name), body=b"fuzz")
                to_namesrv = code in NAMESRV_CODES
            else:
                cmd, to_namesrv = _body_request(target, name)
            resp = await c.invoke(s.namesrv_addr if to_namesrv else s.broker_addr, cmd, 5)
            # accepted only if the name is legal for some kind (an optional field sent empty counts as absent)
            assert resp.code != ResponseCode.SUCCESS or name == "" or nm.is_legal(nm.check_any_topic, name) \
                or nm.is_legal(nm.check_broker_name, name) or nm.is_legal(nm.check_config_key, name) \
                or nm.is_legal(nm.check_addr, name), (target, name, resp.remark)
        finally:
            await c.close()

    run(one(), timeout=15)
    assert _outside_store(root, s) == before, (target, name)
    for d in (s.data_dir / "store" / "consumequeue").iterdir():
        assert nm.is_legal(nm.check_any_topic, d.name), d.name


def _still_serves(s: Standalone) -> None:
    async def scenario() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(s.broker_addr, send_cmd("SecFuzzAfter", b"after"), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            await wait_max_offset(c, s.broker_addr, "SecFuzzAfter", 0, 1)
            r = await c.invoke(s.broker_addr, pull_cmd("SecFuzzAfter", 0, 0), 5)
            assert b"after" in [m.body for m in records(r.body_bytes())]
        finally:
            await c.close()

    run(scenario())
    assert s.proc is not None and s.proc.poll() is None


def _targets() -> st.SearchStrategy[object]:
    return st.sampled_from([*HEADER_TARGETS, *BODY_TARGETS])


def _run(site, examples: int) -> None:
    _, _, canary = site

    @settings(max_examples=examples, deadline=None, derandomize=examples <= 300,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(target=_targets(), name=hostile_names(canary))
    def prop(target: object, name: str) -> None:
        _exercise(site, target, name)

    prop()
    _still_serves(site[0])


def test_every_named_request_stays_inside_the_store(site) -> None:
    _run(site, 250)


@pytest.mark.slow
def test_every_named_request_stays_inside_the_store_long(site) -> None:
    _run(site, 5000)


def test_table_covers_the_named_codes() -> None:
    # every code the table names a topic or group for is exercised above
    assert {c for c, _, _ in HEADER_TARGETS} >= {RC.SEND_MESSAGE_V2, RC.PULL_MESSAGE, RC.CONSUMER_SEND_MSG_BACK,
                                               RC.DELETE_TOPIC_IN_BROKER, RC.UPDATE_AND_CREATE_TOPIC,
                                               RC.INVOKE_BROKER_TO_RESET_OFFSET, RC.QUERY_CONSUME_QUEUE,
                                               RC.END_TRANSACTION, RC.GET_ROUTEINFO_BY_TOPIC, RC.PUT_KV_CONFIG}
