"""``statsAll`` (RocketMQ's ``tools/command/stats/StatsAllSubCommand``): per topic and consuming group, the
accumulation, the minute's in and out TPS and the messages in and out over the last 24 hours, from each
master's VIEW_BROKER_STATS_DATA (TOPIC_PUT_NUMS of the topic, GROUP_GET_NUMS of ``topic@group``).
``brokerConsumeStats`` (``tools/command/broker/BrokerConsumeStatsSubCommad``): one broker's
GET_BROKE_CONSUME_STATS, a line per consumed queue of every group."""

from __future__ import annotations

import argparse

from tidalmq.client.admin import Admin, AdminError
from tidalmq.common import fastjson
from tidalmq.common.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from tidalmq.common.stats_keys import GROUP_GET_NUMS, TOPIC_PUT_NUMS, stats_key
from tidalmq.mqadmin.common import command, day_time, front
from tidalmq.remoting.transport import RemotingError


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "statsAll", "Topic and Consumer tps stats", stats_all)
    p.add_argument("-a", "--activeTopic", action="store_true", help="print active topic only")
    p.add_argument("-t", "--topic", help="print select topic only")
    p = command(sub, "brokerConsumeStats", "Fetch broker consume stats data", broker_consume_stats)
    p.add_argument("-b", "--brokerAddr", required=True, help="Broker address")
    p.add_argument("-t", "--timeoutMillis", type=int, default=50_000, help="request timeout Millis")
    p.add_argument("-l", "--level", type=int, default=0, help="threshold of print diff")
    p.add_argument("-o", "--order", default="false", help="order topic")


def compute_24hour_sum(data: dict) -> int:
    """RocketMQ's compute24HourSum: the day window's sum, else the hour's, else the minute's."""
    for window in ("statsDay", "statsHour", "statsMinute"):
        total = int((data.get(window) or {}).get("sum") or 0)
        if total != 0:
            return total
    return 0


async def rates(admin: Admin, masters: list[str], name: str, key: str) -> tuple[float, int]:
    """(the minute's TPS, the 24-hour sum) of one stats key over the masters; a broker that never counted
    the key adds nothing (RocketMQ's tool skips its error)."""
    tps, total = 0.0, 0
    for addr in masters:
        try:
            data = await admin.broker_stats_data(addr, name, key)
        except (AdminError, RemotingError):
            continue
        tps += float((data.get("statsMinute") or {}).get("tps") or 0)
        total += compute_24hour_sum(data)
    return tps, total


async def print_topic_detail(admin: Admin, topic: str, active_only: bool) -> None:
    route = await admin.route(topic)
    masters = [a for bd in route.get("brokerDatas", []) if (a := (bd.get("brokerAddrs") or {}).get("0"))]
    groups = await admin.groups_consuming(topic)
    in_tps, in_today = await rates(admin, masters, TOPIC_PUT_NUMS, topic)
    if not groups:
        if not active_only or in_today > 0:
            print(f"{front(topic, 64):<64}  {'':<64} {0:>12} {in_tps:>11.2f} {'':>11} {in_today:>14} {'NO_CONSUMER':>14}")
        return
    for group in groups:
        out_tps, out_today = await rates(admin, masters, GROUP_GET_NUMS, stats_key(topic, group))
        try:
            accumulate = max(0, (await admin.consume_stats(group, topic)).total_diff())
        except (AdminError, RemotingError):
            accumulate = 0
        if not active_only or in_today > 0 or out_today > 0:
            print(f"{front(topic, 64):<64}  {front(group, 64):<64} {accumulate:>12} {in_tps:>11.2f} {out_tps:>11.2f} "
                  f"{in_today:>14} {out_today:>14}")


async def stats_all(admin: Admin, args: argparse.Namespace) -> int:
    print(f"{'#Topic':<64}  {'#Consumer Group':<64} {'#Accumulation':>12} {'#InTPS':>11} {'#OutTPS':>11} "
          f"{'#InMsg24Hour':>14} {'#OutMsg24Hour':>14}")
    for topic in await admin.topic_list():
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            continue
        if args.topic and topic != args.topic:
            continue
        try:  # as RocketMQ's: a topic that cannot be examined is left out, the others still printed
            await print_topic_detail(admin, topic, args.activeTopic)
        except (AdminError, RemotingError):
            continue
    return 0


async def broker_consume_stats(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's brokerConsumeStats: every queue with a diff of at least ``-l`` whose group has consumed
    something there (a last consumed time), then the broker's total diff."""
    admin.timeout = args.timeoutMillis / 1000
    data = await admin.broker_consume_stats(args.brokerAddr.strip(), args.order.strip().lower() == "true")
    print(f"{'#Topic':<64}  {'#Group':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  "
          f"{'#Consumer Offset':<20}  {'#Diff':<20}  #LastTime")
    for per_group in data.get("consumeStatsList") or []:
        for group, stats_list in per_group.items():
            for stats in stats_list:
                for (topic, broker, qid), w in sorted(_queues(stats), key=lambda q: q[0]):
                    diff = int(w.get("brokerOffset", 0)) - int(w.get("consumerOffset", 0))
                    last = int(w.get("lastTimestamp", 0))
                    if diff < args.level or last <= 0:
                        continue
                    print(f"{front(topic, 64):<64}  {group:<64}  {front(broker, 32):<32}  {qid:<4}  "
                          f"{int(w.get('brokerOffset', 0)):<20}  {int(w.get('consumerOffset', 0)):<20}  {diff:<20}  "
                          f"{day_time(last)}")
    print()
    print(f"Diff Total: {int(data.get('totalDiff') or 0)}")
    return 0


def _queues(stats: dict) -> list[tuple[tuple[str, str, int], dict]]:
    out = []
    for key, w in (stats.get("offsetTable") or {}).items():
        mq = fastjson.loads(key)
        out.append(((mq["topic"], mq["brokerName"], int(mq["queueId"])), w))
    return out
