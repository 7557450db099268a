"""Group subcommands: updateSubGroup, deleteSubGroup, consumerProgress, consumerStatus, consumerConnection,
producerConnection, resetOffsetByTime, cloneGroupOffset (RocketMQ's ``tools/command/consumer`` and ``offset``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tidalmq.client.admin import Admin, AdminError
from tidalmq.client.message import MessageQueue
from tidalmq.common import fastjson
from tidalmq.common.mqversion import version_desc
from tidalmq.common.naming import RETRY_GROUP_TOPIC_PREFIX
from tidalmq.mqadmin.common import Progress, UsageError, command, day_time, front, parse_timestamp, when
from tidalmq.mqadmin.running_info import format_running_info, process_queue_warnings, same_subscription
from tidalmq.remoting.codes import ResponseCode


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return text == "true"


def _retry_policy(text: str) -> dict:
    try:
        policy = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a JSON retry policy: {text!r}") from None
    if not isinstance(policy, dict):
        raise argparse.ArgumentTypeError(f"not a JSON retry policy object: {text!r}")
    return policy


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "updateSubGroup", "Update or create subscription group", update_sub_group)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="create subscription group to which broker")
    target.add_argument("-c", "--clusterName", help="create subscription group to which cluster")
    p.add_argument("-g", "--groupName", required=True, help="consumer group name")
    p.add_argument("-s", "--consumeEnable", type=_bool, default=True, help="consume enable")
    # defaults as RocketMQ 5's tool sends them: from-min and broadcast off unless asked
    p.add_argument("-m", "--consumeFromMinEnable", type=_bool, default=False, help="from min offset")
    p.add_argument("-d", "--consumeBroadcastEnable", type=_bool, default=False, help="broadcast")
    p.add_argument("-o", "--consumeMessageOrderly", type=_bool, default=False, help="consume message orderly")
    p.add_argument("-q", "--retryQueueNums", type=int, default=1, help="retry queue nums")
    p.add_argument("-r", "--retryMaxTimes", type=int, default=16, help="retry max times")
    p.add_argument("-i", "--brokerId", type=int, default=0, help="consumer from which broker id")
    p.add_argument("-w", "--whichBrokerWhenConsumeSlowly", type=int, default=1,
                   help="which broker id when consume slowly")
    p.add_argument("-a", "--notifyConsumerIdsChanged", type=_bool, default=True, help="notify consumerId changed")
    p.add_argument("-p", "--groupRetryPolicy", type=_retry_policy,
                   help='the json string of retry policy ( exp: {"type":"EXPONENTIAL","exponentialRetryPolicy":'
                        '{"initial":5000,"max":7200000,"multiplier":2}} )')
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
    p.add_argument("-c", "--cluster", help="Cluster name (accepted; the group's brokers are every master)")
    p = command(sub, "consumerStatus", "Query consumer's internal data structure.", consumer_status)
    p.add_argument("-g", "--consumerGroup", required=True, help="consumer group name")
    p.add_argument("-i", "--clientId", help="The consumer's client id")
    p.add_argument("-b", "--brokerAddr", help="broker address")
    p.add_argument("-s", "--jstack", action="store_true", help="Run jstack command in the consumer progress")
    p = command(sub, "cloneGroupOffset", "Clone offset from other group.", clone_group_offset)
    p.add_argument("-s", "--srcGroup", required=True, help="set source consumer group")
    p.add_argument("-d", "--destGroup", required=True, help="set destination consumer group")
    p.add_argument("-t", "--topic", required=True, help="set the topic")
    p.add_argument("-o", "--offline", help="the group or the topic is offline (accepted; as RocketMQ's, unused)")
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
    p.add_argument("-c", "--cluster", help="Cluster name (accepted; the topic's route names its brokers)")
    p.add_argument("-b", "--broker", help="broker addr: only that broker's queues (needs -q)")
    p.add_argument("-q", "--queue", type=int, help="queue id: only that queue")
    p.add_argument("-o", "--offset", type=int, help="Expect queue offset: set this offset instead of the time's")


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
                             attributes=args.attributes, consume_message_orderly=args.consumeMessageOrderly,
                             broker_id=args.brokerId, which_broker_when_consume_slowly=args.whichBrokerWhenConsumeSlowly,
                             notify_consumer_ids_changed=args.notifyConsumerIdsChanged,
                             group_retry_policy=args.groupRetryPolicy)
    for addr in addrs:
        print(f"create subscription group to {addr} success.")
    print(_group_config_text(args))
    return 0


def _group_config_text(args: argparse.Namespace) -> str:
    """The group sent, as RocketMQ's tool prints it (SubscriptionGroupConfig.toString)."""
    policy = args.groupRetryPolicy or {}

    def sub(key: str) -> str:
        return json.dumps(policy[key], separators=(",", ":")) if policy.get(key) is not None else "null"

    retry = (f"GroupRetryPolicy{{type={policy.get('type', 'CUSTOMIZED')}, exponentialRetryPolicy="
             f"{sub('exponentialRetryPolicy')}, customizedRetryPolicy={sub('customizedRetryPolicy')}}}")
    attrs = ", ".join(a for a in (args.attributes or "").split(",") if a)

    def b(v: bool) -> str:
        return str(v).lower()

    return (f"SubscriptionGroupConfig{{groupName={args.groupName}, consumeEnable={b(args.consumeEnable)}, "
            f"consumeFromMinEnable={b(args.consumeFromMinEnable)}, "
            f"consumeBroadcastEnable={b(args.consumeBroadcastEnable)}, "
            f"consumeMessageOrderly={b(args.consumeMessageOrderly)}, retryQueueNums={args.retryQueueNums}, "
            f"retryMaxTimes={args.retryMaxTimes}, groupRetryPolicy={retry}, brokerId={args.brokerId}, "
            f"whichBrokerWhenConsumeSlowly={args.whichBrokerWhenConsumeSlowly}, "
            f"notifyConsumerIdsChangedEnable={b(args.notifyConsumerIdsChanged)}, groupSysFlag=0, "
            f"consumeTimeoutMinute=15, subscriptionDataSet=null, attributes={{{attrs}}}}}")


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
    # RocketMQ 5's columns: #Client IP only with -s true; #LastTime follows #Inflight with no space in the
    # header, as its printf has it
    show_ip = args.showClientIP.lower() == "true"
    ip_head = f"{'#Client IP':<20} " if show_ip else f"{'#Diff':<20} "
    rest_head = f"{'#Diff':<20} {'#Inflight':<20}" if show_ip else f"{'#Inflight':<20}"
    print(f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  {'#Consumer Offset':<20}  "
          f"{ip_head}{rest_head}#LastTime")
    for q in stats.queues:
        last = "N/A" if q.last_timestamp == 0 else day_time(q.last_timestamp)
        ip = f"{holders.get((q.topic, q.broker_name, q.queue_id), 'N/A'):<20} " if show_ip else ""
        print(f"{front(q.topic, 64):<64}  {front(q.broker_name, 32):<32}  {q.queue_id:<4}  {q.broker_offset:<20}  "
              f"{q.consumer_offset:<20}  {ip}{q.diff:<20} {q.inflight:<20} {last}")
    print()
    print(f"Consume TPS: {stats.consume_tps:.2f}")
    print(f"Consume Diff Total: {stats.total_diff()}")
    print(f"Consume Inflight Total: {sum(q.inflight for q in stats.queues)}")
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
    print(f"{'#Group':<64}  {'#Count':<6}  {'#Version':<24} {'#Type':<5}  {'#Model':<14}  {'#TPS':<7}  #Diff Total")
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
        print(f"{front(group, 64):<64}  {len(conns):<6}  {version:<24} {kind:<5}  {model:<14}  "
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
    if args.offset is not None and args.queue is None:
        raise UsageError("-o needs -q (the queue)")
    if args.broker is not None and args.queue is None:
        raise UsageError("-b needs -q (the queue)")
    if args.queue is None:
        # Online consumers are told to reset (they replay at once); with none online the committed offsets
        # are rewritten instead, as RocketMQ's tool falls back to its offline reset.
        try:
            offsets = (await admin.rewind(args.group, ts, args.topic)).offsets
        except AdminError as e:
            if e.code != ResponseCode.CONSUMER_NOT_ONLINE:
                raise
        else:
            print(f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], "
                  f"force[{str(args.force).lower()}], timestamp(string)[{when(ts)}], timestamp(long)[{ts}]")
            print(f"{'#brokerName':<40}  {'#queueId':<40}  {'#offset':<40}")
            for mq, off in sorted(offsets.items()):
                print(f"{mq.broker_name:<40}  {mq.queue_id:<40}  {off:<40}")
            return 0
    await _reset_offline(admin, args, ts)
    return 0


