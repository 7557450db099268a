"""The official Java client 4.x (rocketmq-client 4.9.8) against Apache RocketMQ and against TidalMQ.

One run of tests/reference/jvm/client4 (all scenarios side by side, in one JVM) a server; each test checks
one scenario's observations, the same assertions for both servers. What differs between them is listed in
docs/compatibility.md ("The Java 4.x client").
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reference.apache import ApacheRocketMQ, mqadmin
from tests.reference.java4 import (
    CLIENT_TIMEOUT,
    Event,
    client4_command,
    decode_offset_msg_id,
    events,
    parse_events,
    run_client4,
)
from tests.support import ModuleTmp, Standalone

SCENARIOS = ["send", "push", "orderly", "broadcast", "filter", "delay", "transaction", "retry", "bad"]
# A half message is checked back once it is transactionTimeOut old, every transactionCheckInterval: both
# short here, the same on both servers, so that the check-back scenario takes seconds.
TRANSACTION_SETTINGS = {"transactionCheckInterval": "1000", "transactionTimeOut": "3000"}
# the client's unique id: its IP (4 bytes, or 16 for IPv6), pid, class-loader hash, time and counter, in hex
UNIQ_ID = re.compile(r"^(?:[0-9A-F]{32}|[0-9A-F]{56})$")
OFFSET_MSG_ID = re.compile(r"^[0-9A-F]{32}$")  # an IPv4 store host here
Server = ApacheRocketMQ | Standalone


@pytest.fixture(scope="module")
def apache(rocketmq_jars: Path, module_tmp: ModuleTmp) -> Iterator[ApacheRocketMQ]:
    ref = ApacheRocketMQ(rocketmq_jars, module_tmp("apache-rocketmq"), broker_settings=TRANSACTION_SETTINGS)
    with ref:
        yield ref
    ref.remove()


@pytest.fixture(scope="module")
def tidal(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    # SQL92 subscriptions need enablePropertyFilter, off by default on both (the Apache fixture sets it).
    data = module_tmp("tidalmq") / "data"
    with Standalone(data, settings={"enablePropertyFilter": "true", **TRANSACTION_SETTINGS}) as s:
        yield s
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def observed(server: Server, reference_cache: Path, module_tmp: ModuleTmp) -> dict[str, list[Event]]:
    return run_client4(reference_cache, module_tmp("client4"), server.namesrv_addr, SCENARIOS)


def _check_ids(d: Event, server: Server) -> None:
    """msgId is the client's 32-hex unique id; offsetMsgId decodes to the broker's address and the
    message's CommitLog offset."""
    assert UNIQ_ID.match(d["msgId"]), d
    assert OFFSET_MSG_ID.match(d["offsetMsgId"]), d
    host, offset = decode_offset_msg_id(d["offsetMsgId"])
    assert host == server.broker_addr
    assert offset == d["commitLogOffset"]


def test_sync_async_oneway_batch_sends_read_by_lite_pull(observed: dict[str, list[Event]], server: Server) -> None:
    sent = {e["event"]: e for e in events(observed, "send") if e["event"] in ("sync", "async", "batch")}
    for r in sent.values():
        assert r["status"] == "SEND_OK"
        assert r["regionId"] == "DefaultRegion"
        assert r["topic"].startswith("J4send_")
    assert len(sent["batch"]["msgId"].split(",")) == 3
    assert len(sent["batch"]["offsetMsgId"].split(",")) == 3
    got = {e["body"]: e for e in events(observed, "send", "consumed")}
    assert sorted(got) == ["async", "batch0", "batch1", "batch2", "oneway", "sync"]
    for d in got.values():
        _check_ids(d, server)
        assert d["bornHost"].startswith("/127.0.0.1:")
        assert d["storeHost"] == f"/{server.broker_addr}"
        assert d["storeTimestamp"] >= d["bornTimestamp"]
        assert d["reconsumeTimes"] == 0
        props = d["properties"]
        assert props["UNIQ_KEY"] == d["msgId"]
        assert props["KEYS"] == d["keys"]
        assert props["TAGS"] == d["tags"]
        assert int(props["MIN_OFFSET"]) == 0 and int(props["MAX_OFFSET"]) > d["queueOffset"]
    sync = got["sync"]
    assert sync["properties"]["color"] == "blue"
    assert (sync["msgId"], sync["offsetMsgId"], sync["queueId"], sync["queueOffset"]) == (
        sent["sync"]["msgId"], sent["sync"]["offsetMsgId"], sent["sync"]["queueId"], sent["sync"]["queueOffset"])
    batch_ids = [got[f"batch{i}"]["msgId"] for i in range(3)]
    assert batch_ids == sent["batch"]["msgId"].split(",")
    # a batch goes to one queue, at consecutive offsets from the one its SendResult names
    assert [got[f"batch{i}"]["queueOffset"] for i in range(3)] == [sent["batch"]["queueOffset"] + i for i in range(3)]
    assert {got[f"batch{i}"]["queueId"] for i in range(3)} == {sent["batch"]["queueId"]}


