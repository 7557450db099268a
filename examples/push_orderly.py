"""Push consumer, orderly listener: one queue at a time, in offset order — per-key order end to end."""

import asyncio

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer, PushConsumer

STEPS = ["created", "paid", "shipped", "delivered"]
ORDERS = ["order-1", "order-2", "order-3"]


async def run() -> bool:
    topic = unique("ExampleOrderly")
    await ensure_topic(topic)
    seen: dict[str, list[str]] = {o: [] for o in ORDERS}
    done = asyncio.Event()

    def on_message(msgs: list[MessageExt]) -> ConsumeResult:  # a plain function runs in a thread pool
        for m in msgs:
            order, step = m.body.decode().split()
            seen[order].append(step)
        if all(len(s) == len(STEPS) for s in seen.values()):
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(unique("ExampleOrderlyGroup"), NAMESRV, listener=on_message, orderly=True,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    await consumer.start()
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        for step in STEPS:
            for order in ORDERS:
                await producer.send_orderly(Message(topic, f"{order} {step}"), order)
    await done.wait()
    await consumer.shutdown()
    for order, steps in seen.items():
        print(order, "->", " ".join(steps))
    return all(steps == STEPS for steps in seen.values())


if __name__ == "__main__":
    main(run)
