"""Asynchronous sends: many in flight at once, awaited together, or with a callback."""

import asyncio

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import Message, Producer, SendResult


async def run() -> bool:
    topic = unique("ExampleAsync")
    await ensure_topic(topic)
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        futures = [producer.send_async(Message(topic, f"async {i}")) for i in range(100)]
        results = await asyncio.gather(*futures)
        print(f"{sum(r.ok for r in results)} of {len(results)} async sends stored")
        done = asyncio.Event()

        def on_sent(result: SendResult | None, error: BaseException | None) -> None:
            print("callback:", result.msg_id if result else f"failed: {error}")
            done.set()

        producer.send_async(Message(topic, "with a callback"), on_sent)
        await done.wait()
    return all(r.ok for r in results)


if __name__ == "__main__":
    main(run)
