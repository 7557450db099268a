"""A push consumer's ConsumerRunningInfo, as RocketMQ's Java client answers GET_CONSUMER_RUNNING_INFO:
the ``PROP_*`` properties mqadmin's consumerStatus reads (RocketMQ's tool fails on a consumer without
PROP_CONSUME_TYPE), the subscriptions, a ProcessQueueInfo per queue held, and a stack dump of every thread and task when the caller asks for one (``jstackEnable``)."""

from __future__ import annotations

import asyncio
import io
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from tidalmq.common import fastjson
from tidalmq.common.mqversion import version_desc
from tidalmq.remoting.command import CURRENT_VERSION

if TYPE_CHECKING:
    from collections.abc import Iterable

    from tidalmq.client.codec import Subscription
    from tidalmq.client.message import MessageQueue
    from tidalmq.client.process_queue import ProcessQueue
    from tidalmq.client.push_consumer import PushConsumer

# RocketMQ's ConsumerRunningInfo property names
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"


def _wall_ms(monotonic_ts: float) -> int:
    """A ProcessQueue's monotonic stamp as epoch milliseconds (RocketMQ's ProcessQueueInfo carries those)."""
    if monotonic_ts <= 0:
        return 0
    return int((time.time() - (time.monotonic() - monotonic_ts)) * 1000)


def process_queue_info(pq: ProcessQueue, commit_offset: int) -> dict[str, Any]:
    """RocketMQ's ProcessQueueInfo of one queue the consumer holds."""
    offsets = sorted(pq.msgs)
    return {
        "commitOffset": commit_offset,
        "cachedMsgMinOffset": offsets[0] if offsets else 0, "cachedMsgMaxOffset": offsets[-1] if offsets else 0,
        "cachedMsgCount": len(offsets), "cachedMsgSizeInMiB": pq.msg_size // (1024 * 1024),
        "transactionMsgMinOffset": 0, "transactionMsgMaxOffset": 0, "transactionMsgCount": 0,
        "locked": pq.locked, "tryUnlockTimes": 0, "lastLockTimestamp": _wall_ms(pq.last_lock_ts),
        "droped": pq.dropped, "lastPullTimestamp": _wall_ms(pq.last_pull_ts),
        "lastConsumeTimestamp": _wall_ms(pq.last_consume_ts),
    }


def stack_dump() -> str:
    """Every thread's stack and every asyncio task's, as text (RocketMQ's jstack answer)."""
    out: list[str] = []
    for ident, frame in sys._current_frames().items():
        out.append(f'"Thread-{ident}"\n' + "".join(traceback.format_stack(frame)))
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no running loop in this thread
        tasks = set()
    for task in tasks:
        text = io.StringIO()
        task.print_stack(file=text)
        out.append(text.getvalue())
    return "\n".join(out)


def push_running_info(c: PushConsumer, subscriptions: Iterable[Subscription], pqs: dict[MessageQueue, ProcessQueue],
                      started_ms: int, jstack: bool = False) -> dict[str, Any]:
    """The ConsumerRunningInfo of push consumer ``c``, started at ``started_ms``, holding the process
    queues ``pqs``."""
    inst = c.instance
    props: dict[str, str] = {
        "consumerGroup": c.group, "messageModel": c.message_model.value,
        "consumeFromWhere": c.consume_from_where.value, "consumeThreadMax": str(c.consume_thread_max),
        "pullBatchSize": str(c.pull_batch_size), "maxReconsumeTimes": str(c.max_reconsume_times),
        "namesrvAddr": ";".join(inst.namesrv_addrs), "clientIP": inst.client_ip,
        PROP_CONSUME_ORDERLY: str(c.orderly).lower(), PROP_THREADPOOL_CORE_SIZE: str(c.consume_thread_max),
        PROP_CONSUME_TYPE: "CONSUME_PASSIVELY", PROP_CLIENT_VERSION: version_desc(CURRENT_VERSION),
        PROP_CONSUMER_START_TIMESTAMP: str(started_ms), PROP_NAMESERVER_ADDR: ";".join(inst.namesrv_addrs),
    }
    info: dict[str, Any] = {
        "properties": props,
        "subscriptionSet": [s.to_json() for s in subscriptions],
        # keyed as fastjson writes a MessageQueue key (mqadmin's consumerProgress -s reads the holders here)
        "mqTable": {fastjson.object_key({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}):
                    process_queue_info(pq, c.offset_store.read_memory(mq)) for mq, pq in sorted(pqs.items())},
        "mqPopTable": {},
        "statusTable": {},  # the client keeps no per-topic RT and TPS (docs/mqadmin.md, consumerStatus)
        "userConsumerInfo": {},
    }
    if jstack:
        info["jstack"] = stack_dump()
    return info
