"""What the broker tells operators about scheduled messages: GET_TIMER_METRICS and the runtime-info keys.

Per real topic: messages pending (delay levels + timer) and a histogram of their deliver times (due / next
minute / hour / day / beyond). Timer counts come from the service's per-topic counters; delay-level counts are
read from SCHEDULE_TOPIC_XXXX's ConsumeQueues (the deliver time is the entry's tag, the real topic needs the
record's properties, so that scan is bounded by ``max_scan``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from tidalmq.broker.schedule.timer_process import TimerProcess
from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.common.naming import SCHEDULE_TOPIC
from tidalmq.common.record import RecordError, decode_record
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import Connection
from tidalmq.schedule.timer_view import HISTOGRAM_BUCKETS, histogram_of

if TYPE_CHECKING:
    from tidalmq.broker.schedule.services import ScheduleServices

log = logging.getLogger(__name__)

MAX_SCAN = 200_000
FRESH_VIEW_WAIT_S = 1.0


def delay_level_by_topic(services: ScheduleServices, now_ms: int, max_scan: int = MAX_SCAN) -> tuple[dict[str, Counter[int]], bool]:
    """Pending delay-level messages per real topic as {topic: Counter(deliver minute -> n)}; True if truncated."""
    store, svc = services.store, services.schedule
    out: dict[str, Counter[int]] = {}
    budget = max_scan
    for level in svc.walked:
        off = svc.offsets.get(level, 0)
        while off < store.queue_range(SCHEDULE_TOPIC, level - 1).max_offset:
            if budget <= 0:
                return out, True
            got = store.read_queue(SCHEDULE_TOPIC, level - 1, off, min(4096, budget))
            if len(got) == 0:
                if got.next_offset == got.start:
                    break
                off = got.next_offset
                continue
            for phys, size, tag in got.rows():
                view = store.select_one_message_by_offset(phys, size)
                if view is None:
                    continue
                try:
                    topic = decode_record(view, read_body=False).properties.get(mc.REAL_TOPIC, "")
                except RecordError:
                    continue
                c = out.get(topic)
                if c is None:
                    c = out[topic] = Counter()
                c[tag // 60_000] += 1
            off = got.next_offset
            budget -= len(got)
    return out, False


def schedule_report(services: ScheduleServices) -> dict[str, Any]:
    now = int(time.time() * 1000)
    delay, truncated = delay_level_by_topic(services, now)
    timer = services.timer
    if timer is not None:
        timer.fresh_view(FRESH_VIEW_WAIT_S)  # this report runs in an executor: it may wait a little
    timer_topics = timer.topic_minutes() if timer is not None else {}
    topics: dict[str, Any] = {}
    for name in sorted(set(delay) | set(timer_topics)):
        d = delay.get(name, Counter())
        t = timer_topics.get(name, Counter())
        hist = histogram_of(d + t, now)
        topics[name] = {"pending": sum(hist.values()), "delayLevel": sum(d.values()), "timer": sum(t.values()),
                        "histogram": hist}
    return {
        "now": now,
        "timer": timer.snapshot() if timer is not None else None,
        "delayLevel": {**services.schedule_stats.snapshot(),
                       "pending": {str(k): v for k, v in services.schedule.pending().items()}},
        "topics": topics,
        "delayLevelScanTruncated": truncated,
        "histogramBuckets": list(HISTOGRAM_BUCKETS),
    }


def get_timer_metrics(services: ScheduleServices, conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
    """GET_TIMER_METRICS (61): our JSON report (RocketMQ answers its TimerMetrics table here)."""
    loop = asyncio.get_running_loop()

    def build() -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(schedule_report(services)))

    return loop.run_in_executor(None, build)


def refresh_timer_view(services: ScheduleServices) -> Awaitable[object] | None:
    """With the schedule process (timerProcessEnable): ask it for a fresh view, off the event loop, at most
    FRESH_VIEW_WAIT_S; None in the broker's own process, whose counters are read directly."""
    timer = services.timer
    if not isinstance(timer, TimerProcess):
        return None
    return asyncio.get_running_loop().run_in_executor(None, timer.fresh_view, FRESH_VIEW_WAIT_S)


def runtime_info(services: ScheduleServices) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's schedule.* and timer.* keys."""
    info = {f"schedule.{key}": str(value) for key, value in services.schedule_stats.snapshot().items()}
    info["schedule.caughtUp"] = str(services.schedule.caught_up)
    for level, n in services.schedule.pending().items():
        info[f"schedule.pending.level{level}"] = str(n)
    try:
        info.update(timer_runtime_info(services))
    except Exception:
        log.exception("timer runtime info failed")
    return info


def timer_runtime_info(services: ScheduleServices) -> dict[str, str]:
    timer = services.timer
    if timer is None:
        return {"timer.enabled": "false"}
    info = {"timer.enabled": "true"}
    for k, v in timer.snapshot().items():
        if k == "histogram":
            for b, n in v.items():
                info[f"timer.histogram.{b}"] = str(n)
        elif k == "latenessHistogram":  # the metrics endpoint's; too long for a runtime-info line
            continue
        else:
            info[f"timer.{k}"] = str(v)
    for topic, c in sorted(timer.topic_minutes().items()):
        n = sum(c.values())
        info[f"timer.pending.topic.{topic}"] = str(n)
    return info
