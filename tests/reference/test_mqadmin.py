"""Apache's mqadmin (RocketMQ 5.4's tools) against Apache RocketMQ and against TidalMQ, and TidalMQ's own
mqadmin beside it against TidalMQ (docs/mqadmin.md).

The same subcommands run against each server after the same few messages (sent with tidalmq.client); the
answers are compared with what differs by nature masked (addresses, cluster and broker names, versions,
ids, times, rates): exit status, header lines, and each row's values token for token. Then TidalMQ's tool
and Apache's, both against the TidalMQ server, must print the same text column for column.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.reference.apache import ApacheRocketMQ, mqadmin
from tests.support import ModuleTmp, Standalone
from tidalmq.client.admin import Admin
from tidalmq.client.message import Message
from tidalmq.client.producer import Producer

# the module's fixture starts Apache RocketMQ and runs some forty tool JVMs: more than the default per-test limit
pytestmark = [pytest.mark.reference, pytest.mark.timeout(600)]

TOPIC, FIFO, GONE, GROUP = "RefAdminTopic", "RefAdminFifo", "RefAdminGone", "RefAdminGroup"


@dataclass
class Target:
    """One server as the tools see it: its names, and the ids of the messages sent to it."""

    namesrv: str
    broker_addr: str
    cluster: str
    broker: str
    uniq_keys: list[str] = field(default_factory=list)

    def mask(self, text: str) -> str:
        """What differs between two servers by nature, replaced by a name for it."""
        text = text.replace(self.broker_addr, "ADDR").replace(self.namesrv, "NAMESRV")
        text = re.sub(rf"\b{re.escape(self.cluster)}\b", "CLUSTER", text)
        text = re.sub(rf"\b{re.escape(self.broker)}\b", "BROKER", text)
        for i, key in enumerate(self.uniq_keys):
            text = text.replace(key, f"MSGID{i}")
        text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(,\d{3})?", "TIME", text)
        text = re.sub(r"\b\d{13}\b", "MILLIS", text)  # timestamps in ms, index keys' hours
        text = re.sub(r"\bV\d+_\d+_\d+(_SNAPSHOT)?\b", "VERSION", text)
        text = re.sub(r"127\.0\.0\.1:\d+", "HOST", text)  # born hosts, client addresses
        text = re.sub(r"\b\d+-\d+\(", "N-N(", text)  # clusterList's timer progress: reads and offsets behind
        return re.sub(r"\b\d+\.\d+\b", "RATE", text)  # TPS, hours, disk ratio


def tokens(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.strip()]


async def _seed(namesrv: str) -> tuple[list[str], str, str]:
    """Three keyed messages to TOPIC; the server's cluster and broker names."""
    async with Admin(namesrv) as admin:
        info = await admin.cluster_info()
        ((cluster, names),) = info["clusterAddrTable"].items()
        await admin.create_topic(TOPIC, 4, cluster=cluster)
        await admin.create_topic(GONE, 2, cluster=cluster)
    producer = Producer("RefAdminPG", namesrv)
    await producer.start()
    try:
        ids = []
        for i in range(3):
            res = await producer.send(Message(TOPIC, f"body{i}", tags="TagA", keys=f"key{i}"))
            ids.append(res.msg_id)
    finally:
        await producer.shutdown()
    return ids, cluster, sorted(names)[0]


