"""Retry with backoff and dead letters, seen through the official client (rocketmq==0.4.4).

Delay levels are configured short (all 1 s) so that a message's whole retry life (16 retries, the
client's maximum) fits in the test. The listener fails on purpose; the client answers
RECONSUME_LATER and sends the message back (CONSUMER_SEND_MSG_BACK)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.compat.harness import create_topic, msg, uniq, wait_route
from tests.support import Standalone
from tidalmq.common import fastjson
from tidalmq.common.record import decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

pytestmark = pytest.mark.compat

LEVELS = " ".join(["1s"] * 18)


@pytest.fixture
def broker(tmp_path):
    s = Standalone(tmp_path / "data", {"messageDelayLevel": LEVELS, "mappedFileSizeCommitLog": str(16 * 1024 * 1024)})
    s.start()
    yield s
    s.stop()


def request(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    async def go() -> RemotingCommand:
        c = RemotingClient()
        try:
            return await c.invoke(addr, cmd, 5)
        finally:
            await c.close()

    return asyncio.run(asyncio.wait_for(go(), 20))


def start(agents: Any, s: Standalone, topic: str, group: str, fail_times: int) -> tuple[Any, Any]:
    create_topic(s.namesrv_addr, topic, queues=2)
    wait_route(s.namesrv_addr, topic)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    c = agents.new("consumer")
    c.call("consumer_start", cid="c", group=group, topic=topic, namesrv=s.namesrv_addr, expr="*",
           props=["RETRY_TOPIC", "ORIGIN_MESSAGE_ID"], fail_times=fail_times)
    return p, c


def test_failed_message_is_retried_with_backoff_then_succeeds(broker: Standalone, agents: Any) -> None:
    topic, group = uniq("RetryT"), uniq("RetryG")
    p, c = start(agents, broker, topic, group, fail_times=2)
    (sent,) = p.call("send", mode="sync", messages=[msg(topic, "try me", keys="k-retry", tags="TagA")])
    assert sent["status"] == "OK"
    got = c.wait_messages(lambda ms: any(not m["failed"] for m in ms), 40, "the third delivery")
    attempts = [m for m in got if m["keys"] == "k-retry"]
    assert [m["reconsume_times"] for m in attempts] == [0, 1, 2]
    assert [m["failed"] for m in attempts] == [True, True, False]
    # The consumer sees the original topic, id, tags and body on every attempt.
    assert {m["topic"] for m in attempts} == {topic}
    assert {m["id"] for m in attempts} == {sent["msg_id"]}
    assert {m["tags"] for m in attempts} == {"TagA"}
    assert attempts[1]["props"]["RETRY_TOPIC"] == topic
    assert attempts[1]["props"]["ORIGIN_MESSAGE_ID"] == sent["msg_id"]
    # Backoff: each retry waits out its delay level (1 s here) before it is delivered again.
    gaps = [b["store_timestamp"] - a["t"] * 1000 for a, b in zip(attempts, attempts[1:], strict=False)]
    assert all(g >= 900 for g in gaps), gaps
    c.settle(quiet=1.5, limit=4)
    assert len([m for m in c.messages() if m["keys"] == "k-retry"]) == 3  # no further delivery


def test_message_lands_in_dlq_after_max_retries_and_is_subscribable(broker: Standalone, agents: Any) -> None:
    topic, group = uniq("DlqT"), uniq("DlqG")
    p, c = start(agents, broker, topic, group, fail_times=1000)
    (sent,) = p.call("send", mode="sync", messages=[msg(topic, "doomed", keys="k-dlq")])
    assert sent["status"] == "OK"
    # The client's maximum is 16 retries: 17 deliveries in all, then the dead-letter queue.
    c.wait_messages(lambda ms: len([m for m in ms if m["keys"] == "k-dlq"]) >= 17, 60, "17 deliveries")
    dlq = f"%DLQ%{group}"

    def dlq_entries() -> list[dict[str, Any]]:
        r = request(broker.broker_addr, RemotingCommand(code=RequestCode.QUERY_CONSUME_QUEUE, ext_fields={
            "topic": dlq, "queueId": "0", "index": "0", "count": "10", "consumerGroup": group}))
        return fastjson.loads(r.body_bytes())["queueData"] if r.code == ResponseCode.SUCCESS else []

    from tests.support import wait_for

    entries = wait_for(dlq_entries, 15, what="the dead letter")
    assert len(entries) == 1
    raw = request(broker.broker_addr, RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={
        "offset": str(entries[0]["physicOffset"])}))
    dead = decode_record(raw.body_bytes())
    assert dead.topic == dlq and dead.body == b"doomed"
    assert dead.properties["RETRY_TOPIC"] == topic and dead.properties["UNIQ_KEY"] == sent["msg_id"]
    assert dead.reconsume_times == 17
    c.settle(quiet=1.5, limit=4)
    assert len([m for m in c.messages() if m["keys"] == "k-dlq"]) == 17
    # An ordinary subscription reads the dead-letter queue: RocketMQ creates it readable (perm 6), so that
    # an operator's consumer can inspect or re-drive it (tests/reference/test_java4_client.py shows Apache's).
    pull = request(broker.broker_addr, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": "anyone", "topic": dlq, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
        "expressionType": "TAG"}))
    assert pull.code == ResponseCode.SUCCESS, pull.remark
    assert b"doomed" in pull.body_bytes()
