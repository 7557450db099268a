"""The naming rules, the store's path guard, the request table and the client's property checks, alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidalmq.client import Message
from tidalmq.client.errors import ValidationError
from tidalmq.client.validators import check_batch, check_message
from tidalmq.common import naming as nm
from tidalmq.common.fileutil import UnsafePathError, path_under
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.request_check import check_request

TRAVERSALS = ["../x", "..", ".", "a/b", "a\\b", "/etc", "Newline\n", "SCHEDULE_TOPIC_XXXX\n", "a\x00b",
              "\u2025x", "a b", "", " ", "x" * 128]


@pytest.mark.parametrize("name", TRAVERSALS)
def test_topic_and_group_rules_refuse_paths_and_control_characters(name: str) -> None:
    with pytest.raises(nm.NameError_):
        nm.check_topic(name)
    if name and name != "x" * 128:  # "%DLQ%" alone is legal, so is a long group's %DLQ% topic
        with pytest.raises(nm.NameError_):
            nm.check_any_topic("%DLQ%" + name)
    if name != "x" * 128:  # too long for a topic, not for a group
        with pytest.raises(nm.NameError_):
            nm.check_group(name)
        with pytest.raises(nm.NameError_):
            nm.retry_topic(name)


def test_legal_names_pass() -> None:
    nm.check_topic("Topic_A-1%|x")
    nm.check_group("G" * nm.GROUP_MAX_LENGTH)
    with pytest.raises(nm.NameError_):
        nm.check_group("G" * (nm.GROUP_MAX_LENGTH + 1))
    # a long group's retry topic is longer than a topic may be, but it names a legal queue directory
    nm.check_any_topic(nm.retry_topic("G" * nm.GROUP_MAX_LENGTH))
    assert len(nm.retry_topic("G" * nm.GROUP_MAX_LENGTH).encode()) <= 255
    nm.check_broker_name("broker-a.example")
    nm.check_addr("127.0.0.1:10911")
    with pytest.raises(nm.NameError_):
        nm.check_broker_name("a..b")
    with pytest.raises(nm.NameError_):
        nm.check_addr("127.0.0.1:99999")


def test_path_under_refuses_escape(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    assert path_under(root, "T", "0") == os.path.join(os.path.realpath(root), "T", "0")
    for parts in (("..",), ("../x",), ("a/b",), ("a\x00",), ("",), ()):
        with pytest.raises(UnsafePathError):
            path_under(root, *parts)
    # a symbolic link planted inside the store does not lead out of it
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "Link")
    with pytest.raises(UnsafePathError):
        path_under(root, "Link", "0")


def _req(code: int, **ext: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=ext)


def refusal(req: RemotingCommand) -> str:
    """The remark ``check_request`` refuses ``req`` with (it must refuse it)."""
    remark = check_request(req)
    assert remark is not None, f"accepted: {req.ext_fields}"
    return remark


def test_request_table_ranges_and_names() -> None:
    ok = dict(consumerGroup="G", topic="T", queueId="0")
    assert check_request(_req(RC.UPDATE_CONSUMER_OFFSET, **ok, commitOffset=str(2**63 - 1))) is None
    assert "out of range" in refusal(_req(RC.UPDATE_CONSUMER_OFFSET, **ok, commitOffset=str(2**70)))
    assert "out of range" in refusal(_req(RC.PULL_MESSAGE, **ok, queueOffset="0", maxMsgNums=str(2**31)))
    assert "not a long" in refusal(_req(RC.UPDATE_CONSUMER_OFFSET, **ok, commitOffset="1_0"))
    assert "<commitOffset> is null" in refusal(_req(RC.UPDATE_CONSUMER_OFFSET, **ok))
    assert "perm" in refusal(_req(RC.UPDATE_AND_CREATE_TOPIC, topic="T", perm="99999"))
    assert "illegal characters" in refusal(_req(RC.UPDATE_AND_CREATE_TOPIC, topic="Newline\n"))
    assert "group" in refusal(_req(RC.QUERY_CONSUMER_OFFSET, **{**ok, "consumerGroup": "../../evil"}))


def test_request_bodies() -> None:
    hb = RemotingCommand(code=RC.HEART_BEAT, body=b'{"clientID":"c","consumerDataSet":[{"groupName":12345}]}')
    assert "must be a string" in refusal(hb)
    hb.body = b'{"consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"../T"}]}]}'
    assert "illegal characters" in refusal(hb)
    lock = RemotingCommand(code=RC.LOCK_BATCH_MQ,
                           body=b'{"consumerGroup":"G","mqSet":[{"topic":"T","brokerName":"b","queueId":4294967296}]}')
    assert "out of range" in refusal(lock)
    reg = RemotingCommand(code=RC.REGISTER_BROKER, ext_fields=dict(brokerName="b", brokerAddr="127.0.0.1:1",
                                                                   clusterName="C"),
                          body=b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"../x":{"perm":6}}}}')
    assert "illegal characters" in refusal(reg)
    # a name that is a list or an object (found by the long request fuzz run): refused, not a crash
    for bad in (b'{"groupName": []}', b'{"groupName": {"a": 1}}'):
        sg = RemotingCommand(code=RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=bad)
        assert "must be a string" in refusal(sg)


def test_client_refuses_property_injection() -> None:
    msg = Message("T", b"x", properties={"a": "x\x02DELAY\x012"})
    with pytest.raises(ValidationError, match="separator"):
        check_message(msg)
    with pytest.raises(ValidationError, match="separator"):
        Message("T", b"x").put_user_property("k\x01", "v")
    for name in ("DELAY", "REAL_TOPIC", "TIMER_DELIVER_MS", "UNIQ_KEY"):
        with pytest.raises(ValidationError, match="used by system"):
            Message("T", b"x").put_user_property(name, "1")
    m = Message("T", b"x")
    m.put_user_property("color", "red")
    check_message(m)
    assert m.properties["color"] == "red"
    # in a batch, and in a name; a name that is empty or not a string, a value that is not a string
    fine = Message("T", b"ok", properties={"k": "v"})
    for props, why in (({"note": "x\x01y"}, "separator"), ({"n\x02": "v"}, "separator"),
                       ({"": "v"}, "non-empty string"), ({"k": 5}, "must be a string"), ({7: "v"}, "non-empty string"),
                       ({"k": "v", "": "w"}, "non-empty string"), ({"k": "v\x02", "j\x01": "w"}, "separator")):
        bad = Message("T", b"x")
        bad.properties = props  # type: ignore[assignment]  # as set after construction, unconverted
        with pytest.raises(ValidationError, match=why):
            check_batch([fine, bad])
