"""TidalMQ's own subcommands, RocketMQ-style: scheduled-message stats, cancel and reschedule, dead-letter re-send."""

from __future__ import annotations

import argparse

from tidalmq.client.admin import Admin
from tidalmq.mqadmin.common import Progress, UsageError, command


def register(sub: argparse._SubParsersAction) -> None:
    command(sub, "scheduleStats", "Scheduled messages: pending per topic, rates, lateness (TidalMQ)", schedule_stats)
    p = command(sub, "cancelScheduledMessage", "Cancel a timer message before it is due (TidalMQ)", cancel_scheduled)
    p.add_argument("-t", "--topic", required=True, help="the message's topic")
    p.add_argument("-i", "--msgId", required=True, help="its client id (UNIQ_KEY)")
    p.add_argument("-d", "--deliverTimeMs", type=int, help="its deliver time (optional)")
    p = command(sub, "rescheduleMsg", "Deliver a pending scheduled message at another time (TidalMQ)", reschedule)
    p.add_argument("-t", "--topic", required=True, help="the message's topic")
    p.add_argument("-i", "--msgId", help="its client id (UNIQ_KEY)")
    p.add_argument("-k", "--msgKey", help="or one of its keys (naming one pending message)")
    p.add_argument("-d", "--deliverTimeMs", type=int, help="the new deliver time, epoch ms (at or before now: at once)")
    p.add_argument("-s", "--delaySeconds", type=float, help="or the new delay from now, seconds (0: at once)")
    p = command(sub, "resendDlqMessage", "Send dead letters of a group back to their topic (TidalMQ)", resend_dlq)
    p.add_argument("-g", "--consumerGroup", required=True, help="consumer group")
    p.add_argument("-i", "--msgId", action="append", default=[], help="message id, repeatable")
    p.add_argument("-a", "--all", action="store_true", help="every dead letter of the group")


async def schedule_stats(admin: Admin, args: argparse.Namespace) -> int:
    """Each broker's scheduled messages: the timer's and the delay levels' counts, rates and lateness, and
    a line per real topic with its pending messages by deliver time (due, next minute, hour, day, beyond)."""
    for name, rep in (await admin.schedule_stats()).items():
        t = rep.get("timer") or {}
        d = rep.get("delayLevel") or {}
        print(f"broker {name}")
        print(f"  timer: pending {t.get('pending', 0)}, enqueued {t.get('enqueued', 0)} ({t.get('enqueueTps', 0)}/s), "
              f"delivered {t.get('delivered', 0)} ({t.get('deliverTps', 0)}/s), early {t.get('early', 0)}, "
              f"lateness p50/p99/max {t.get('latenessP50Ms', 0)}/{t.get('latenessP99Ms', 0)}/{t.get('latenessMaxMs', 0)} ms, "
              f"behind now {t.get('latenessNowMs', 0)} ms, precision {t.get('precisionMs', '-')} ms")
        print(f"  timer: duplicates skipped {t.get('duplicatesSkipped', 0)}, redelivered {t.get('redelivered', 0)}, "
              f"cancels {t.get('cancels', 0)} (too late {t.get('cancelsTooLate', 0)}), "
              f"reschedules {t.get('reschedules', 0)} (too late {t.get('reschedulesTooLate', 0)})")
        print(f"  delay levels: delivered {d.get('delivered', 0)}, lateness p50/p99/max "
              f"{d.get('latenessP50Ms', 0)}/{d.get('latenessP99Ms', 0)}/{d.get('latenessMaxMs', 0)} ms, "
              f"pending by level {d.get('pending', {})}")
        buckets = rep.get("histogramBuckets", ["due", "minute", "hour", "day", "beyond"])
        topics = rep.get("topics", {})
        if topics:
            print(f"{'#Topic':<48}  {'#Pending':<10}  {'#DelayLevel':<12}  {'#Timer':<10}  "
                  + "  ".join(f"#{b.capitalize():<10}" for b in buckets))
            for topic, v in topics.items():
                print(f"{topic:<48}  {v['pending']:<10}  {v['delayLevel']:<12}  {v['timer']:<10}  "
                      + "  ".join(f"{v['histogram'][b]:<11}" for b in buckets))
        if rep.get("delayLevelScanTruncated"):
            print("  (delay-level counts truncated: too many pending to scan)")
    return 0


async def cancel_scheduled(admin: Admin, args: argparse.Namespace) -> int:
    name = await admin.cancel_scheduled(args.topic, args.msgId, args.deliverTimeMs)
    print(f"cancel {args.topic} {args.msgId} on {name}: success")
    return 0


async def reschedule(admin: Admin, args: argparse.Namespace) -> int:
    if bool(args.msgId) == bool(args.msgKey):
        raise UsageError("name the message by its id (-i) or a key (-k), one of them")
    if (args.deliverTimeMs is None) == (args.delaySeconds is None):
        raise UsageError("give the new time (-d) or the delay from now (-s), one of them")
    if (args.deliverTimeMs or 0) < 0 or (args.delaySeconds or 0) < 0:
        raise UsageError("the time and the delay must not be negative")
    delay = None if args.delaySeconds is None else int(args.delaySeconds * 1000)
    r = await admin.reschedule(args.topic, args.msgId, key=args.msgKey, deliver_time_ms=args.deliverTimeMs,
                               delay_ms=delay)
    print(f"reschedule {args.topic} {r.msg_id} on {r.broker_name}: {r.previous_deliver_time_ms} -> {r.deliver_time_ms}")
    return 0


async def resend_dlq(admin: Admin, args: argparse.Namespace) -> int:
    if bool(args.msgId) == args.all:
        raise UsageError("name the ids to re-send (-i) or -a, not both")
    progress = Progress("dead letters re-sent")
    try:
        sent = await admin.resend_dead_letters(args.consumerGroup, args.msgId or None, progress=progress.step)
    finally:
        progress.close()
    print(f"{'#Old MsgId':<40} #New MsgId")
    for old, new in sent:
        print(f"{old:<40} {new}")
    return 0
