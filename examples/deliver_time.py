"""RocketMQ 5 delivery time: an absolute time (TIMER_DELIVER_MS) or a relative delay (TIMER_DELAY_MS).
Exits 3 if the broker delivered the messages right away (a broker without the timer)."""

import asyncio
import time

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer
from tidalmq.client.message import now_ms


async def run() -> bool:
    topic = unique("ExampleTimer")
    await ensure_topic(topic, 1)
    arrivals: list[float] = []
    both = asyncio.Event()

    async def on_message(msgs: list[MessageExt]) -> None:
        arrivals.extend(time.monotonic() for _ in msgs)
        if len(arrivals) >= 2:
            both.set()

    consumer = PushConsumer(unique("ExampleTimerGroup"), NAMESRV, listener=on_message,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    await consumer.start()
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        t0 = time.monotonic()
        await producer.send(Message(topic, "at a time", deliver_time_ms=now_ms() + 3000))
        await producer.send(Message(topic, "after a delay", delay_ms=2000))
    await both.wait()
    await consumer.shutdown()
    first = min(arrivals) - t0
    print(f"delivered after {[round(a - t0, 2) for a in arrivals]} s")
    if first < 1.6:
        raise SystemExit(3)
    return True


if __name__ == "__main__":
    main(run)
