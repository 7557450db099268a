"""TidalMQ's own subcommands, RocketMQ-style: scheduled-message stats and cancel, dead-letter re-send.
They share ``tidalmq admin``'s client calls and printing (admin_cli)."""

from __future__ import annotations

import argparse

from tidalmq.admin_cli import _run_schedule
from tidalmq.client.admin import Admin
from tidalmq.mqadmin.common import Progress, UsageError, command


def register(sub: argparse._SubParsersAction) -> None:
    command(sub, "scheduleStats", "Scheduled messages: pending per topic, rates, lateness (TidalMQ)", schedule_stats)
    p = command(sub, "cancelScheduledMessage", "Cancel a timer message before it is due (TidalMQ)", cancel_scheduled)
    p.add_argument("-t", "--topic", required=True, help="the message's topic")
    p.add_argument("-i", "--msgId", required=True, help="its client id (UNIQ_KEY)")
    p.add_argument("-d", "--deliverTimeMs", type=int, help="its deliver time (optional)")
    p = command(sub, "resendDlqMessage", "Send dead letters of a group back to their topic (TidalMQ)", resend_dlq)
    p.add_argument("-g", "--consumerGroup", required=True, help="consumer group")
    p.add_argument("-i", "--msgId", action="append", default=[], help="message id, repeatable")
    p.add_argument("-a", "--all", action="store_true", help="every dead letter of the group")


async def schedule_stats(admin: Admin, args: argparse.Namespace) -> int:
    return await _run_schedule(admin, argparse.Namespace(schedule_cmd="stats"))


async def cancel_scheduled(admin: Admin, args: argparse.Namespace) -> int:
    return await _run_schedule(admin, argparse.Namespace(schedule_cmd="cancel", topic=args.topic,
                                                         uniq_key=args.msgId, deliver_ms=args.deliverTimeMs))


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
