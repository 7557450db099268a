"""The data the console tests and scripts/console_screenshots.py show: messages with keys (one carrying an
XSS payload in its body and a property), a dead letter, scheduled messages."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from tidalmq.client import Admin, ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer, PushConsumer

XSS = '<script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'


@dataclass
class Seeded:
    topic: str
    group: str
    keyed_id: str = ""  # the client id (UNIQ_KEY) of the message with key "order-42"
    dead_id: str = ""  # the client id of the dead letter
    timer_id: str = ""  # the client id of a timer message due in an hour
    timer_ids: list[str] = field(default_factory=list)


async def seed(namesrv: str, topic: str = "Orders", group: str = "OrderWorkers", timeout: float = 30.0) -> Seeded:
    out = Seeded(topic, group)
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 4)
        # max retries 0: the first failure sends the message straight to %DLQ%<group> (no retry wait)
        await admin.create_group(group, retry_max_times=0)
        async with Producer(f"{group}-producer", namesrv) as p:
            for i in range(6):
                await p.send(Message(topic, f'{{"order": {40 + i}, "amount": {i * 7}.50}}', tags="created",
                                     keys=f"order-{40 + i}"))
            r = await p.send(Message(topic, XSS, tags="evil", keys="xss", properties={"note": XSS}))
            out.keyed_id = (await admin.query_messages_by_key(topic, "order-42"))[0].properties["UNIQ_KEY"]
            now = int(time.time() * 1000)
            for minutes in (0.5, 30, 60, 60 * 20):
                sent = await p.send(Message(topic, f"remind in {minutes} min", keys="reminder",
                                            deliver_time_ms=now + int(minutes * 60_000)))
                out.timer_ids.append(sent.msg_id)
            out.timer_id = out.timer_ids[2]
            poison = await p.send(Message(topic, "poison: cannot be processed", tags="poison", keys="poison"))
        del r
        seen: list[MessageExt] = []

        async def fail_poison(msgs: list[MessageExt]) -> ConsumeResult:
            seen.extend(msgs)
            return ConsumeResult.RECONSUME_LATER if any(m.tags == "poison" for m in msgs) else ConsumeResult.SUCCESS

        c = PushConsumer(group, namesrv, listener=fail_poison, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                         max_reconsume_times=0)
        c.subscribe(topic, "created || poison")
        await c.start()
        try:
            deadline = time.monotonic() + timeout
            while not any(m.properties.get("UNIQ_KEY") == poison.msg_id for m in await admin.dead_letters(group)):
                if time.monotonic() > deadline:
                    raise AssertionError(f"no dead letter in %DLQ%{group} after {timeout}s")
                await asyncio.sleep(0.1)
        finally:
            await c.shutdown()
        out.dead_id = poison.msg_id
    return out
