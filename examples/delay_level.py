"""RocketMQ 4 delay levels: level 2 is 5 s with the default messageDelayLevel. Exits 3 if the broker
delivered the message right away (a broker without the scheduler)."""

import asyncio
import time

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer

LEVEL, SECONDS = 2, 5.0


async def run() -> bool:
    topic = unique("ExampleDelay")
    await ensure_topic(topic, 1)
    arrived = asyncio.Event()

    async def on_message(msgs: list[MessageExt]) -> None:
        arrived.set()

    consumer = PushConsumer(unique("ExampleDelayGroup"), NAMESRV, listener=on_message,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    await consumer.start()
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        t0 = time.monotonic()
        await producer.send(Message(topic, "see you in 5 seconds", delay_level=LEVEL))
    await arrived.wait()
    elapsed = time.monotonic() - t0
    await consumer.shutdown()
    print(f"delivered after {elapsed:.2f}s (delay level {LEVEL} = {SECONDS}s)")
    if elapsed < SECONDS * 0.8:
        raise SystemExit(3)
    return True


if __name__ == "__main__":
    main(run)
