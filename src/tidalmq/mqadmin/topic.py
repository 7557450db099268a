"""Topic subcommands: updateTopic, deleteTopic, topicList, topicRoute, topicStatus (RocketMQ's
``tools/command/topic``), with RocketMQ's flags and output lines."""

from __future__ import annotations

import argparse
import json

from tidalmq.client.admin import Admin, AdminError
from tidalmq.common.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from tidalmq.mqadmin.common import UsageError, command, front, when
from tidalmq.remoting.codes import ResponseCode


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "updateTopic", "Update or create topic", update_topic)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="create topic to which broker")
    target.add_argument("-c", "--clusterName", help="create topic to which cluster")
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-r", "--readQueueNums", type=int, default=8, help="set read queue nums")
    p.add_argument("-w", "--writeQueueNums", type=int, default=8, help="set write queue nums")
    p.add_argument("-p", "--perm", type=int, default=6, help="set topic's permission(2|4|6), intro[2:W 4:R; 6:RW]")
    p.add_argument("-o", "--order", default="false", help="set topic's order(true|false)")
    p.add_argument("-a", "--attributes", help="attribute(+a=b,+c=d,-e)")
    p = command(sub, "deleteTopic", "Delete topic from broker and NameServer.", delete_topic)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-c", "--clusterName", required=True, help="delete topic from which cluster")
    p = command(sub, "topicList", "Fetch all topic list from name server", topic_list)
    p.add_argument("-c", "--clusterModel", action="store_true", help="clusterModel")
    p = command(sub, "topicRoute", "Examine topic route info", topic_route)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p = command(sub, "topicStatus", "Examine topic Status info", topic_status)
    p.add_argument("-t", "--topic", required=True, help="topic name")


async def update_topic(admin: Admin, args: argparse.Namespace) -> int:
    if args.order not in ("true", "false"):
        raise UsageError(f"-o must be true or false, not {args.order!r}")
    if args.perm not in (2, 4, 6):
        raise UsageError(f"-p must be 2, 4 or 6, not {args.perm}")
    if args.brokerAddr:
        addrs = [args.brokerAddr]
    else:
        addrs = sorted((await admin.master_addrs(args.clusterName)).values())
        if not addrs:
            raise AdminError(ResponseCode.BROKER_NOT_EXIST, f"no master broker in cluster {args.clusterName}")
    attributes = args.attributes
    if attributes:  # RocketMQ's tools accept "a=b" for "+a=b" too
        attributes = ",".join(a if a.startswith(("+", "-")) else "+" + a for a in attributes.split(","))
    await admin.create_topic(args.topic, args.readQueueNums, write_queue_nums=args.writeQueueNums, perm=args.perm,
                             order=args.order == "true", attributes=attributes, broker_addrs=addrs)
    for addr in addrs:
        print(f"create topic to {addr} success.")
    print(f"TopicConfig [topicName={args.topic}, readQueueNums={args.readQueueNums}, "
          f"writeQueueNums={args.writeQueueNums}, perm={_perm_text(args.perm)}, topicFilterType=SINGLE_TAG, "
          f"topicSysFlag=0, order={args.order}, attributes={{{args.attributes or ''}}}]")
    return 0


def _perm_text(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "-")


async def delete_topic(admin: Admin, args: argparse.Namespace) -> int:
    await admin.delete_topic(args.topic, args.clusterName)
    print(f"delete topic [{args.topic}] from cluster [{args.clusterName}] success.")
    print(f"delete topic [{args.topic}] from NameServer success.")
    return 0


async def topic_list(admin: Admin, args: argparse.Namespace) -> int:
    if not args.clusterModel:
        for t in await admin.topic_list():
            print(t)
        return 0
    # -c: a line per (topic, consuming group), retry and dead-letter topics left out, as RocketMQ's
    cluster_of = {name: c for c, names in (await admin.cluster_info()).get("clusterAddrTable", {}).items()
                  for name in names}
    print(f"{'#Cluster Name':<20}  {'#Topic':<48}  {'#Consumer Group':<48}")
    for t in await admin.topic_list():
        if t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            continue
        try:  # as RocketMQ's: a topic whose route or groups cannot be read still gets its line
            brokers = (await admin.route(t)).get("brokerDatas") or [{}]
            cluster = cluster_of.get(brokers[0].get("brokerName", ""), "")
            groups = await admin.groups_consuming(t)
        except AdminError:
            cluster, groups = "", []
        for g in groups or [""]:
            print(f"{cluster:<20}  {t:<48}  {g:<48}")
    return 0


async def topic_route(admin: Admin, args: argparse.Namespace) -> int:
    print(json.dumps(await admin.route(args.topic), indent=1, sort_keys=True))
    return 0


async def topic_status(admin: Admin, args: argparse.Namespace) -> int:
    print(f"{'#Broker Name':<32}  {'#QID':<4}  {'#Min Offset':<20}  {'#Max Offset':<20}    #Last Updated")
    for q, last in await admin.topic_stats(args.topic):  # GET_TOPIC_STATS_INFO, as RocketMQ's examineTopicStats
        updated = when(last) if last > 0 else ""
        print(f"{front(q.broker_name, 32):<32}  {q.queue_id:<4}  {q.min_offset:<20}  {q.max_offset:<20}    {updated}")
    return 0
