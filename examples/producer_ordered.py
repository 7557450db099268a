"""Ordered sends: every message of one order id goes to the same queue, so it is consumed in order."""

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import Message, Producer


async def run() -> bool:
    topic = unique("ExampleOrdered")
    await ensure_topic(topic)
    queues: dict[str, set[int]] = {}
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        for step in ("created", "paid", "shipped", "delivered"):
            for order in ("order-1", "order-2", "order-3"):
                r = await producer.send_orderly(Message(topic, f"{order} {step}", keys=order), order)
                queues.setdefault(order, set()).add(r.message_queue.queue_id)
    for order, qs in queues.items():
        print(f"{order}: queue {sorted(qs)}")
    return all(len(qs) == 1 for qs in queues.values())


if __name__ == "__main__":
    main(run)
