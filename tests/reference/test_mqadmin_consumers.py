"""consumerStatus, cloneGroupOffset and printMsgByQueue: Apache's mqadmin (RocketMQ 5.4's tools) against
Apache RocketMQ and against TidalMQ, and TidalMQ's mqadmin beside it against TidalMQ (docs/mqadmin.md).

Each server gets the same three messages on a one-queue topic and a live TidalMQ push consumer that has
consumed them: consumerStatus asks it for its ConsumerRunningInfo through the broker
(GET_CONSUMER_RUNNING_INFO), cloneGroupOffset reads its offsets (GET_CONSUME_STATS) and writes them for
another group (UPDATE_CONSUMER_OFFSET), printMsgByQueue pulls the queue (PULL_MESSAGE).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.reference.apache import ApacheRocketMQ, mqadmin
from tests.reference.test_mqadmin import Target, _tidal_mqadmin
from tests.support import ModuleTmp, Standalone, wait_for
from tidalmq.client import Message, Producer, PushConsumer
from tidalmq.client.admin import Admin
from tidalmq.client.message import MessageExt, MessageQueue

pytestmark = [pytest.mark.reference, pytest.mark.timeout(600)]

TOPIC, GROUP, CLONE = "RefStatusTopic", "RefStatusGroup", "RefStatusClone"
T = TypeVar("T")


class LiveConsumer:
    """A TidalMQ push consumer of GROUP on its own event loop in a thread, so that the tools run while it
    answers the broker."""

    def __init__(self, namesrv: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.got: list[MessageExt] = []
        self.consumer = PushConsumer(GROUP, namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                     persist_offset_interval=0.5)
        self.consumer.subscribe(TOPIC, "*")
        self.consumer.register_listener(self.got.extend)
        self.run(self.consumer.start())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        try:
            self.run(self.consumer.shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


async def _seed(namesrv: str) -> tuple[list[str], str, str]:
    async with Admin(namesrv) as admin:
        ((cluster, names),) = (await admin.cluster_info())["clusterAddrTable"].items()
        await admin.create_topic(TOPIC, 1, cluster=cluster)
        await admin.create_group(CLONE, cluster=cluster)
    producer = Producer("RefStatusPG", namesrv)
    await producer.start()
    try:
        ids = [(await producer.send(Message(TOPIC, f"body{i}", tags="TagA" if i % 2 else "TagB",
                                            keys=f"key{i}"))).msg_id for i in range(3)]
    finally:
        await producer.shutdown()
    return ids, cluster, sorted(names)[0]


async def _committed(namesrv: str, group: str, broker: str) -> int:
    async with Admin(namesrv) as admin:
        return await admin.query_offset(group, MessageQueue(TOPIC, broker, 0))


@dataclass
class Runs:
    target: Target
    client_id: str
    home: Path  # the tools' working directory (consumerStatus writes its files there)
    apache: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)  # Apache's tool
    own: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)  # TidalMQ's tool
    cloned: int = -1  # CLONE's committed offset after cloneGroupOffset


COMMANDS: dict[str, list[str]] = {
    "consumerStatus": ["consumerStatus", "-g", GROUP],
    "consumerStatus -b": ["consumerStatus", "-g", GROUP, "-b", "{addr}"],
    "consumerStatus -i": ["consumerStatus", "-g", GROUP, "-i", "{client}"],
    "printMsgByQueue": ["printMsgByQueue", "-t", TOPIC, "-a", "{broker}", "-i", "0", "-p", "true", "-d", "true",
                        "-f", "true"],
    "printMsgByQueue -s": ["printMsgByQueue", "-t", TOPIC, "-a", "{broker}", "-i", "0", "-s", "TagA", "-f", "true"],
    "cloneGroupOffset": ["cloneGroupOffset", "-s", GROUP, "-d", CLONE, "-t", TOPIC],
}


def _args(r: Runs, args: list[str]) -> list[str]:
    t = r.target
    return [a.format(addr=t.broker_addr, broker=t.broker, client=r.client_id) for a in args] + ["-n", t.namesrv]


def _run_server(server: ApacheRocketMQ | Standalone, jars: Path, home: Path) -> Runs:
    ids, cluster, broker = asyncio.run(_seed(server.namesrv_addr))
    live = LiveConsumer(server.namesrv_addr)
    try:
        wait_for(lambda: len(live.got) >= 3, 60, 0.1, "the consumer to receive the three messages")
        wait_for(lambda: asyncio.run(_committed(server.namesrv_addr, GROUP, broker)) == 3, 60, 0.2,
                 "the consumer's offset committed")
        runs = Runs(Target(server.namesrv_addr, server.broker_addr, cluster, broker, ids), live.consumer.client_id,
                    home)
        for name, args in COMMANDS.items():
            runs.apache[name] = mqadmin(jars, home, _args(runs, args))
            if name == "cloneGroupOffset":
                runs.cloned = asyncio.run(_committed(server.namesrv_addr, CLONE, broker))
                asyncio.run(_reset_clone(server.namesrv_addr, broker))
            if isinstance(server, Standalone):
                runs.own[name] = _tidal_mqadmin(_args(runs, args), cwd=home)
        return runs
    finally:
        live.close()


async def _reset_clone(namesrv: str, broker: str) -> None:
    """CLONE's offset back to 0, so that TidalMQ's tool is seen to clone it again."""
    async with Admin(namesrv) as admin:
        await admin.update_offset(CLONE, MessageQueue(TOPIC, broker, 0), 0)


@pytest.fixture(scope="module")
def runs(apache: ApacheRocketMQ, tidal: Standalone, rocketmq_jars: Path,
         module_tmp: ModuleTmp) -> Iterator[tuple[Runs, Runs]]:
    home = module_tmp("mqadmin-consumers")
    yield _run_server(apache, rocketmq_jars, home / "apache"), _run_server(tidal, rocketmq_jars, home / "tidal")


def _mask(r: Runs, text: str) -> str:
    text = text.replace(r.client_id, "CLIENTID")
    text = re.sub(r"\b\d{17}\b", "HUMANTIME", text)  # ProcessQueueInfo's yyyyMMddHHmmssSSS
    return r.target.mask(text)


def _ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Exception" not in p.stdout + p.stderr, p.stdout + p.stderr[-3000:]
    return p.stdout


def _sections(text: str, squeeze: bool = False) -> dict[str, list[str]]:
    """formatString's sections (#Consumer Properties#, …), each a sorted list of its lines (with ``squeeze``
    their tokens: two servers' masked names pad differently)."""
    out: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines():
        if re.fullmatch(r"#[^#]+#", line):
            name = line
            out[name] = []
        elif line.strip():
            out.setdefault(name, []).append(" ".join(line.split()) if squeeze else line)
    return {k: sorted(v) for k, v in out.items()}


