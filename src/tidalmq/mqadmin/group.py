"""Group subcommands: updateSubGroup, deleteSubGroup, consumerProgress, consumerConnection, producerConnection,
resetOffsetByTime (RocketMQ's ``tools/command/consumer`` and ``offset``)."""

from __future__ import annotations

import argparse

from tidalmq.client.admin import Admin, AdminError
from tidalmq.common import fastjson
from tidalmq.common.mqversion import version_desc
from tidalmq.common.naming import RETRY_GROUP_TOPIC_PREFIX
from tidalmq.mqadmin.common import Progress, UsageError, command, day_time, front, parse_timestamp, when
from tidalmq.remoting.codes import ResponseCode


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return text == "true"


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "updateSubGroup", "Update or create subscription group", update_sub_group)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="create subscription group to which broker")
    target.add_argument("-c", "--clusterName", help="create subscription group to which cluster")
    p.add_argument("-g", "--groupName", required=True, help="consumer group name")
    p.add_argument("-s", "--consumeEnable", type=_bool, default=True, help="consume enable")
    p.add_argument("-m", "--consumeFromMinEnable", type=_bool, default=True, help="from min offset")
    p.add_argument("-d", "--consumeBroadcastEnable", type=_bool, default=True, help="broadcast")
    p.add_argument("-q", "--retryQueueNums", type=int, default=1, help="retry queue nums")
    p.add_argument("-r", "--retryMaxTimes", type=int, default=16, help="retry max times")
    p.add_argument("--attributes", help="attribute(+a=b,+c=d,-e): priority.factor (docs/message-types.md)")
    p = command(sub, "deleteSubGroup", "Delete subscription group from broker.", delete_sub_group)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="delete subscription group from which broker")
    target.add_argument("-c", "--clusterName", help="delete subscription group from which cluster")
    p.add_argument("-g", "--groupName", required=True, help="subscription group name")
    p = command(sub, "consumerProgress", "Query consumers's progress, speed", consumer_progress)
    p.add_argument("-g", "--groupName", help="consumer group name (without it: every group, one line each)")
    p.add_argument("-t", "--topicName", help="topic name (with -g)")
    p.add_argument("-s", "--showClientIP", default="false", help="Show Client IP per Queue (true|false)")
    p = command(sub, "consumerConnection", "Query consumer's socket connection, client version and subscription",
                consumer_connection)
    p.add_argument("-g", "--consumerGroup", required=True, help="consumer group name")
    p = command(sub, "producerConnection", "Query producer's socket connection and client version", producer_connection)
    p.add_argument("-g", "--producerGroup", required=True, help="producer group name")
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p = command(sub, "resetOffsetByTime", "Reset consumer offset by timestamp(without client restart).",
                reset_offset_by_time)
    p.add_argument("-g", "--group", required=True, help="set the consumer group")
    p.add_argument("-t", "--topic", required=True, help="set the topic")
    p.add_argument("-s", "--timestamp", required=True,
                   help="set the timestamp[now|currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]")
    p.add_argument("-f", "--force", type=_bool, default=True, help="set the force rollback by timestamp switch")


async def _targets(admin: Admin, broker: str | None, cluster: str | None) -> list[str]:
    if broker:
        return [broker]
    addrs = sorted((await admin.master_addrs(cluster)).values())
    if not addrs:
        raise AdminError(ResponseCode.BROKER_NOT_EXIST, f"no master broker in cluster {cluster}")
    return addrs


async def update_sub_group(admin: Admin, args: argparse.Namespace) -> int:
    addrs = await _targets(admin, args.brokerAddr, args.clusterName)
    await admin.create_group(args.groupName, retry_max_times=args.retryMaxTimes, retry_queue_nums=args.retryQueueNums,
                             consume_broadcast_enable=args.consumeBroadcastEnable, consume_enable=args.consumeEnable,
                             consume_from_min_enable=args.consumeFromMinEnable, broker_addrs=addrs,
                             attributes=args.attributes)
    for addr in addrs:
        print(f"create subscription group to {addr} success.")
    return 0


async def delete_sub_group(admin: Admin, args: argparse.Namespace) -> int:
    addrs = await _targets(admin, args.brokerAddr, args.clusterName)
    await admin.delete_group(args.groupName, broker_addrs=addrs)
    for addr in addrs:
        where = f" in cluster [{args.clusterName}]" if args.clusterName else ""
        print(f"delete subscription group [{args.groupName}] from broker [{addr}]{where} success.")
    return 0


