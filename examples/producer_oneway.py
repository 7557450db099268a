"""Oneway sends: no answer is awaited (logs, metrics). A pull afterwards shows they arrived."""

import asyncio

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import Message, Producer, PullConsumer


async def run() -> bool:
    topic = unique("ExampleOneway")
    await ensure_topic(topic, 1)
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        for i in range(20):
            await producer.send_oneway(Message(topic, f"oneway {i}"))
    async with PullConsumer("ExampleOnewayCheck", NAMESRV) as consumer:
        (queue,) = await consumer.fetch_queues(topic)
        while await consumer.max_offset(queue) < 20:  # oneway: nobody told us when they were stored
            await asyncio.sleep(0.05)
    print("20 oneway messages stored")
    return True


if __name__ == "__main__":
    main(run)