def _message_fields(text: str) -> list[str]:
    """printMsgByQueue's lines with what each broker writes its own way masked: the record's size and
    CommitLog offset, the offset id (store host and CommitLog offset) and the property map's entries."""
    text = re.sub(r"storeSize=\d+|commitLogOffset=\d+|msgId=[0-9A-F]{32}|properties=\{[^}]*\}",
                  lambda m: m.group(0).split("=")[0] + "=X", text)
    return [ln for ln in text.splitlines() if ln.strip()]


def _sorted_properties(text: str) -> str:
    """The property map's entries in key order (Java's HashMap prints them in its own)."""
    return re.sub(r"properties=\{([^}]*)\}", lambda m: "properties={" + ", ".join(sorted(m.group(1).split(", ")))
                  + "}", text)


@pytest.mark.parametrize("name", ["consumerStatus", "consumerStatus -b"])
def test_consumer_status_lists_the_live_consumer_as_on_apache_rocketmq(runs: tuple[Runs, Runs], name: str) -> None:
    ref, tmq = runs
    theirs, ours = _mask(ref, _ok(ref.apache[name])), _mask(tmq, _ok(tmq.apache[name]))
    assert ours.split() == theirs.split()
    assert "CLIENTID" in ours and "Rebalance OK" in ours
    own = _mask(tmq, _ok(tmq.own[name]))
    assert own.splitlines() == ours.splitlines()