async def _reset_offline(admin: Admin, args: argparse.Namespace, ts: int) -> None:
    """RocketMQ's offline reset (ResetOffsetByTimeOldCommand): each queue's committed offset rewritten to
    the time's (or -o's) offset, printed with the offsets before; -q/-b narrow it to one queue."""
    queues = await admin.topic_queues(args.topic)
    if args.queue is not None:
        names = None
        if args.broker is not None:
            masters = await admin.master_addrs()
            names = {n for n, a in masters.items() if a == args.broker}
        queues = [mq for mq in queues if mq.queue_id == args.queue and (names is None or mq.broker_name in names)]
        if not queues:
            raise AdminError(ResponseCode.QUERY_NOT_FOUND, f"no queue {args.queue} of {args.topic}"
                             + (f" on broker {args.broker}" if args.broker else ""))
    maxima = {(q.broker_name, q.queue_id): q.max_offset for q in await admin.topic_status(args.topic)}
    print(f"reset consumer offset by specified consumerGroup[{args.group}], topic[{args.topic}], "
          f"force[{str(args.force).lower()}], timestamp(string)[{args.timestamp}], timestamp(long)[{ts}]")
    print(_OLD_RESET.format("#brokerName", "#queueId", "#brokerOffset", "#consumerOffset", "#timestampOffset",
                            "#resetOffset"))
    progress = Progress("queues reset")
    try:
        for mq in sorted(queues):
            consumed = max(0, await admin.query_offset(args.group, mq))
            at_time = args.offset if args.offset is not None else await admin.search_offset(mq, ts)
            # as RocketMQ's: without force a reset only moves back
            reset = at_time if args.force or at_time < consumed else consumed
            await admin.update_offset(args.group, mq, reset)
            progress.step()
            print(_OLD_RESET.format(mq.broker_name, mq.queue_id, maxima.get((mq.broker_name, mq.queue_id), 0),
                                    consumed, at_time, reset))
    finally:
        progress.close()


