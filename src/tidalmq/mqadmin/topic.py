"""Topic subcommands: updateTopic, deleteTopic, topicList, topicRoute, topicStatus (RocketMQ's
``tools/command/topic``), with RocketMQ's flags and output lines."""

from __future__ import annotations

import argparse
import json

from tidalmq.client.admin import Admin, AdminError
from tidalmq.common.naming import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from tidalmq.common.stats_keys import TOPIC_PUT_NUMS
from tidalmq.mqadmin.common import UsageError, command, front, when
from tidalmq.mqadmin.stats import rates
from tidalmq.remoting.codes import ResponseCode

# the NameServer KV namespace of ordered topics' queue layout, RocketMQ's NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


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
    # RocketMQ's unit flags set topicSysFlag bits TidalMQ has no use for: accepted, checked, not stored
    p.add_argument("-u", "--unit", default="false", help="is unit topic (true|false)")
    p.add_argument("-s", "--hasUnitSub", default="false", help="has unit sub (true|false)")
    p = command(sub, "deleteTopic", "Delete topic from broker and NameServer.", delete_topic)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-c", "--clusterName", required=True, help="delete topic from which cluster")
    p = command(sub, "topicList", "Fetch all topic list from name server", topic_list)
    p.add_argument("-c", "--clusterModel", action="store_true", help="clusterModel")
    p = command(sub, "topicRoute", "Examine topic route info", topic_route)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-l", "--list", action="store_true", help="Use list format to print data")
    p = command(sub, "topicStatus", "Examine topic Status info", topic_status)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-c", "--cluster", help="cluster name (accepted; the route names the topic's brokers)")
    p = command(sub, "topicClusterList", "Get cluster info for topic", topic_cluster_list)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p = command(sub, "updateOrderConf", "Create or update or delete order conf", update_order_conf)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-m", "--method", required=True, choices=("put", "get", "delete"), help="option type")
    p.add_argument("-v", "--orderConf", help="set order conf [eg. brokerName1:num;brokerName2:num]")
    p = command(sub, "updateTopicPerm", "Update topic perm", update_topic_perm)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="create topic to which broker")
    target.add_argument("-c", "--clusterName", help="create topic to which cluster")
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-p", "--perm", type=int, required=True, help="set topic's permission(2|4|6), intro[2:W; 4:R; 6:RW]")


async def update_topic(admin: Admin, args: argparse.Namespace) -> int:
    if args.order not in ("true", "false"):
        raise UsageError(f"-o must be true or false, not {args.order!r}")
    if args.perm not in (2, 4, 6):
        raise UsageError(f"-p must be 2, 4 or 6, not {args.perm}")
    for flag, value in (("-u", args.unit), ("-s", args.hasUnitSub)):
        if value not in ("true", "false"):
            raise UsageError(f"{flag} must be true or false, not {value!r}")
    if args.brokerAddr:
        addrs = [args.brokerAddr]
    else:
        addrs = sorted((await admin.master_addrs(args.clusterName)).values())
        if not addrs:
            raise AdminError(ResponseCode.BROKER_NOT_EXIST, f"no master broker in cluster {args.clusterName}")
    attributes = attribute_modification(args.attributes) if args.attributes else None
    await admin.create_topic(args.topic, args.readQueueNums, write_queue_nums=args.writeQueueNums, perm=args.perm,
                             order=args.order == "true", attributes=attributes, broker_addrs=addrs)
    for addr in addrs:
        print(f"create topic to {addr} success.")
    if args.order == "true" and args.clusterName:
        # as RocketMQ's tool: an ordered topic created on a cluster gets its orderConf on the NameServer
        names = sorted((await admin.master_addrs(args.clusterName)).keys())
        conf = ";".join(f"{n}:{args.writeQueueNums}" for n in names)
        await admin.put_kv_config(ORDER_TOPIC_CONFIG, args.topic, conf)
        print(f"set cluster orderConf. isOrder=true, orderConf=[{conf}]")
    print(f"TopicConfig [topicName={args.topic}, readQueueNums={args.readQueueNums}, "
          f"writeQueueNums={args.writeQueueNums}, perm={_perm_text(args.perm)}, topicFilterType=SINGLE_TAG, "
          f"topicSysFlag=0, order={args.order}, attributes={{{args.attributes or ''}}}]")
    return 0


