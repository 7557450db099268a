"""Pull consumer with explicit offsets: list queues, read a range, seek by time, commit."""

import asyncio

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import Message, Producer, PullConsumer
from tidalmq.client.message import now_ms


async def run() -> bool:
    topic = unique("ExamplePull")
    await ensure_topic(topic, 2)
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        for i in range(10):
            await producer.send(Message(topic, f"first half {i}"))
        await asyncio.sleep(0.05)
        middle = now_ms()
        await asyncio.sleep(0.05)
        for i in range(10):
            await producer.send(Message(topic, f"second half {i}"))
    total = 0
    async with PullConsumer(unique("ExamplePullGroup"), NAMESRV) as consumer:
        queues = await consumer.fetch_queues(topic)
        # A send is acknowledged once stored; its ConsumeQueue entry follows a moment later (reput).
        while sum([await consumer.max_offset(q) for q in queues]) < 20:
            await asyncio.sleep(0.01)
        for queue in queues:
            lo, hi = await consumer.min_offset(queue), await consumer.max_offset(queue)
            start = await consumer.seek_by_timestamp(queue, middle)
            msgs = await consumer.pull_range(queue, start, hi)
            print(f"queue {queue.queue_id}: offsets {lo}..{hi}, from {middle} on: {[m.body.decode() for m in msgs]}")
            total += len(msgs)
            await consumer.commit(queue, hi)
            assert await consumer.committed(queue) == hi
    return total == 10


if __name__ == "__main__":
    main(run)