def test_push_consumer_concurrently_gets_every_message_once(observed: dict[str, list[Event]], server: Server) -> None:
    got = events(observed, "push", "consumed")
    assert sorted(d["body"] for d in got) == [f"push{i}" for i in range(8)]
    for d in got:
        _check_ids(d, server)
        assert "CONSUME_START_TIME" in d["properties"]


def test_orderly_consumer_keeps_each_orders_steps_in_order(observed: dict[str, list[Event]]) -> None:
    sent = events(observed, "orderly", "sent")
    queue_of: dict[int, set[int]] = {}
    for r in sent:
        assert r["status"] == "SEND_OK"
        queue_of.setdefault(r["order"], set()).add(r["queueId"])
    assert all(len(q) == 1 for q in queue_of.values()), queue_of  # the selector's queue, every time
    (arrivals,) = events(observed, "orderly", "arrivals")
    steps: dict[int, list[int]] = {}
    for a in arrivals["arrivals"]:
        queue, body = a.split("/")
        order, step = map(int, body.split(":"))
        assert {int(queue)} == queue_of[order]
        steps.setdefault(order, []).append(step)
    assert steps == {o: [0, 1, 2, 3, 4] for o in range(3)}


def test_broadcasting_consumers_each_get_every_message(observed: dict[str, list[Event]]) -> None:
    got = events(observed, "broadcast", "consumer")
    assert [g["bodies"] for g in sorted(got, key=lambda g: g["instance"])] == [
        ["broadcast0", "broadcast1", "broadcast2"]] * 2


def test_tag_and_sql92_subscriptions(observed: dict[str, list[Event]]) -> None:
    assert not events(observed, "filter", "startFailed")
    got = {g["selector"]: g["bodies"] for g in events(observed, "filter", "consumer")}
    assert got == {"tag": ["f0", "f1", "f3", "f4"], "sql": ["f3", "f4", "f5"]}


def test_delay_level_2_arrives_no_earlier_than_5_s(observed: dict[str, list[Event]], server: Server) -> None:
    (sent,) = events(observed, "delay", "sent")
    assert sent["status"] == "SEND_OK"
    (d,) = events(observed, "delay", "consumed")
    _check_ids(d, server)
    assert d["msgId"] == sent["msgId"]
    assert d["offsetMsgId"] != sent["offsetMsgId"]  # delivered as a new CommitLog entry
    waited = d["receivedAt"] - d["sentAt"]
    assert 5000 <= waited < 20000, waited
    assert d["storeTimestamp"] - d["bornTimestamp"] >= 5000 - 50  # born on the client, stored when due
    props = d["properties"]
    assert props["REAL_TOPIC"] == d["topic"]
    assert props["REAL_QID"] == str(d["queueId"])


def test_unknown_transaction_committed_by_check_back(observed: dict[str, list[Event]], server: Server) -> None:
    (sent,) = events(observed, "transaction", "sent")
    assert (sent["status"], sent["localTransactionState"]) == ("SEND_OK", "UNKNOW")
    checks = events(observed, "transaction", "checked")
    assert len(checks) == 1
    check = checks[0]
    assert check["properties"]["TRAN_MSG"] == "true"
    assert check["properties"]["TRANSACTION_CHECK_TIMES"] == "1"
    assert check["properties"]["UNIQ_KEY"] == sent["msgId"]
    assert check["receivedAt"] - sent["sentAt"] >= 3000  # not before transactionTimeOut
    (d,) = events(observed, "transaction", "consumed")
    _check_ids(d, server)
    assert d["msgId"] == sent["msgId"]
    assert d["sysFlag"] & 0xC == 0x8  # TRANSACTION_COMMIT_TYPE
    assert d["properties"]["PGROUP"].startswith("J4Gtransaction_")
    assert d["receivedAt"] >= check["receivedAt"]