# each subcommand once per server; {cluster}, {addr}, {id0} filled in for the server
COMMANDS: dict[str, list[str]] = {
    "clusterList": ["clusterList"],
    "clusterList -c": ["clusterList", "-c", "{cluster}"],
    "clusterList -m": ["clusterList", "-m"],
    "topicRoute -l": ["topicRoute", "-t", TOPIC, "-l"],
    "topicStatus": ["topicStatus", "-t", TOPIC, "-c", "{cluster}"],
    "topicClusterList": ["topicClusterList", "-t", TOPIC],
    "updateTopic FIFO": ["updateTopic", "-c", "{cluster}", "-t", FIFO, "-a", "+message.type=FIFO", "-o", "true"],
    "updateTopic DELAY": ["updateTopic", "-b", "{addr}", "-t", FIFO + "D", "-a", "+message.type=DELAY"],
    "updateTopicPerm": ["updateTopicPerm", "-c", "{cluster}", "-t", FIFO, "-p", "4"],
    "updateSubGroup": ["updateSubGroup", "-c", "{cluster}", "-g", GROUP, "-o", "true", "-r", "5"],
    "queryMsgByKey": ["queryMsgByKey", "-t", TOPIC, "-k", "key1", "-m", "10"],
    "queryMsgByUniqueKey": ["queryMsgByUniqueKey", "-t", TOPIC, "-i", "{id0}"],
    "resetOffsetByTime": ["resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "now"],
    "consumerProgress": ["consumerProgress"],
    "updateBrokerConfig": ["updateBrokerConfig", "-b", "{addr}", "-k", "maxMessageSize", "-v", "4194304"],
    "getBrokerConfig": ["getBrokerConfig", "-b", "{addr}"],
    "brokerStatus": ["brokerStatus", "-b", "{addr}"],
    "statsAll": ["statsAll", "-t", TOPIC],
    "deleteTopic": ["deleteTopic", "-c", "{cluster}", "-t", GONE],
}


def _args(t: Target, args: Sequence[str]) -> list[str]:
    ids = {"cluster": t.cluster, "addr": t.broker_addr, "id0": t.uniq_keys[0]}
    return [a.format(**ids) for a in args] + ["-n", t.namesrv]


def _tidal_mqadmin(args: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    cmd = [sys.executable, "-c", "import sys; from tidalmq.mqadmin import main; sys.exit(main())", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


@dataclass
class Answers:
    apache: dict[str, subprocess.CompletedProcess[str]]  # Apache's tool against Apache RocketMQ
    tidal: dict[str, subprocess.CompletedProcess[str]]  # Apache's tool against TidalMQ
    own: dict[str, subprocess.CompletedProcess[str]]  # TidalMQ's tool against TidalMQ
    ref: Target
    tmq: Target


@pytest.fixture(scope="module")
def answers(apache: ApacheRocketMQ, tidal: Standalone, rocketmq_jars: Path, module_tmp: ModuleTmp) -> Answers:
    home = module_tmp("mqadmin-home")
    targets = []
    for server in (apache, tidal):
        ids, cluster, broker = asyncio.run(_seed(server.namesrv_addr))
        targets.append(Target(server.namesrv_addr, server.broker_addr, cluster, broker, ids))
    ref, tmq = targets
    out = Answers({}, {}, {}, ref, tmq)
    def run(t: Target) -> dict[str, subprocess.CompletedProcess[str]]:
        answers = {}
        for name, args in COMMANDS.items():
            answers[name] = mqadmin(rocketmq_jars, home / t.cluster, _args(t, args))
            # TidalMQ's tool right after Apache's, against the state Apache's saw: the mutating commands
            # are idempotent (create again, reset again); deleteTopic would find the topic gone
            if t is tmq and name != "deleteTopic":
                out.own[name] = _tidal_mqadmin(_args(tmq, args))
        return answers

    # the two servers' runs side by side (each server's in order: some commands change what the next sees)
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run, t) for t in (ref, tmq)]
        out.apache, out.tidal = runs[0].result(), runs[1].result()
    return out


def _both(a: Answers, name: str) -> tuple[str, str]:
    ref, tmq = a.apache[name], a.tidal[name]
    assert ref.returncode == tmq.returncode == 0, (ref.stderr[-2000:], tmq.stderr[-2000:])
    assert "Exception" not in tmq.stdout + tmq.stderr, tmq.stdout + tmq.stderr
    return a.ref.mask(ref.stdout), a.tmq.mask(tmq.stdout)


# answers equal token for token once masked
SAME = ["clusterList", "clusterList -c", "clusterList -m", "topicRoute -l", "topicClusterList",
        "updateTopic FIFO", "updateTopic DELAY", "updateTopicPerm", "updateSubGroup", "updateBrokerConfig",
        "deleteTopic"]


@pytest.mark.parametrize("name", SAME)
def test_apache_mqadmin_answers_tidalmq_as_apache_rocketmq(answers: Answers, name: str) -> None:
    ref, tmq = _both(answers, name)
    assert tokens(tmq) == tokens(ref)


def test_apache_mqadmin_reads_the_same_message_from_both(answers: Answers) -> None:
    ref, tmq = _both(answers, "queryMsgByUniqueKey")

    def fields(text: str) -> dict[str, str]:
        return {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":" in ln)}

    a, b = fields(ref), fields(tmq)
    for key in ("Topic", "Tags", "Keys", "Queue Offset", "Reconsume Times", "System Flag", "Born Host", "Store Host"):
        assert a[key] == b[key], key
    # the property map: the producer's entries, in the order each broker keeps them (RocketMQ 5's broker
    # adds CLUSTER, MSG_REGION and TRACE_ON; docs/mqadmin.md), and TidalMQ's ends with the record CRC, __CRC32#
    # (enabledAppendPropCRC: on by default in TidalMQ, off in RocketMQ; docs/compatibility.md)
    ours, theirs = set(b["Properties"].strip("{}").split(", ")), set(a["Properties"].strip("{}").split(", "))
    assert {p.split("=")[0] for p in ours - theirs} == {"__CRC32#"}
    assert {p.split("=")[0] for p in theirs - ours} <= {"CLUSTER", "MSG_REGION", "TRACE_ON"}


