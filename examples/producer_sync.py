"""Synchronous send: wait for the broker's answer (status, message id, queue, offset)."""

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import Message, Producer


async def run() -> bool:
    topic = unique("ExampleSync")
    await ensure_topic(topic)
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        for i in range(10):
            msg = Message(topic, f"Hello TidalMQ {i}", tags="TagA", keys=f"key-{i}", properties={"source": "example"})
            result = await producer.send(msg)
            print(f"{result.status.value} msgId={result.msg_id} queue={result.message_queue.queue_id} "
                  f"offset={result.queue_offset}")
            if not result.ok:
                return False
    return True


if __name__ == "__main__":
    main(run)
