"""Push consumer, concurrent listener: messages of all queues consumed in parallel."""

import asyncio

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer, PushConsumer

N = 50


async def run() -> bool:
    topic = unique("ExamplePush")
    await ensure_topic(topic)
    received: set[bytes] = set()
    done = asyncio.Event()

    async def on_message(msgs: list[MessageExt]) -> ConsumeResult:
        for m in msgs:
            received.add(m.body)
        if len(received) >= N:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(unique("ExamplePushGroup"), NAMESRV, listener=on_message,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic, "TagA || TagB")
    await consumer.start()
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        for i in range(N):
            await producer.send(Message(topic, f"push {i}", tags="TagA" if i % 2 else "TagB"))
    await done.wait()
    await consumer.shutdown()  # commits the consumed offsets
    print(f"consumed {len(received)} messages")
    return len(received) == N


if __name__ == "__main__":
    main(run)
