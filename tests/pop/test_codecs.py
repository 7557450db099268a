"""The pop handle and checkpoint codecs (pure, no socket), in RocketMQ's formats."""

from __future__ import annotations

import pytest

from tidalmq.acl.permission import SUB
from tidalmq.acl.resources import request_resources
from tidalmq.broker.pop.order import OrderLock, OrderLocks
from tidalmq.broker.pop.polling import PopLongPolling
from tidalmq.broker.pop.revive_log import AckMsg, PopCheckPoint, revive_topic
from tidalmq.common import fastjson
from tidalmq.common import pop_handle as xi
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.request_check import check_request


def test_extra_info_round_trip_and_rocketmq_layout() -> None:
    info = xi.ExtraInfo(5, 1700000000000, 30000, 0, xi.RETRY_V1, "broker-a", 3, 7)
    # ExtraInfoUtil.buildExtraInfo: ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId offset
    assert info.build() == "5 1700000000000 30000 0 1 broker-a 3 7"
    assert xi.ExtraInfo.parse(info.build()) == info
    assert info.deadline == 1700000030000
    # The 7-field form (no message offset) parses too.
    assert xi.ExtraInfo.parse("5 1 2 0 0 b 3").queue_offset == -1


@pytest.mark.parametrize("bad", ["", "1 2 3", "a 1 2 0 0 b 3 4", "1 2 3 0 0 b x 4"])
def test_bad_extra_info_is_refused(bad: str) -> None:
    with pytest.raises(xi.ExtraInfoError):
        xi.ExtraInfo.parse(bad)


def test_pop_retry_topic_names() -> None:
    assert xi.pop_retry_topic("T", "G") == "%RETRY%G_T"  # KeyBuilder.buildPopRetryTopicV1
    assert xi.retry_flag("T") == "0" and xi.retry_flag("%RETRY%G_T") == "1" and xi.retry_flag("%RETRY%G+T") == "2"
    assert xi.real_topic("T", "G", "1") == "%RETRY%G_T" and xi.real_topic("T", "G", "2") == "%RETRY%G+T"
    assert xi.normal_topic("%RETRY%G_T", "G") == "T" and xi.normal_topic("%RETRY%G+T", "G") == "T"
    with pytest.raises(xi.ExtraInfoError):
        xi.real_topic("T", "G", "9")


def test_response_header_infos() -> None:
    starts = xi.build_start_offset_info([("T", 0, 10), ("%RETRY%G_T", 0, 2)])
    assert starts == "0 0 10;1 0 2"
    assert xi.parse_start_offset_info(starts) == {"0@0": 10, "1@0": 2}
    offs = xi.build_msg_offset_info([("T", 1, [10, 11, 13])])
    assert offs == "0 1 10,11,13"
    assert xi.parse_msg_offset_info(offs) == {"0@1": [10, 11, 13]}
    assert xi.queue_key("%RETRY%G_T", 0) == "1@0"


def test_checkpoint_and_ack_use_rocketmq_json_keys() -> None:
    ck = PopCheckPoint("T", 2, "G", 100, 1700000000000, 5000, [100, 101, 104], "broker-a")
    d = fastjson.loads(ck.encode())
    assert (d["so"], d["pt"], d["it"], d["q"], d["t"], d["c"], d["bn"], d["n"], d["d"]) == (
        100, 1700000000000, 5000, 2, "T", "G", "broker-a", 3, [0, 1, 4])
    assert PopCheckPoint.decode(ck.encode()) == ck
    ack = AckMsg("T", 2, "G", 100, 1700000000000, (104,), "broker-a")
    assert fastjson.loads(ack.encode())["ao"] == 104 and ack.tag == "ack"
    assert AckMsg.decode(ack.encode()) == ack and ack.key == ck.key
    batch = AckMsg("T", 2, "G", 100, 1700000000000, (100, 101), "broker-a")  # BatchAckMsg
    assert fastjson.loads(batch.encode())["aol"] == [100, 101] and batch.tag == "bAck"
    assert AckMsg.decode(batch.encode()) == batch
    assert revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"


def test_order_lock_releases_after_the_last_ack() -> None:
    locks = OrderLocks()
    key = ("G", "T", 0)
    locks.lend(key, OrderLock(1000, 500, [3, 4], 5))
    assert locks.busy(key, 1200) and not locks.busy(key, 1500)  # lent until its deadline
    assert locks.ack(key, 999, 3) is None  # an ack of another lending is ignored
    assert locks.ack(key, 1000, 3) is None and locks.busy(key, 1200)
    assert locks.ack(key, 1000, 4) == 5 and not locks.busy(key, 1200)


def test_pop_requests_are_checked_and_need_sub() -> None:
    ext = {"consumerGroup": "G", "topic": "T", "queueId": "-1", "maxMsgNums": "4", "invisibleTime": "1000",
           "pollTime": "0", "bornTime": "0", "initMode": "0"}
    assert check_request(RemotingCommand(code=RC.POP_MESSAGE, ext_fields=ext)) is None
    why = check_request(RemotingCommand(code=RC.POP_MESSAGE, ext_fields={**ext, "consumerGroup": "../g"}))
    assert why is not None and "illegal characters" in why
    why = check_request(RemotingCommand(code=RC.ACK_MESSAGE, ext_fields={"consumerGroup": "G", "topic": "T",
                                                                         "queueId": "0", "offset": "1"}))
    assert why is not None and "extraInfo" in why
    for code in (RC.POP_MESSAGE, RC.ACK_MESSAGE, RC.CHANGE_MESSAGE_INVISIBLETIME, RC.NOTIFICATION):
        assert request_resources(RemotingCommand(code=code, ext_fields=ext)) == {"%RETRY%G": SUB, "T": SUB}


def test_batch_ack_bit_set_is_java_bitset_bytes_in_base64() -> None:
    # java.util.BitSet {0, 2, 9}.toByteArray() == {0x05, 0x02}; fastjson writes a byte[] as base64.
    assert xi.bitset_of(100, [100, 102, 109]) == "BQI="
    assert xi.bitset_offsets(100, "BQI=") == [100, 102, 109]
    with pytest.raises(ValueError):
        xi.bitset_of(100, [99])
    with pytest.raises(ValueError):
        xi.bitset_offsets(0, "not base64!")


def test_batch_ack_body_is_checked_and_needs_sub() -> None:
    ack = {"c": "G", "t": "T", "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 1000, "b": "AQ=="}
    body = fastjson.dumpb({"brokerName": "broker-a", "acks": [ack]})
    assert check_request(RemotingCommand(code=RC.BATCH_ACK_MESSAGE, body=body)) is None
    assert request_resources(RemotingCommand(code=RC.BATCH_ACK_MESSAGE, body=body)) == {"%RETRY%G": SUB, "T": SUB}
    bad = fastjson.dumpb({"acks": [{**ack, "c": "../g"}]})
    why = check_request(RemotingCommand(code=RC.BATCH_ACK_MESSAGE, body=bad))
    assert why is not None and "illegal characters" in why


def test_polling_is_capped() -> None:
    polling = PopLongPolling(max_waiting=2)
    a = polling.register(["T"])
    b = polling.register(["T", "%RETRY%G_T"])
    assert polling.full and polling.waiting_count() == 2
    polling.notify(["%RETRY%G_T"])
    assert b.is_set() and not a.is_set()
    polling.unregister(["T"], a)
    assert not polling.full