@pytest.mark.parametrize("name", ["consumerProgress", "statsAll", "brokerStatus", "getBrokerConfig", "topicStatus",
                                  "queryMsgByKey"])
def test_apache_mqadmin_tables_of_tidalmq_have_apaches_shape(answers: Answers, name: str) -> None:
    """Lists whose rows differ by nature (the system topics and groups each server has, its config keys):
    the same header, and each row of the same form."""
    ref, tmq = _both(answers, name)
    ref_lines, tmq_lines = ref.splitlines(), tmq.splitlines()
    if name not in ("brokerStatus", "getBrokerConfig"):  # these start with a key each broker has its own of
        assert tmq_lines[0] == ref_lines[0]
    if name == "brokerStatus":  # "%-32s: %s" a key
        assert all(re.fullmatch(r"\S.{0,}: .*", ln) for ln in tmq_lines)
        keys = {ln.split(":")[0].strip() for ln in tmq_lines}
        assert {"brokerVersionDesc", "putTps", "getTransferredTps", "brokerActive", "commitLogDiskRatio"} <= keys
    elif name == "getBrokerConfig":
        assert tmq_lines[0] == "============ADDR============"
        assert all(re.fullmatch(r"\S+ *=  .*", ln) for ln in tmq_lines[1:] if ln)
    elif name in ("topicStatus", "queryMsgByKey"):
        # which queue a message went to, and its CommitLog offset, depend on the broker: the rows' count
        # and their values' count, and the lines after them
        def rows(lines: list[str]) -> list[int]:
            return sorted(len(ln.split()) for ln in lines[1:] if ln.startswith(("BROKER", "MSGID")))

        assert rows(tmq_lines) == rows(ref_lines)
        assert [ln for ln in tmq_lines if not ln.startswith(("BROKER", "MSGID"))] == \
               [ln for ln in ref_lines if not ln.startswith(("BROKER", "MSGID"))]
    elif name == "statsAll":
        (row,) = [ln for ln in tmq_lines[1:] if ln.startswith(TOPIC)]
        (ref_row,) = [ln for ln in ref_lines[1:] if ln.startswith(TOPIC)]
        assert row.split() == ref_row.split()


# TidalMQ's tool against TidalMQ: the very text Apache's prints, what changes between two runs masked
OWN_SAME = ["clusterList", "clusterList -c", "clusterList -m", "topicRoute -l", "topicStatus", "topicClusterList",
            "updateTopic FIFO", "updateTopic DELAY", "updateSubGroup", "queryMsgByKey", "queryMsgByUniqueKey",
            "consumerProgress", "updateBrokerConfig", "getBrokerConfig", "statsAll"]


@pytest.mark.parametrize("name", OWN_SAME)
def test_tidalmq_mqadmin_prints_apaches_columns(answers: Answers, name: str) -> None:
    theirs, ours = answers.tidal[name], answers.own[name]
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    t = answers.tmq
    theirs_lines, ours_lines = t.mask(theirs.stdout).splitlines(), t.mask(ours.stdout).splitlines()
    if name == "queryMsgByUniqueKey":  # TidalMQ's prints the body; Apache's writes it to a file
        theirs_lines = [ln for ln in theirs_lines if not ln.startswith("Message Body Path:")]
        ours_lines = [ln for ln in ours_lines if not ln.startswith(("Message Body:", "OffsetID:"))]
        theirs_lines, ours_lines = sorted(filter(None, theirs_lines)), sorted(filter(None, ours_lines))
        ours_lines = [re.sub(r"\{.*\}", "{}", ln) for ln in ours_lines]  # property order
        theirs_lines = [re.sub(r"\{.*\}", "{}", ln) for ln in theirs_lines]
    if name in ("statsAll", "getBrokerConfig"):  # the rows' order is Apache's HashMap's
        theirs_lines, ours_lines = [theirs_lines[0], *sorted(theirs_lines[1:])], [ours_lines[0], *sorted(ours_lines[1:])]
    assert ours_lines == theirs_lines