async def consumer_progress(admin: Admin, args: argparse.Namespace) -> int:
    if args.groupName is None:
        if args.topicName is not None:
            raise UsageError("-t needs -g")
        return await _all_groups_progress(admin)
    stats = await admin.consume_stats(args.groupName, args.topicName)  # GET_CONSUME_STATS, examineConsumeStats
    if not stats.queues:
        raise AdminError(ResponseCode.CONSUMER_NOT_ONLINE, "Not found the consumer group consume stats, because return "
                         "offset table is empty, maybe the consumer not consume any message")
    # #Client IP: the client holding each queue, with -s true (RocketMQ asks each consumer for its queues)
    holders = await _queue_holders(admin, args.groupName) if args.showClientIP.lower() == "true" else {}
    print(f"{'#Topic':<32}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  {'#Consumer Offset':<20}  "
          f"{'#Client IP':<20} {'#Diff':<20}  #LastTime")
    for q in stats.queues:
        last = "N/A" if q.last_timestamp == 0 else day_time(q.last_timestamp)
        ip = holders.get((q.topic, q.broker_name, q.queue_id), "N/A")
        print(f"{front(q.topic, 32):<32}  {front(q.broker_name, 32):<32}  {q.queue_id:<4}  {q.broker_offset:<20}  "
              f"{q.consumer_offset:<20}  {ip:<20} {q.diff:<20}  {last}")
    print()
    print(f"Consume TPS: {stats.consume_tps:.2f}")
    print(f"Diff Total: {stats.total_diff()}")
    return 0


async def _queue_holders(admin: Admin, group: str) -> dict[tuple[str, str, int], str]:
    """(topic, broker, queue) -> the IP of the client holding it (its client id up to the ``@``), from
    each online consumer's running info; what cannot be asked is left out, as RocketMQ's tool does."""
    out: dict[tuple[str, str, int], str] = {}
    for conn in await admin.consumer_connections(group):
        client_id = str(conn.get("clientId", ""))
        try:
            info = await admin.consumer_running_info(group, client_id)
        except AdminError:
            continue
        for key in info.get("mqTable") or {}:
            try:
                mq = fastjson.loads(key)
                out[(mq["topic"], mq["brokerName"], int(mq["queueId"]))] = client_id.split("@")[0]
            except (ValueError, KeyError, TypeError):
                continue  # a key this tool cannot read (another client's encoding)
    return out


async def _all_groups_progress(admin: Admin) -> int:
    """RocketMQ's consumerProgress without -g: a line per group that has a retry topic."""
    print(f"{'#Group':<32}  {'#Count':<6}  {'#Version':<24} {'#Type':<5}  {'#Model':<14}  {'#TPS':<7}  #Diff Total")
    for topic in sorted(await admin.topic_list()):
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            continue
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        info = await admin.consumer_connection_info(group)
        conns = info.get("connectionSet", [])
        stats = await admin.consume_stats(group)
        if conns:
            version = version_desc(min(int(c.get("version", 0)) for c in conns))
            push = info.get("consumeType") != "CONSUME_ACTIVELY"
            kind, model = ("PUSH", str(info.get("messageModel", ""))) if push else ("PULL", "")
        else:
            version, kind, model = "OFFLINE", "", ""
        print(f"{front(group, 32):<32}  {len(conns):<6}  {version:<24} {kind:<5}  {model:<14}  "
              f"{int(stats.consume_tps):<7}  {stats.total_diff()}")
    return 0


async def producer_connection(admin: Admin, args: argparse.Namespace) -> int:
    for i, c in enumerate(await admin.producer_connections(args.producerGroup, args.topic), 1):
        print(f"{i:04d}  {c.get('clientId', ''):<32} {c.get('clientAddr', ''):<22} {c.get('language', ''):<8} "
              f"{version_desc(int(c.get('version', 0)))}")
    return 0


async def consumer_connection(admin: Admin, args: argparse.Namespace) -> int:
    conns = await admin.consumer_connections(args.consumerGroup)
    if not conns:
        raise AdminError(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{args.consumerGroup}] not online")
    for i, c in enumerate(conns, 1):
        print(f"{i:03d}  {c.get('clientId', ''):<32} {c.get('clientAddr', ''):<22} {c.get('language', ''):<8} "
              f"{version_desc(int(c.get('version', 0)))}")
    return 0


async def reset_offset_by_time(admin: Admin, args: argparse.Namespace) -> int:
    ts = parse_timestamp(args.timestamp)
    if ts < 0:
        raise UsageError("-s must not be negative")
    # Online consumers are told to reset (they replay at once); with none online the committed offsets are
    # rewritten instead, as RocketMQ's tool falls back to its offline reset.
    try:
        offsets = (await admin.rewind(args.group, ts, args.topic)).offsets
    except AdminError as e:
        if e.code != ResponseCode.CONSUMER_NOT_ONLINE:
            raise
        progress = Progress("queues reset")
        try:
            offsets = await admin.reset_offset_by_time(args.group, args.topic, ts, progress=progress.step)
        finally:
            progress.close()
    print(f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], "
          f"force[{str(args.force).lower()}], timestamp(string)[{when(ts)}], timestamp(long)[{ts}]")
    print(f"{'#brokerName':<40}  {'#queueId':<40}  {'#offset':<40}")
    for mq, off in sorted(offsets.items()):
        print(f"{mq.broker_name:<40}  {mq.queue_id:<40}  {off:<40}")
    return 0
