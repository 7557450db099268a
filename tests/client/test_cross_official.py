"""Cross test with the official RocketMQ 4.x client (rocketmq==0.4.4, C++ core), driven in a subprocess
by the compat suite's agent (tests/compat/agent.py): what our client sends, the official PushConsumer
receives intact, and what the official Producer sends, our PushConsumer receives intact — bodies
(compressed ones too), tags, keys, user properties and message ids."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.client.helpers import create_topic, uniq, wait_until
from tests.compat.harness import require_official_client
from tests.support import Standalone
from tidalmq.client import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer

require_official_client()

from tests.compat.bodies import digest, gen_body  # noqa: E402
from tests.compat.harness import ClientAgent, send_acknowledged  # noqa: E402

pytestmark = [pytest.mark.compat, pytest.mark.timeout(90)]
PROPS = ["color", "size", "UNIQ_KEY"]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[ClientAgent]:
    a = ClientAgent("official", tmp_path)
    try:
        yield a
    finally:
        a.close()


def specs(topic: str) -> list[tuple[bytes, dict[str, Any]]]:
    """(body, message attributes) of the messages each side sends: small, text, 10 KiB compressible."""
    out = []
    for i in range(6):
        body = gen_body(10 * 1024, i, "text") if i == 5 else gen_body(50 + i * 100, i)
        out.append((body, {"tags": f"Tag{i % 2}", "keys": f"key-{i}", "props": {"color": f"c{i}", "size": str(i)}}))
    return out


def test_our_producer_to_official_consumer(shared_standalone: Standalone, agent: ClientAgent) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("CrossOurs")
    asyncio.run(create_topic(ns, topic, 4))
    agent.call("consumer_start", cid="c", group=uniq("OfficialCG"), topic=topic, namesrv=ns, expr="*",
               model="CLUSTERING", props=PROPS)
    sent = specs(topic)

    async def send() -> list[str]:
        ids = []
        async with Producer(uniq("OurPG"), ns) as p:
            for body, a in sent[:4]:
                ids.append((await p.send(Message(topic, body, tags=a["tags"], keys=a["keys"],
                                                 properties=a["props"]))).msg_id)
            batch = [Message(topic, body, tags=a["tags"], keys=a["keys"], properties=a["props"]) for body, a in sent[4:5]]
            ids += (await p.send_batch(batch)).msg_id.split(",")
            body, a = sent[5]  # over 4 KiB: zlib-compressed with the COMPRESSED sysflag
            ids.append((await p.send(Message(topic, body, tags=a["tags"], keys=a["keys"], properties=a["props"]))).msg_id)
        return ids

    ids = asyncio.run(send())
    msgs = agent.wait_messages(lambda ms: len(ms) >= len(sent), 40, "the official consumer got everything")
    by_key = {m["keys"]: m for m in msgs}
    for (body, a), mid in zip(sent, ids, strict=True):
        m = by_key[a["keys"]]
        assert m["body_sha"] == digest(body) and m["body_len"] == len(body)
        assert m["tags"] == a["tags"] and m["topic"] == topic
        assert m["props"]["color"] == a["props"]["color"] and m["props"]["size"] == a["props"]["size"]
        assert m["uniq"] == mid
        if "body_b64" in m:
            assert base64.b64decode(m["body_b64"]) == body


def test_official_producer_to_our_consumer(shared_standalone: Standalone, agent: ClientAgent) -> None:
    ns = shared_standalone.namesrv_addr
    topic = uniq("CrossOfficial")
    asyncio.run(create_topic(ns, topic, 4))
    sent = specs(topic)
    agent.call("producer_start", group=uniq("OfficialPG"), namesrv=ns)

    def spec(body: bytes, a: dict[str, Any]) -> dict[str, Any]:
        return {"topic": topic, "body": {"b64": base64.b64encode(body).decode()}, "tags": a["tags"], "keys": a["keys"],
                "props": a["props"]}

    async def consume() -> list[MessageExt]:
        got: list[MessageExt] = []

        async def on(msgs: list[MessageExt]) -> None:
            got.extend(msgs)

        c = PushConsumer(uniq("OurCG"), ns, listener=on, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe(topic)
        await c.start()
        results = await asyncio.to_thread(send_acknowledged, agent, [spec(b, a) for b, a in sent])
        assert all(r["status"] == "OK" for r in results), results
        await wait_until(lambda: len(got) >= len(sent), 30, "our consumer got everything")
        await c.shutdown()
        ids = {r["msg_id"] for r in results}
        assert {m.msg_id for m in got} == ids
        return got

    got = asyncio.run(consume())
    by_key = {m.keys[0]: m for m in got}
    for body, a in sent:
        m = by_key[a["keys"]]
        assert m.body == body and m.tags == a["tags"] and m.topic == topic
        assert m.properties["color"] == a["props"]["color"] and m.properties["size"] == a["props"]["size"]