_OLD_RESET = "{:<20}  {:<20}  {:<20}  {:<20}  {:<20}  {:<20}"


async def consumer_status(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's consumerStatus: each online consumer's ConsumerRunningInfo written to ``<now>/<clientId>``
    (a line per consumer naming its file), then the group's analysis; with -i one consumer's, printed."""
    group = args.consumerGroup.strip()
    if args.brokerAddr:
        conns = await admin.consumer_connections_on(args.brokerAddr.strip(), group)
    else:
        conns = list({str(c.get("clientId", "")): c for c in await admin.consumer_connections(group)}.values())
    if not conns:
        raise AdminError(ResponseCode.CONSUMER_NOT_ONLINE, "Not found the consumer group connection")
    if args.clientId is not None:
        info = await admin.running_info(group, args.clientId.strip(), jstack=args.jstack)
        print(format_running_info(info), end="")
        return 0
    now = int(time.time() * 1000)
    infos: dict[str, dict] = {}
    print(f"{'#Index':<10} {'#ClientId':<40} {'#Version':<20} #ConsumerRunningInfoFile")
    for conn in sorted(conns, key=lambda c: str(c.get("clientId", ""))):
        client_id = str(conn.get("clientId", ""))
        try:
            info = await admin.running_info(group, client_id, jstack=args.jstack)
        except AdminError as e:  # as RocketMQ's: that consumer is left out, the others listed
            print(f"mqadmin: {client_id}: CODE: {e.code} DESC: {e.remark}", file=sys.stderr)
            continue
        infos[client_id] = info
        path = Path(str(now)) / client_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(format_running_info(info))
        print(f"{len(infos):<10} {client_id:<40} {version_desc(int(conn.get('version', 0))):<20} {path}")
    if infos:
        if same_subscription(infos):
            print("\n\nSame subscription in the same group of consumer", end="")
            print("\n\nRebalance OK")
            for client_id in sorted(infos):
                print(process_queue_warnings(client_id, infos[client_id]), end="")
        else:
            print("\n\nWARN: Different subscription in the same group of consumer!!!", end="")
    return 0


async def clone_group_offset(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's cloneGroupOffset: every committed offset of the source group (each topic it has offsets
    of, as RocketMQ's examineConsumeStats returns them) set for the destination group."""
    src, dest, topic = args.srcGroup.strip(), args.destGroup.strip(), args.topic.strip()
    stats = await admin.consume_stats(src)
    if stats.queues:
        await admin.route(topic)  # as RocketMQ's: a topic without a route fails the command
        for q in stats.queues:
            if q.consumer_offset >= 0:
                await admin.update_offset(dest, MessageQueue(q.topic, q.broker_name, q.queue_id), q.consumer_offset)
    print(f"clone group offset success. srcGroup[{src}], destGroup=[{dest}], topic[{topic}]", end="")
    return 0