def attribute_modification(text: str) -> str:
    """``-a``'s text as RocketMQ's modification text: RocketMQ's tools accept ``a=b`` for ``+a=b``."""
    return ",".join(a if a.startswith(("+", "-")) else "+" + a for a in text.split(","))


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
    route = await admin.route(args.topic)
    if not args.list:
        print(json.dumps(route, indent=1, sort_keys=True))
        return 0
    # RocketMQ's -l: a line per broker, then the totals
    cluster_of = {name: c for c, names in (await admin.cluster_info()).get("clusterAddrTable", {}).items()
                  for name in names}
    queues = {q.get("brokerName"): q for q in route.get("queueDatas") or []}
    print(_ROUTE.format("#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"))
    read = write = 0
    brokers = sorted(route.get("brokerDatas") or [], key=lambda b: str(b.get("brokerName")))
    for bd in brokers:
        name = str(bd.get("brokerName", ""))
        q = queues.get(name) or {}
        addrs = "{" + ", ".join(f"{k}={v}" for k, v in sorted((bd.get("brokerAddrs") or {}).items(),
                                                            key=lambda i: int(i[0]))) + "}"
        read += int(q.get("readQueueNums", 0))
        write += int(q.get("writeQueueNums", 0))
        print(_ROUTE.format(str(bd.get("cluster") or cluster_of.get(name, "")), name, addrs,
                            q.get("readQueueNums", 0), q.get("writeQueueNums", 0), q.get("perm", 0)))
    print("-" * 158)
    print(_ROUTE.format("Total:", len(brokers), "", read, write, ""))
    return 0


_ROUTE = "{:<45} {:<32} {:<50} {:<10} {:<11} {:<5}"


async def topic_status(admin: Admin, args: argparse.Namespace) -> int:
    print(f"{'#Broker Name':<32}  {'#QID':<4}  {'#Min Offset':<20}  {'#Max Offset':<20}    #Last Updated")
    for q, last in await admin.topic_stats(args.topic):  # GET_TOPIC_STATS_INFO, as RocketMQ's examineTopicStats
        updated = when(last) if last > 0 else ""
        print(f"{front(q.broker_name, 32):<32}  {q.queue_id:<4}  {q.min_offset:<20}  {q.max_offset:<20}    {updated}")
    route = await admin.route(args.topic)
    masters = sorted(a for bd in route.get("brokerDatas") or [] if (a := (bd.get("brokerAddrs") or {}).get("0")))
    tps, _ = await rates(admin, masters, TOPIC_PUT_NUMS, args.topic)
    print()
    print(f"Topic Put TPS: {tps}")  # Java's double text: 0.0, 1.5
    return 0


async def topic_cluster_list(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's topicClusterList: the clusters the topic's brokers belong to, one a line."""
    route = await admin.route(args.topic)
    names = {bd.get("brokerName") for bd in route.get("brokerDatas") or []}
    for cluster, brokers in sorted((await admin.cluster_info()).get("clusterAddrTable", {}).items()):
        if names & set(brokers):
            print(cluster)
    return 0


async def update_topic_perm(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's updateTopicPerm: the topic's existing config on each broker, its perm changed."""
    if args.perm not in (2, 4, 6):
        raise UsageError(f"-p must be 2, 4 or 6, not {args.perm}")
    route = await admin.route(args.topic)
    queues = {q.get("brokerName"): q for q in route.get("queueDatas") or []}
    if args.brokerAddr:
        targets = [(name, a) for bd in route.get("brokerDatas") or []
                   if (a := (bd.get("brokerAddrs") or {}).get("0")) == args.brokerAddr
                   for name in [str(bd.get("brokerName"))]]
        if not targets:
            raise AdminError(ResponseCode.TOPIC_NOT_EXIST, f"topic {args.topic} is not on broker {args.brokerAddr}")
    else:
        masters = await admin.master_addrs(args.clusterName)
        targets = sorted((n, a) for n, a in masters.items() if n in queues)
    configs = await admin.topic_config(args.topic)
    for name, addr in targets:
        q = queues.get(name) or {}
        old = int(q.get("perm", 6))
        if old == args.perm:
            print("new perm equals to the old one!")
            continue
        config = configs.get(name) or {}
        await admin.create_topic(args.topic, int(config.get("readQueueNums", q.get("readQueueNums", 8))),
                                 write_queue_nums=int(config.get("writeQueueNums", q.get("writeQueueNums", 8))),
                                 perm=args.perm, order=bool(config.get("order", False)),
                                 broker_addrs=[addr])
        print(f"update topic perm from {old} to {args.perm} in {addr} success.")
    return 0


async def update_order_conf(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's updateOrderConf: the ordered topic's queue layout in the NameServer's KV table."""
    if args.method == "get":
        conf = await admin.get_kv_config(ORDER_TOPIC_CONFIG, args.topic)
        shown = conf if conf is not None else "null"  # Java's text for a missing value
        print(f"get orderConf success. topic=[{args.topic}], orderConf=[{shown}] ", end="")
    elif args.method == "put":
        if not args.orderConf:
            raise UsageError("-m put needs -v, e.g. brokerName1:num;brokerName2:num")
        await admin.put_kv_config(ORDER_TOPIC_CONFIG, args.topic, args.orderConf)
        print(f"update orderConf success. topic=[{args.topic}], orderConf=[{args.orderConf}]", end="")
    else:
        await admin.delete_kv_config(ORDER_TOPIC_CONFIG, args.topic)
        print(f"delete orderConf success. topic=[{args.topic}]", end="")
    return 0
