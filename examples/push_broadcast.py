"""Broadcasting: every consumer of the group receives every message (offsets kept on the client)."""

import asyncio
import tempfile

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import ConsumeFromWhere, Message, MessageExt, MessageModel, Producer, PushConsumer

N = 10


async def run() -> bool:
    topic, group = unique("ExampleBroadcast"), unique("ExampleBroadcastGroup")
    await ensure_topic(topic)
    seen: dict[str, set[bytes]] = {"first": set(), "second": set()}
    consumers = []
    with tempfile.TemporaryDirectory() as offsets_dir:
        for name in seen:
            async def on_message(msgs: list[MessageExt], name: str = name) -> None:
                seen[name].update(m.body for m in msgs)

            c = PushConsumer(group, NAMESRV, listener=on_message, message_model=MessageModel.BROADCASTING,
                             consume_from_where=ConsumeFromWhere.FIRST_OFFSET, offset_store_dir=offsets_dir)
            c.subscribe(topic)
            await c.start()
            consumers.append(c)
        async with Producer("ExampleProducerGroup", NAMESRV) as producer:
            for i in range(N):
                await producer.send(Message(topic, f"to everyone {i}"))
        while any(len(s) < N for s in seen.values()):
            await asyncio.sleep(0.05)
        for c in consumers:
            await c.shutdown()
    print({name: len(s) for name, s in seen.items()})
    return True


if __name__ == "__main__":
    main(run)