def test_retry_after_reconsume_later_then_dlq_readable(observed: dict[str, list[Event]], server: Server) -> None:
    first, second = events(observed, "retry", "delivered")
    assert (first["reconsumeTimes"], second["reconsumeTimes"]) == (0, 1)
    assert first["topic"] == second["topic"]  # the client shows the original topic, not %RETRY%
    assert second["msgId"] == first["msgId"]
    props = second["properties"]
    assert props["RETRY_TOPIC"] == first["topic"]
    assert props["REAL_TOPIC"].startswith("%RETRY%J4Gretry_")
    # level 3 (10 s): stored into the retry topic no earlier than 10 s after the first delivery
    gap = second["storeTimestamp"] - first["receivedAt"]
    assert 10000 - 100 <= gap < 15000, gap
    # A 4.x consumer of a new group learns its %RETRY% topic's route (made by its first heartbeat) at its
    # next NameServer poll (pollNameServerInterval, 30 s) and pulls that queue from the rebalance after it
    # (rocketmq.client.rebalance.waitInterval, 20 s): the retry reaches the listener up to ~50 s after the
    # consumer started, bounded by the client's intervals, not equal to them (CI saw 40 s).
    assert second["receivedAt"] - first["receivedAt"] < 30000 + 20000 + 5000
    # maxReconsumeTimes 1: the second RECONSUME_LATER sends it to %DLQ%group, which a consumer can read
    (queues,) = events(observed, "retry", "dlqQueues")
    assert queues["count"] >= 1
    (dead,) = events(observed, "retry", "dlq")
    assert dead["topic"].startswith("%DLQ%J4Gretry_")
    assert dead["msgId"] == first["msgId"]
    assert dead["body"] == first["body"]
    assert dead["properties"]["RETRY_TOPIC"] == first["topic"]


def test_bad_input_answers(observed: dict[str, list[Event]]) -> None:
    got = {e["event"]: e for e in events(observed, "bad") if e["event"] != "done"}
    # refused by the client itself
    assert got["topicTooLong"]["failure"]["remark"] == "The specified topic is longer than topic max length 127."
    assert "contains illegal characters" in got["topicIllegalChars"]["failure"]["remark"]
    assert got["emptyBody"]["failure"]["remark"] == "the message body length is zero"
    # refused by the broker: MESSAGE_ILLEGAL (13); the remark differs (docs/compatibility.md)
    assert got["propertiesTooLong"]["failure"]["exception"] == "MQBrokerException"
    assert got["propertiesTooLong"]["failure"]["responseCode"] == 13
    # an incompressible body just over maxMessageSize (4 MiB by default on both), and one of 6 MiB
    for case in ("bodyJustOver4MiB", "bodyTooLarge"):
        assert got[case]["failure"]["exception"] == "MQBrokerException", got[case]
        assert got[case]["failure"]["responseCode"] == 13, got[case]


# ACL: Apache RocketMQ 5.4.0 no longer has ACL 1.0 (its rocketmq-acl module and aclEnable/plain_acl.yml
# are gone, replaced by the auth module's users and ACLs, docs/compatibility.md): the 4.x client's
# AclClientRPCHook is checked against TidalMQ alone, with what RocketMQ 4.9 answers.
ACL_YML = """\
accounts:
  - accessKey: j4access
    secretKey: j4secret1
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
    topicPerms:
      - J4Denied=DENY
"""


