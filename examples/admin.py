"""Admin: cluster, topics, groups, consumer progress and lag, and finding a message by key."""

import asyncio

from _common import NAMESRV, ensure_topic, main, unique

from tidalmq.client import Admin, Message, Producer


async def run() -> bool:
    topic, group = unique("ExampleAdmin"), unique("ExampleAdminGroup")
    await ensure_topic(topic, 2)
    async with Producer("ExampleProducerGroup", NAMESRV) as producer:
        sent = await producer.send(Message(topic, "find me", keys="invoice-7"))
    async with Admin(NAMESRV) as admin:
        print("brokers:", await admin.master_addrs())
        print("topic status:", [(s.queue_id, s.min_offset, s.max_offset) for s in await admin.topic_status(topic)])
        await admin.create_group(group, retry_max_times=5)
        await admin.reset_offset_by_time(group, topic, 0)
        print("lag of", group, "=", await admin.total_lag(group, topic))
        found = await admin.query_messages_by_key(topic, "invoice-7")
        for _ in range(100):  # the index entry follows the append by a moment (reput)
            if found:
                break
            await asyncio.sleep(0.05)
            found = await admin.query_messages_by_key(topic, "invoice-7")
        print("by key:", [m.body.decode() for m in found])
        by_id = await admin.view_message(sent.offset_msg_id)
        print("by id:", by_id.body.decode())
        await admin.delete_group(group)
        await admin.delete_topic(topic)
        return [m.body for m in found] == [b"find me"]


if __name__ == "__main__":
    main(run)