def test_consumer_status_file_holds_the_running_info(runs: tuple[Runs, Runs]) -> None:
    """Each tool writes the consumer's formatString to <now>/<clientId> under its working directory: the
    consumer's properties, its subscriptions and the queue it holds at the committed offset."""
    _, tmq = runs
    files = []
    for p in (tmq.apache["consumerStatus"], tmq.own["consumerStatus"]):
        path = p.stdout.splitlines()[1].split()[-1]
        assert path.endswith("/" + tmq.client_id)
        files.append(_sections(_mask(tmq, (tmq.home / path).read_text())))
    theirs, ours = files
    assert ours == theirs
    assert any(re.fullmatch(rf"{TOPIC} +BROKER +0 +3 *", ln) for ln in ours["#Consumer Offset#"])


def test_consumer_status_of_one_client_prints_its_running_info(runs: tuple[Runs, Runs]) -> None:
    ref, tmq = runs
    name = "consumerStatus -i"
    theirs = _sections(_mask(ref, _ok(ref.apache[name])), squeeze=True)
    ours = _sections(_mask(tmq, _ok(tmq.apache[name])), squeeze=True)
    assert list(ours) == list(theirs) == [
        "#Consumer Properties#", "#Consumer Subscription#", "#Consumer Offset#", "#Consumer MQ Detail#",
        "#Consumer Pop Detail#", "#Consumer RT&TPS#", "#User Consume Info#"]
    # the same consumer answers both brokers: its whole answer is the same, but for its start time and
    # pull and lock times
    assert ours == theirs
    assert f"{TOPIC} BROKER 0 3" in ours["#Consumer Offset#"]
    assert "PROP_CONSUME_TYPE : CONSUME_PASSIVELY" in ours["#Consumer Properties#"]
    # TidalMQ's tool prints the same text, column for column
    assert _sections(_mask(tmq, _ok(tmq.own[name]))) == _sections(_mask(tmq, tmq.apache[name].stdout))


def test_clone_group_offset_copies_the_committed_offsets(runs: tuple[Runs, Runs]) -> None:
    ref, tmq = runs
    for r in (ref, tmq):
        assert r.cloned == 3
        assert r.target.mask(_ok(r.apache["cloneGroupOffset"])) == \
               f"clone group offset success. srcGroup[{GROUP}], destGroup=[{CLONE}], topic[{TOPIC}]"
    assert _ok(tmq.own["cloneGroupOffset"]) == _ok(tmq.apache["cloneGroupOffset"])
    assert asyncio.run(_committed(tmq.target.namesrv, CLONE, tmq.target.broker)) == 3  # cloned again


@pytest.mark.parametrize("name", ["printMsgByQueue", "printMsgByQueue -s"])
def test_print_msg_by_queue_reads_the_queue_as_on_apache_rocketmq(runs: tuple[Runs, Runs], name: str) -> None:
    ref, tmq = runs
    theirs = _message_fields(_mask(ref, _ok(ref.apache[name])))
    ours = _message_fields(_mask(tmq, _ok(tmq.apache[name])))
    assert ours == theirs
    expected_tags = ["Tag: TagB                           Count: 2", "Tag: TagA                           Count: 1"]
    if name == "printMsgByQueue":
        assert sum(ln.startswith("MSGID: MSGID") for ln in ours) == 3
        assert sorted(ln for ln in ours if ln.startswith("Tag:")) == sorted(expected_tags)
    else:  # -s TagA: the broker hands over what matches, -p false prints no message
        assert ours == ["Tag: TagA                           Count: 1"]
    own = _mask(tmq, _ok(tmq.own[name]))
    theirs_on_tidal = _mask(tmq, tmq.apache[name].stdout)
    assert sorted(_sorted_properties(own).splitlines()) == sorted(_sorted_properties(theirs_on_tidal).splitlines())
