"""The official client (rocketmq==0.4.4, C++ core) against an ACL-on standalone: its signature
(``set_session_credentials``) is accepted with the right secret, and refused with a wrong one or none."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from tests.acl.conftest import ADMIN, USER
from tests.compat.conftest import Agents, agents  # noqa: F401  (the agents fixture)
from tests.compat.harness import AgentError, create_topic, msg, require_official_client, uniq
from tests.support import Standalone
from tidalmq.client import Admin

pytestmark = pytest.mark.compat
require_official_client()

CHANNEL = "ALIYUN"  # the client's third credential; it signs it as the OnsChannel field


def test_right_credentials_send_and_consume(acl_standalone: Standalone, agents: Agents) -> None:  # noqa: F811
    topic = "both"
    create_topic(acl_standalone.namesrv_addr, topic, 2, credentials=ADMIN)
    consumer = agents.new("consumer")
    consumer.call("consumer_start", cid="c", group=uniq("readers"), topic=topic, namesrv=acl_standalone.namesrv_addr,
                  credentials=[USER.access_key, USER.secret_key, CHANNEL])
    producer = agents.new("producer")
    producer.call("producer_start", group=uniq("PG"), namesrv=acl_standalone.namesrv_addr,
                  credentials=[USER.access_key, USER.secret_key, CHANNEL])
    # The consumer starts at the queues' end: send until one message sent after it got going arrives.
    deadline = time.monotonic() + 40
    sent: list[str] = []
    failed: list[str] = []
    while not consumer.messages():
        assert time.monotonic() < deadline, \
            f"nothing consumed; sent {sent}, failed sends {failed[-3:]}\n{consumer.stderr_tail()}"
        key = f"k{len(sent)}"
        try:
            [r] = producer.call("send", mode="sync", messages=[msg(topic, key, keys=key)])
        except AgentError as e:
            # The 0.4.4 client reports a send refused (busy, on a loaded machine) or a route it did not get in
            # time as "No route info of this topic": nothing was sent. Refused credentials fail every send,
            # and the deadline above says so with these errors.
            failed.append(str(e).splitlines()[0])
        else:
            assert r["status"] == "OK", r
            sent.append(key)
        try:
            consumer.wait(consumer.messages, 0.5, "a message")
        except AgentError:
            pass  # not yet: send another
    assert {m["keys"] for m in consumer.messages()} <= set(sent)


@pytest.mark.parametrize(("credentials", "why"), [
    # the client signs even without credentials: with an empty AccessKey (RocketMQ says the same)
    (None, "No acl config for "),
    ([USER.access_key, "notTheSecret", CHANNEL], f"Check signature failed for accessKey={USER.access_key}"),
], ids=["none", "wrong"])
def test_missing_or_wrong_credentials_are_refused(acl_standalone: Standalone, agents: Agents,  # noqa: F811
                                                  credentials: list[str] | None, why: str) -> None:
    topic = uniq("acl")
    create_topic(acl_standalone.namesrv_addr, topic, 2, credentials=ADMIN)
    producer = agents.new("producer")
    producer.call("producer_start", group=uniq("PG"), namesrv=acl_standalone.namesrv_addr, credentials=credentials)
    [r] = producer.call("send", mode="sync", messages=[msg(topic, "nope")], collect_errors=True)
    # The C++ client hides the broker's remark behind "No route info of this topic" after its retries;
    # the broker's log says why, and nothing was stored.
    assert r["status"] == "ERROR", r
    log = acl_standalone.log_path.read_text()
    assert re.search(rf"ACL refused request code 10 from 127\.0\.0\.1:\d+: {re.escape(why)}$", log, re.M), log[-2000:]
    assert max_offsets(acl_standalone.namesrv_addr, topic) == [0, 0]


def max_offsets(namesrv: str, topic: str) -> list[int]:
    async def go() -> list[int]:
        async with Admin(namesrv, credentials=ADMIN) as admin:
            return [q.max_offset for q in await admin.topic_status(topic)]

    return asyncio.run(asyncio.wait_for(go(), 15))
