"""Each attack measured against a standalone, reproduced exactly, and shown refused: nothing outside the
store is created, changed or removed, and the broker keeps serving."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.broker.rawclient import pull_cmd, records, run, send_cmd, wait_max_offset
from tests.security.support import heartbeat, plant_canary, snapshot, up_to_root
from tests.support import ModuleTmp, Standalone
from tidalmq.client import Message, Producer
from tidalmq.client.errors import ValidationError
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient


@pytest.fixture(scope="module")
def site(module_tmp: ModuleTmp):
    root = module_tmp("attacks")
    canary = plant_canary(root)
    with Standalone(root / "data", {"mappedFileSizeCommitLog": str(8 * 1024 * 1024)}) as s:
        yield s, canary


def _cmd(code: int, body: bytes | None = None, /, **ext: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=ext, body=body)


def _cq_dirs(s: Standalone) -> list[str]:
    return sorted(p.name for p in (s.data_dir / "store" / "consumequeue").iterdir())


def test_send_back_with_traversal_group_is_refused(site) -> None:
    s, canary = site
    before = snapshot(canary)

    async def scenario() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(s.broker_addr, send_cmd("SecSendBack", b"m"), 5)
            assert r.code == ResponseCode.SUCCESS
            group = up_to_root(canary / "x" / "planted")
            for code in (RC.CONSUMER_SEND_MSG_BACK,):
                r = await c.invoke(s.broker_addr, _cmd(code, group=group, offset="0", delayLevel="0",
                                                       originMsgId="", originTopic="SecSendBack"), 5)
                assert r.code == ResponseCode.SYSTEM_ERROR and "group" in (r.remark or ""), r.remark
            r = await c.invoke(s.broker_addr, heartbeat("cid-1", group), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "groupName" in (r.remark or ""), r.remark
        finally:
            await c.close()

    run(scenario())
    assert snapshot(canary) == before
    assert not [d for d in _cq_dirs(s) if "." in d or "RETRY" in d or "DLQ" in d]


def test_delete_topic_with_dlq_traversal_is_refused(site) -> None:
    s, canary = site
    before = snapshot(canary)

    async def scenario() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(s.broker_addr, _cmd(RC.DELETE_TOPIC_IN_BROKER, topic="%DLQ%" + up_to_root(canary / "x")), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in (r.remark or ""), r.remark
            r = await c.invoke(s.namesrv_addr, _cmd(RC.DELETE_TOPIC_IN_NAMESRV, topic="%DLQ%../../x"), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR, r.remark
        finally:
            await c.close()

    run(scenario())
    assert snapshot(canary) == before and (canary / "x" / "keep2.txt").exists()


def test_offsets_refuse_traversal_groups_and_out_of_range_values(site) -> None:
    s, _ = site

    async def scenario() -> None:
        c = RemotingClient()
        try:
            a = s.broker_addr
            assert (await c.invoke(a, send_cmd("SecOffsets", b"m"), 5)).code == ResponseCode.SUCCESS
            good = dict(consumerGroup="SecG", topic="SecOffsets", queueId="0")
            r = await c.invoke(a, _cmd(RC.UPDATE_CONSUMER_OFFSET, **good, commitOffset="1"), 5)
            assert r.code == ResponseCode.SUCCESS
            r = await c.invoke(a, _cmd(RC.UPDATE_CONSUMER_OFFSET, **{**good, "consumerGroup": "../../evil"},
                                       commitOffset="1"), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (r.remark or ""), r.remark
            r = await c.invoke(a, _cmd(RC.UPDATE_CONSUMER_OFFSET, **good, commitOffset=str(2**70)), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "out of range for a long" in (r.remark or ""), r.remark
            r = await c.invoke(a, _cmd(RC.QUERY_CONSUMER_OFFSET, **good), 5)
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "1"
            r = await c.invoke(a, _cmd(RC.QUERY_CONSUMER_OFFSET, **{**good, "consumerGroup": "../../evil"}), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR
        finally:
            await c.close()

    run(scenario())
    offsets = (s.data_dir / "store" / "config" / "consumerOffset.json")
    assert "evil" not in (offsets.read_text() if offsets.exists() else "")


def test_topic_names_with_newline_and_bad_perm_are_refused(site) -> None:
    s, _ = site

    async def scenario() -> None:
        c = RemotingClient()
        try:
            for topic in ("Newline\n", "SCHEDULE_TOPIC_XXXX\n"):
                r = await c.invoke(s.broker_addr, _cmd(RC.UPDATE_AND_CREATE_TOPIC, topic=topic, readQueueNums="1",
                                                       writeQueueNums="1", perm="6"), 5)
                assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (r.remark or ""), r.remark
                r = await c.invoke(s.broker_addr, send_cmd(topic, b"m"), 5)
                assert r.code == ResponseCode.SYSTEM_ERROR
            r = await c.invoke(s.broker_addr, _cmd(RC.UPDATE_AND_CREATE_TOPIC, topic="SecPerm", readQueueNums="1",
                                                   writeQueueNums="1", perm="99999"), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "perm" in (r.remark or ""), r.remark
            r = await c.invoke(s.broker_addr, _cmd(RC.GET_ALL_TOPIC_CONFIG), 5)
            table = fastjson.loads(r.body_bytes())["topicConfigTable"]
            assert not [t for t in table if "\n" in t] and "SecPerm" not in table
        finally:
            await c.close()

    run(scenario())
    assert not [d for d in _cq_dirs(s) if "\n" in d]


def test_heartbeat_with_numeric_group_is_refused(site) -> None:
    s, _ = site

    async def scenario() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(s.broker_addr, heartbeat("cid-2", 12345), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "must be a string" in (r.remark or ""), r.remark
            r = await c.invoke(s.broker_addr, _cmd(RC.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="12345"), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and "no consumer" in (r.remark or "")
            r = await c.invoke(s.broker_addr, heartbeat("cid-2", "SecHbOk", "SecHbTopic"), 5)
            assert r.code == ResponseCode.SUCCESS
        finally:
            await c.close()

    run(scenario())


def test_property_injection_is_refused(site) -> None:
    s, _ = site
    topic = "SecProps"

    async def scenario() -> None:
        async with Producer("SecPG", s.namesrv_addr) as p:
            # the client refuses before anything leaves it
            with pytest.raises(ValidationError, match="separator"):
                await p.send(Message(topic, b"inject", properties={"note": "x\x02DELAY\x012"}))
            with pytest.raises(ValidationError, match="used by system"):
                Message(topic, b"inject").put_user_property("DELAY", "2")
        c = RemotingClient()
        try:
            # the broker refuses what only it writes, and drops what delivered messages carry
            r = await c.invoke(s.broker_addr, send_cmd(topic, b"x", props={"TIMER_ROLL_TIMES": "1"}), 5)
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_ROLL_TIMES" in (r.remark or ""), r.remark
            r = await c.invoke(s.broker_addr, send_cmd(topic, b"plain", props={
                "REAL_TOPIC": "Elsewhere", "REAL_QID": "3", "TIMER_DEQUEUE_MS": "1",
                "TIMER_OUT_MS": str(int(time.time() * 1000) + 60_000), "color": "red"}), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            await wait_max_offset(c, s.broker_addr, topic, 0, 1)
            r = await c.invoke(s.broker_addr, pull_cmd(topic, 0, 0), 5)
            msgs = records(r.body_bytes())
            assert [m.body for m in msgs] == [b"plain"]
            props = msgs[0].properties
            assert props.get("color") == "red"
            assert not {"REAL_TOPIC", "REAL_QID", "TIMER_DEQUEUE_MS", "TIMER_OUT_MS", "DELAY"} & set(props)
        finally:
            await c.close()

    run(scenario())


def test_names_on_disk_that_fail_the_rules_are_reported_and_left_alone(tmp_path: Path) -> None:
    canary = plant_canary(tmp_path)
    data = tmp_path / "data"
    cfg = data / "store" / "config"
    cfg.mkdir(parents=True)
    cq = data / "store" / "consumequeue"
    cq.mkdir()
    (cfg / "topics.json").write_text(fastjson.dumps({"topicConfigTable": {
        "../evil": {"topicName": "../evil", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
        "Newline\n": {"topicName": "Newline\n", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
        "SecDiskOk": {"topicName": "SecDiskOk", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}}))
    (cfg / "subscriptionGroup.json").write_text(fastjson.dumps({"subscriptionGroupTable": {
        "../g": {"groupName": "../g"}}}))
    (cfg / "consumerOffset.json").write_text(fastjson.dumps({"offsetTable": {"T@../../evil": {"0": 1}}}))
    (cfg / "delayOffset.json").write_text(fastjson.dumps({"offsetTable": {"../x": 1, "1": 0}}))
    (data / "namesrv").mkdir()
    (data / "namesrv" / "kvConfig.json").write_text(fastjson.dumps({"configTable": {"NS": {"k\n": "v"}}}))
    (cq / "bad name").mkdir()
    (cq / "Planted").symlink_to(canary / "x", target_is_directory=True)
    before = snapshot(canary)

    with Standalone(data, {"mappedFileSizeCommitLog": str(8 * 1024 * 1024)}) as s:
        async def scenario() -> None:
            c = RemotingClient()
            try:
                r = await c.invoke(s.broker_addr, send_cmd("SecDiskOk", b"still serving"), 5)
                assert r.code == ResponseCode.SUCCESS, r.remark
                await wait_max_offset(c, s.broker_addr, "SecDiskOk", 0, 1)
                r = await c.invoke(s.broker_addr, pull_cmd("SecDiskOk", 0, 0), 5)
                assert [m.body for m in records(r.body_bytes())] == [b"still serving"]
                r = await c.invoke(s.broker_addr, _cmd(RC.GET_ALL_TOPIC_CONFIG), 5)
                table = fastjson.loads(r.body_bytes())["topicConfigTable"]
                assert "../evil" not in table and "Newline\n" not in table
            finally:
                await c.close()

        run(scenario())
    log = s.log_tail(400)
    assert "topic '../evil' not loaded" in log and "group '../g' not loaded" in log
    assert "'T@../../evil' not loaded" in log and "ignoring 'bad name'" in log and "ignoring 'Planted'" in log
    # left in their files as they were, and on disk
    assert "../evil" in (cfg / "topics.json").read_text()
    assert "../g" in (cfg / "subscriptionGroup.json").read_text()
    assert "../../evil" in (cfg / "consumerOffset.json").read_text()
    assert (cq / "bad name").is_dir() and (cq / "Planted").is_symlink()
    assert snapshot(canary) == before
