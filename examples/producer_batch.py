"""Batch send: many messages of one topic in one request."""

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import Message, Producer


async def run() -> bool:
    topic = unique("ExampleBatch")
    await ensure_topic(topic)
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        batch = [Message(topic, f"batch item {i}", keys=f"item-{i}") for i in range(64)]
        result = await producer.send_batch(batch)
        ids = result.msg_id.split(",")
        print(f"{result.status.value}: {len(ids)} messages in queue {result.message_queue.queue_id} "
              f"from offset {result.queue_offset}")
        return result.ok and len(ids) == 64


if __name__ == "__main__":
    main(run)
