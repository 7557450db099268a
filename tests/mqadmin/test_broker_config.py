"""``mqadmin updateBrokerConfig``: live keys take effect at once and are written back to the broker's config
file; other keys and bad values are refused and change nothing (broker/live_config.py)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.harness import uniq
from tests.mqadmin.conftest import Run, run_mqadmin
from tests.mqadmin.test_mqadmin import ok
from tests.support import Standalone
from tidalmq.client.errors import MQBrokerError
from tidalmq.client.message import Message
from tidalmq.client.producer import Producer
from tidalmq.remoting.codes import ResponseCode


class _FromFile(Standalone):
    """A standalone started with ``-c FILE``, as an operator's broker.conf."""

    def __init__(self, data_dir: Path, conf: Path) -> None:
        super().__init__(data_dir, {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
        self.conf = conf

    def command(self) -> list[str]:
        return [*super().command(), "-c", str(self.conf)]


@pytest.fixture
def from_file(tmp_path: Path) -> Iterator[_FromFile]:
    conf = tmp_path / "broker.conf"
    conf.write_text("# the operator's file\nbrokerClusterName=DefaultCluster\nmaxMessageSize=4194304\n")
    with _FromFile(tmp_path / "data", conf) as s:
        yield s


def _config(s: Standalone) -> dict[str, str]:
    lines = ok(run_mqadmin(s.namesrv_addr, "getBrokerConfig", "-b", s.broker_addr)).splitlines()
    return {k.strip(): v.strip() for k, v in (ln.split("=  ", 1) for ln in lines[1:] if ln)}


def _send(s: Standalone, topic: str, size: int) -> None:
    async def go() -> None:
        p = Producer(uniq("PID_Cfg"), s.namesrv_addr, retry_times_when_send_failed=0)
        await p.start()
        try:
            await asyncio.wait_for(p.send(Message(topic, os.urandom(size))), 15)
        finally:
            await p.shutdown()
    asyncio.run(go())


def test_max_message_size_applies_live_and_is_persisted(from_file: _FromFile) -> None:
    s = from_file
    topic = uniq("MqaCfg")
    ok(run_mqadmin(s.namesrv_addr, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    _send(s, topic, 2048)  # fits the start-up limit
    out = ok(run_mqadmin(s.namesrv_addr, "updateBrokerConfig", "-b", s.broker_addr, "-k", "maxMessageSize", "-v", "1024"))
    assert out == f"update broker config success, {s.broker_addr}\n"
    with pytest.raises(MQBrokerError) as refused:
        _send(s, topic, 2048)
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL and "MAX: 1024" in str(refused.value.remark)
    _send(s, topic, 512)
    assert _config(s)["maxMessageSize"] == "1024"
    # written back in place: the operator's comment and other keys kept, the key rewritten, not appended
    assert s.conf.read_text() == "# the operator's file\nbrokerClusterName=DefaultCluster\nmaxMessageSize=1024\n"


def test_keys_not_live_unknown_keys_and_bad_values_are_refused(mqadmin: Run, shared_standalone: Standalone) -> None:
    s = shared_standalone
    before = _config(s)
    for key, value, why in (("flushDiskType", "SYNC_FLUSH", "cannot be changed at runtime"),
                            ("noSuchKey", "1", "unknown configuration key noSuchKey"),
                            ("brokerPermission", "9", "brokerPermission=9: must be between 0 and 7"),
                            ("slaveReadEnable", "maybe", "expected true or false"),
                            ("maxMessageSize", str(64 * 1024 * 1024), "restart to go higher")):
        r = mqadmin("updateBrokerConfig", "-c", "DefaultCluster", "-k", key, "-v", value)
        assert r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
        assert f"CODE: {ResponseCode.SYSTEM_ERROR} " in r.stderr and why in r.stderr, r.stderr
    assert _config(s) == before


def test_producer_connection_lists_the_group_while_it_is_connected(mqadmin: Run, shared_standalone: Standalone) -> None:
    s = shared_standalone
    topic, group = uniq("MqaPc"), uniq("PID_Pc")
    ok(mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))

    async def go() -> str:
        p = Producer(group, s.namesrv_addr)
        await p.start()
        try:
            await asyncio.wait_for(p.send(Message(topic, b"hello")), 15)  # the route: the broker is known
            await asyncio.wait_for(p.instance.send_heartbeat(), 15)  # what the 30 s heartbeat timer sends
            return ok(await asyncio.to_thread(mqadmin, "producerConnection", "-g", group, "-t", topic))
        finally:
            await p.shutdown()
    shown = asyncio.run(go())
    rows = shown.splitlines()
    assert len(rows) == 1 and rows[0].startswith("0001  ") and rows[0].split()[3] == "PYTHON", shown
    gone = mqadmin("producerConnection", "-g", group, "-t", topic)  # shut down: unregistered
    assert gone.returncode == 1 and f"CODE: 1 DESC: the producer group[{group}] not exist" in gone.stderr


def test_clean_expired_cq_drops_the_queues_of_topics_the_broker_no_longer_has(from_file: Standalone) -> None:
    s = from_file
    kept, stale = uniq("MqaKeep"), uniq("MqaStale")
    for topic in (kept, stale):
        ok(run_mqadmin(s.namesrv_addr, "updateTopic", "-b", s.broker_addr, "-t", topic, "-r", "1", "-w", "1"))
        _send(s, topic, 100)
    cq_root = s.data_dir / "store" / "consumequeue"
    assert (cq_root / stale).is_dir() and (cq_root / kept).is_dir()
    # the topic vanishes from the broker's table while its queue stays on disk (a table restored from a
    # backup, an edited topics.json): what cleanExpiredCQ is for
    s.stop()
    topics_file = s.data_dir / "store" / "config" / "topics.json"
    table = json.loads(topics_file.read_text())
    del table["topicConfigTable"][stale]
    topics_file.write_text(json.dumps(table))
    s.start()
    out = run_mqadmin(s.namesrv_addr, "cleanExpiredCQ", "-b", s.broker_addr)
    assert ok(out) == "success"
    assert not (cq_root / stale).exists() and (cq_root / kept).is_dir()
    status = ok(run_mqadmin(s.namesrv_addr, "topicStatus", "-t", kept)).splitlines()
    assert status[1].split()[2:4] == ["0", "1"]  # the kept topic's queue: its message still there