@pytest.fixture(scope="module")
def tidal_acl(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    data = module_tmp("tidalmq-acl") / "data"
    (data / "conf").mkdir(parents=True)
    (data / "conf" / "plain_acl.yml").write_text(ACL_YML)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ROCKETMQ_HOME", raising=False)  # the data directory is the ACL files' home, then
        s = Standalone(data, settings={"aclEnable": "true"})
        s.start()
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(data, ignore_errors=True)


def test_acl_client_rpc_hook(tidal_acl: Standalone, reference_cache: Path, module_tmp: ModuleTmp) -> None:
    good = run_client4(reference_cache, module_tmp("client4-acl"), tidal_acl.namesrv_addr, ["acl"],
                       access=("j4access", "j4secret1"))
    got = {e["event"]: e for e in events(good, "acl")}
    assert got["send"]["result"]["status"] == "SEND_OK"
    assert got["consumed"]["count"] == 1
    denied = got["sendDenied"]["failure"]
    # RocketMQ 4.9 answers an AclException as SYSTEM_ERROR (1) with its message as the remark; the client
    # retries a SYSTEM_ERROR (retryTimesWhenSendFailed) and then throws with the broker's answer as cause
    assert (denied["exception"], denied["responseCode"]) == ("MQClientException", 1), denied
    cause = denied["cause"]
    assert (cause["exception"], cause["responseCode"]) == ("MQBrokerException", 1), denied
    assert "J4Denied" in cause["remark"], denied
    wrong = run_client4(reference_cache, module_tmp("client4-acl-wrong"), tidal_acl.namesrv_addr, ["acl"],
                        access=("j4access", "not-the-secret"))
    got = {e["event"]: e for e in events(wrong, "acl")}
    assert "result" not in got["send"], got["send"]
    assert got["consumed"]["count"] == 0


def test_push_consumer_after_reset_offset_by_time(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                                  module_tmp: ModuleTmp) -> None:
    """Apache's mqadmin resetOffsetByTime on a live 4.x push consumer's group: the messages come again and
    the consumer goes on consuming (once seen stuck with "unfinished pullMsgEvent")."""
    home = module_tmp("client4-reset")
    cmd = client4_command(reference_cache, home, server.namesrv_addr, ["reset"])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=home)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        ready = None
        for line in proc.stdout:  # the program's own waits are bounded; communicate() below bounds the rest
            lines.append(line)
            if '"event":"ready"' in line:
                ready = json.loads(line)
                break
        assert ready is not None, lines
        reset = mqadmin(rocketmq_jars, module_tmp("mqadmin-reset"), [
            "resetOffsetByTime", "-n", server.namesrv_addr, "-g", ready["group"], "-t", ready["topic"], "-s", "0"])
        assert reset.returncode == 0, reset.stderr
        rest, _ = proc.communicate(timeout=CLIENT_TIMEOUT)
        lines += rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    observed = parse_events(lines)
    (again,) = events(observed, "reset", "redelivered")
    assert again["complete"], (again, reset.stdout)
    assert sorted(again["bodies"]) == sorted([f"reset{i}" for i in range(5)] * 2)
    (after,) = events(observed, "reset", "after")
    assert after["arrived"]


def test_send_to_a_missing_topic_with_auto_create_off(server: Server, reference_cache: Path, rocketmq_jars: Path,
                                                      module_tmp: ModuleTmp) -> None:
    """autoCreateTopicEnable=false: a send to a topic nobody created is refused. Apache's broker is switched
    live (mqadmin updateBrokerConfig) and back; TidalMQ reads the key at start, so a broker of its own."""
    if isinstance(server, ApacheRocketMQ):
        def auto_create(value: str) -> None:
            out = mqadmin(rocketmq_jars, module_tmp("mqadmin-autocreate"), [
                "updateBrokerConfig", "-n", server.namesrv_addr, "-b", server.broker_addr,
                "-k", "autoCreateTopicEnable", "-v", value])
            assert out.returncode == 0, out.stderr

        auto_create("false")
        try:
            observed = run_client4(reference_cache, module_tmp("client4-noroute"), server.namesrv_addr, ["noroute"])
        finally:
            auto_create("true")
    else:
        data = module_tmp("tidalmq-strict") / "data"
        with Standalone(data, settings={"autoCreateTopicEnable": "false"}) as strict:
            observed = run_client4(reference_cache, module_tmp("client4-noroute"), strict.namesrv_addr, ["noroute"])
        shutil.rmtree(data, ignore_errors=True)
    (send,) = events(observed, "noroute", "send")
    failure = send["failure"]
    if isinstance(server, ApacheRocketMQ):
        # switched live, the broker still announces TBW102, so the client sends and the broker refuses:
        # TOPIC_NOT_EXIST (17), retried by the client, the broker's answer as the cause
        assert failure["responseCode"] == 17, send
        assert failure["cause"]["responseCode"] == 17, send
        assert failure["cause"]["remark"].startswith(f"topic[{send_topic(observed)}] not exist, apply first please!")
    else:
        # started with it off, no TBW102 is announced (RocketMQ creates TBW102 only when the key is on at
        # start), so the client finds no route and sends nothing
        assert failure["responseCode"] == 10005, send
        assert failure["remark"].startswith("No route info of this topic: J4noroute_"), send


def send_topic(observed: dict[str, list[Event]]) -> str:
    (send,) = events(observed, "noroute", "send")
    found = re.search(r"Topic: (\S+),", send["failure"]["remark"])
    assert found is not None, send
    return found.group(1)
