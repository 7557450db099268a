"""The official client (rocketmq==0.4.4, C++ core) and transactions.

Its Python wrapper has no transactional producer (its librocketmq.so exports no CreateTransactionProducer /
SendMessageTransaction), so the official producer sends the half message as its TransactionMQProducer would
(TRAN_MSG=true, PGROUP) through its plain send path, our client answers the check-back as the producer of
that group, and the official push consumer must receive the committed message, and only that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import (
    create_topic,
    msg,
    require_official_client,
    sentinels_received,
    uniq,
    without_sentinels,
)
from tests.support import Standalone
from tests.transaction.helpers import FAST, Listener, check_round_after, checks_received, register
from tidalmq.client import TransactionProducer, TransactionState
from tidalmq.remoting.transport import RemotingClient

require_official_client()
from tests.compat.conftest import agents  # noqa: E402,F401  (the fixture)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Standalone]:
    with Standalone(tmp_path / "data", FAST) as s:  # stopped (SIGTERM) on exit
        yield s


def test_official_half_message_committed_on_check_back(agents: Any, broker: Standalone) -> None:  # noqa: F811
    topic, tx_group = uniq("TxOfficial"), uniq("TPG")
    create_topic(broker.namesrv_addr, topic, 2)
    consumer = agents.new("consumer")
    consumer.call("consumer_start", cid="c", group=uniq("CG"), topic=topic, namesrv=broker.namesrv_addr,
                  props=["PGROUP", "TRAN_MSG", "REAL_TOPIC", "UNIQ_KEY"])
    producer = agents.new("producer")
    producer.call("producer_start", group=uniq("PG"), namesrv=broker.namesrv_addr)
    props = {"TRAN_MSG": "true", "PGROUP": tx_group}
    sent = producer.call("send", mode="sync", messages=[
        msg(topic, "commit me", keys="k-commit", props=props),
        msg(topic, "roll me back", keys="k-rollback", props=props),
        msg(topic, "plain", keys="k-plain"),
    ])
    assert [r["status"] for r in sent] == ["OK"] * 3, sent
    consumer.wait_messages(lambda ms: any(m["keys"] == "k-plain" for m in ms), 30, "the plain message", cid="c")

    class Decide(Listener):
        def check_local_transaction(self, m: Any) -> TransactionState:
            self.checks.append((0.0, m))
            return TransactionState.COMMIT if m.keys == ["k-commit"] else TransactionState.ROLLBACK

    listener = Decide()

    async def answer() -> None:
        async with TransactionProducer(tx_group, listener, broker.namesrv_addr) as p:
            await register(p, topic)
            deadline = asyncio.get_running_loop().time() + 20
            while len(listener.checks) < 2:
                assert asyncio.get_running_loop().time() < deadline, "no check-back"
                await asyncio.sleep(0.05)
            # A round three check intervals later would check again a message whose answer was lost: none
            # is, so both decisions are applied on the broker before the consumer's messages are judged.
            client = RemotingClient()
            try:
                interval = int(FAST["transactionCheckInterval"])
                await check_round_after(client, broker.broker_addr, time.time() * 1000 + 3 * interval)
            finally:
                await client.close()
            await checks_received(p)
            assert len(listener.checks) == 2

    asyncio.run(answer())
    got = consumer.wait_messages(lambda ms: any(m["keys"] == "k-commit" for m in ms), 30, "the committed message",
                                 cid="c")
    # after both decisions: a rolled-back message committed by mistake would come before them
    sentinels_received(producer, [consumer], topic, 2)
    got = without_sentinels(consumer.messages("c"))
    assert sorted(m["keys"] for m in got) == ["k-commit", "k-plain"]
    committed = next(m for m in got if m["keys"] == "k-commit")
    assert committed["props"]["PGROUP"] == tx_group
    assert not committed["props"]["TRAN_MSG"] and not committed["props"]["REAL_TOPIC"]  # "" when absent
    assert committed["props"]["UNIQ_KEY"] == sent[0]["msg_id"]
