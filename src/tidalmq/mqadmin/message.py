"""Message subcommands: queryMsgById, queryMsgByUniqueKey, queryMsgByKey, sendMessage, queryMsgByOffset,
printMsg, printMsgByQueue, consumeMessage (RocketMQ's ``tools/command/message``)."""

from __future__ import annotations

import argparse
import codecs
import sys

from tidalmq.client.admin import Admin, AdminError
from tidalmq.client.errors import MQClientError
from tidalmq.client.message import Message, MessageExt, MessageQueue, PullStatus
from tidalmq.client.producer import Producer
from tidalmq.client.pull_consumer import PullConsumer
from tidalmq.common.record import body_crc
from tidalmq.mqadmin.common import Progress, UsageError, command, parse_timestamp, when
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.transport import RemotingError

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # RocketMQ's MixAll.TOOLS_CONSUMER_GROUP


def register(sub: argparse._SubParsersAction) -> None:
    register_scans(sub)
    # RocketMQ 5's flags; those that act on consumers (-g/-d resend to a client, -s resend, -u, -f body
    # format, -a, -s/-e time range of queryMsgByUniqueKey) are accepted and change nothing (docs/mqadmin.md)
    p = command(sub, "queryMsgById", "Query Message by Id", query_by_id)
    p.add_argument("-i", "--msgId", required=True, help="Message Id")
    p.add_argument("-t", "--topic", help="topic name (optional here: the offset id names the broker)")
    for flag, name, help_ in (("-c", "--cluster", "Cluster name"), ("-d", "--clientId", "The consumer's client id"),
                              ("-f", "--bodyFormat", "print message body by the specified format"),
                              ("-g", "--consumerGroup", "consumer group name"),
                              ("-s", "--sendMessage", "resend message"), ("-u", "--unitName", "unit name")):
        p.add_argument(flag, name, help=help_ + " (accepted)")
    p = command(sub, "queryMsgByUniqueKey", "Query Message by Unique key", query_by_unique_key)
    p.add_argument("-i", "--msgId", required=True, help="Message Id")
    p.add_argument("-t", "--topic", required=True, help="The topic of msg")
    p.add_argument("-a", "--showAll", action="store_true", help="Print all message, the limit is 32 (accepted)")
    for flag, name, help_ in (("-c", "--cluster", "Cluster name"), ("-d", "--clientId", "The consumer's client id"),
                              ("-g", "--consumerGroup", "consumer group name"), ("-s", "--startTime", "startTime"),
                              ("-e", "--endTime", "endTime")):
        p.add_argument(flag, name, help=help_ + " (accepted)")
    p = command(sub, "queryMsgByKey", "Query Message by Key", query_by_key)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-k", "--msgKey", required=True, help="Message Key")
    p.add_argument("-b", "--beginTimestamp", default="0", help="Begin timestamp(ms). default:0")
    p.add_argument("-e", "--endTimestamp", default="now", help="End timestamp(ms). default:now")
    p.add_argument("-m", "--maxNum", type=int, default=64, help="The maximum number of messages returned")
    p.add_argument("-c", "--cluster", help="Cluster name (accepted; the topic's route names its brokers)")
    p.add_argument("-l", "--lastKey", help="Last Key (accepted; every match up to -m is printed at once)")
    p.add_argument("-p", "--keyType", default="K", choices=("K", "T"),
                   help="Index key type: K for keys (T, tags, is not indexed by TidalMQ)")
    p = command(sub, "sendMessage", "Send a message", send_message)
    p.add_argument("-t", "--topic", required=True, help="Topic name")
    p.add_argument("-p", "--body", required=True, help="UTF-8 string format of the message body")
    p.add_argument("-k", "--key", help="Message keys")
    p.add_argument("-c", "--tags", help="Message tags")
    p.add_argument("-b", "--broker", help="Send message to target broker")
    p.add_argument("-i", "--qid", type=int, help="Send message to target queue")
    p.add_argument("-m", "--msgTraceEnable", default="false", help="Message Trace Enable, Default: false (accepted)")


def _host(h: tuple[str, int]) -> str:
    return f"{h[0]}:{h[1]}"


def print_msg(m: MessageExt) -> None:
    """One message, RocketMQ's ``printMsg`` lines."""
    props = ", ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))
    for label, value in (
        ("OffsetID:", m.offset_msg_id), ("Topic:", m.topic), ("Tags:", f"[{m.properties.get('TAGS', '')}]"),
        ("Keys:", f"[{m.properties.get('KEYS', '')}]"), ("Queue ID:", m.queue_id), ("Queue Offset:", m.queue_offset),
        ("CommitLog Offset:", m.commit_log_offset), ("Reconsume Times:", m.reconsume_times),
        ("Born Timestamp:", when(m.born_timestamp)), ("Store Timestamp:", when(m.store_timestamp)),
        ("Born Host:", _host(m.born_host)), ("Store Host:", _host(m.store_host)),
        ("System Flag:", m.sysflag), ("Properties:", "{" + props + "}"),
    ):
        print(f"{label:<20} {value}")
    print(f"{'Message Body:':<20} {m.body.decode('utf-8', 'replace')}")


async def query_by_id(admin: Admin, args: argparse.Namespace) -> int:
    m = await admin.view_message(args.msgId)
    print_msg(m)
    await print_tracks(admin, m)
    return 0


async def query_by_unique_key(admin: Admin, args: argparse.Namespace) -> int:
    m = await admin.view_message(args.msgId, args.topic)
    print_msg(m)
    await print_tracks(admin, m)
    return 0


async def print_tracks(admin: Admin, m: MessageExt) -> None:
    """RocketMQ's message tracks after the message: each group that consumes its topic, and whether it
    has consumed it (MessageTrack lines; ``WARN: No Consumer`` when no group does)."""
    groups = await admin.groups_consuming(m.topic)
    if not groups:
        print("\n\nWARN: No Consumer", end="")
        return
    consumed = await admin.consumed_by(m)
    print("\n")
    for group in groups:
        info = await admin.consumer_connection_info(group)
        desc = "null"
        if not info.get("connectionSet"):
            track = "NOT_ONLINE"
            desc = f"CODE:{int(ResponseCode.CONSUMER_NOT_ONLINE)} DESC:the consumer group[{group}] not online"
        elif info.get("consumeType") == "CONSUME_ACTIVELY":
            track = "PULL"
        elif consumed.get(group):
            sub = (info.get("subscriptionTable") or {}).get(m.topic) or {}
            tags = set(sub.get("tagsSet") or [])
            track = "CONSUMED" if not tags or "*" in tags or m.tags in tags else "CONSUMED_BUT_FILTERED"
        else:
            track = "NOT_CONSUME_YET"
        print(f"MessageTrack [consumerGroup={group}, trackType={track}, exceptionDesc={desc}]")


async def query_by_key(admin: Admin, args: argparse.Namespace) -> int:
    if args.keyType == "T":
        raise UsageError("-p T: TidalMQ's index holds message keys, not tags")
    progress = Progress("brokers searched")
    try:
        found = await admin.query_messages_by_key(args.topic, args.msgKey, args.maxNum,
                                                  parse_timestamp(args.beginTimestamp),
                                                  parse_timestamp(args.endTimestamp), progress=progress.step)
    finally:
        progress.close()
    print(f"{'#Message ID':<50} {'#QID':>4} {'#Offset':>40} {'#IndexKey':<200}")
    for m in found:
        msg_id = m.properties.get("UNIQ_KEY") or m.offset_msg_id
        print(f"{msg_id:<50} {m.queue_id:>4} {m.queue_offset:>40} {_index_key(m, args.msgKey, msg_id):<200}")
    return 0


def _index_key(m: MessageExt, key: str, msg_id: str) -> str:
    """RocketMQ 5's #IndexKey (the paging key -l takes): the hour of the store time, topic, key type, key,
    message id and CommitLog offset, joined by ``@``."""
    hour_ms = m.store_timestamp - m.store_timestamp % 3_600_000
    return f"{hour_ms}@{m.topic}@K@{key}@{msg_id}@{m.commit_log_offset}"


async def send_message(admin: Admin, args: argparse.Namespace) -> int:
    producer = Producer("PID_MQADMIN_SEND", admin.namesrv_addrs[0] if len(admin.namesrv_addrs) == 1
                        else ";".join(admin.namesrv_addrs), credentials=args.credentials, tls=args.tls)
    await producer.start()
    try:
        queue = None
        if args.broker is not None or args.qid is not None:
            if args.broker is None or args.qid is None:
                raise UsageError("-b and -i go together")
            queue = MessageQueue(args.topic, args.broker, args.qid)
        res = await producer.send(Message(args.topic, args.body, tags=args.tags, keys=args.key), queue=queue)
    finally:
        await producer.shutdown()
    print(f"{'#Broker Name':<32}  {'#QID':<4}  {'#Send Result':<20}    #MsgId")
    print(f"{res.message_queue.broker_name:<32}  {res.message_queue.queue_id:<4}  {res.status.name:<20}    "
          f"{res.msg_id}")
    return 0


def register_scans(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "queryMsgByOffset", "Query Message by offset", query_by_offset)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-b", "--brokerName", required=True, help="Broker Name")
    p.add_argument("-i", "--queueId", type=int, required=True, help="Queue Id")
    p.add_argument("-o", "--offset", type=int, required=True, help="Queue Offset")
    p = command(sub, "printMsg", "Print Message Detail", print_messages)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-b", "--beginTimestamp", help="Begin timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]")
    p.add_argument("-e", "--endTimestamp", help="End timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]")
    p.add_argument("-d", "--printBody", default="true", help="print body")
    p = command(sub, "printMsgByQueue", "Print Message Detail by queueId.", print_by_queue)
    p.add_argument("-t", "--topic", required=True, help="topic name")
    p.add_argument("-a", "--brokerName", required=True, help="broker name")
    p.add_argument("-i", "--queueId", type=int, required=True, help="queue id")
    p.add_argument("-c", "--charsetName", default="UTF-8", help="CharsetName(eg: UTF-8,GBK)")
    p.add_argument("-s", "--subExpression", default="*", help="Subscribe Expression(eg: TagA || TagB)")
    p.add_argument("-b", "--beginTimestamp", help="Begin timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]")
    p.add_argument("-e", "--endTimestamp", help="End timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]")
    # Java's Boolean.parseBoolean: "true" in any case is true, anything else false
    p.add_argument("-p", "--print msg", dest="printMsg", type=_java_bool, default=False,
                   help="print msg. eg: true | false(default)")
    p.add_argument("-d", "--printBody", type=_java_bool, default=False, help="print body. eg: true | false(default)")
    p.add_argument("-f", "--calculate", type=_java_bool, default=False, help="calculate by tag. eg: true | false(default)")
    p = command(sub, "consumeMessage", "Consume message", consume_message)
    p.add_argument("-t", "--topic", required=True, help="Topic name")
    p.add_argument("-b", "--brokerName", help="Broker name")
    p.add_argument("-i", "--queueId", type=int, help="Queue Id")
    p.add_argument("-o", "--offset", type=int, help="Queue offset")
    p.add_argument("-g", "--consumerGroup", help="Consumer group name (accepted; reading commits no offset)")
    p.add_argument("-s", "--beginTimestamp", help="Begin timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]")
    p.add_argument("-e", "--endTimestamp", help="End timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]")
    p.add_argument("-c", "--MessageNumber", type=int, default=128, help="Number of message to be consumed")


async def query_by_offset(admin: Admin, args: argparse.Namespace) -> int:
    m = await admin.message_at(MessageQueue(args.topic, args.brokerName, args.queueId), args.offset)
    if m is None:
        raise AdminError(ResponseCode.QUERY_NOT_FOUND, f"no message at {args.topic} {args.brokerName} "
                                                       f"queue {args.queueId} offset {args.offset}")
    print_msg(m)
    await print_tracks(admin, m)  # as RocketMQ's, which prints it with queryMsgById's printMsg
    return 0


async def print_messages(admin: Admin, args: argparse.Namespace) -> int:
    """Every message of the topic, queue by queue, optionally within a store-time range (a scan: a
    counter on a terminal)."""
    begin = parse_timestamp(args.beginTimestamp) if args.beginTimestamp else None
    end = parse_timestamp(args.endTimestamp) if args.endTimestamp else None
    progress = Progress("messages read")
    try:
        for q in await admin.topic_status(args.topic):
            mq = MessageQueue(args.topic, q.broker_name, q.queue_id)
            first = await admin.search_offset(mq, begin) if begin is not None else q.min_offset
            last = await admin.search_offset(mq, end) if end is not None else q.max_offset
            print(f"minOffset={first}, maxOffset={last}, MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, "
                  f"queueId={mq.queue_id}]")
            for off in range(first, last):
                m = await admin.message_at(mq, off)
                progress.step()
                if m is not None:
                    _print_line(m, args.printBody != "false")
    finally:
        progress.close()
    return 0


def _print_line(m: MessageExt, with_body: bool) -> None:
    body = m.body.decode("utf-8", "replace") if with_body else ""
    print(f"MSGID: {m.properties.get('UNIQ_KEY') or m.offset_msg_id} queueOffset={m.queue_offset} "
          f"keys={m.properties.get('KEYS', '')} BODY: {body}")


async def consume_message(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's consumeMessage: up to -c messages, oldest first, of one queue (-b with -i, from -o) or of
    every queue, within the -s/-e store-time range. Reads like a pull consumer that commits nothing."""
    if args.MessageNumber <= 0:
        raise UsageError("-c must be a positive message number")
    if args.queueId is not None and args.brokerName is None:
        raise UsageError("-i needs -b (the queue's broker name)")
    if args.offset is not None and args.queueId is None:
        raise UsageError("-o needs -i (the queue)")
    begin = parse_timestamp(args.beginTimestamp) if args.beginTimestamp else None
    end = parse_timestamp(args.endTimestamp) if args.endTimestamp else None
    queues = [q for q in await admin.topic_status(args.topic)
              if args.queueId is None or (q.broker_name, q.queue_id) == (args.brokerName, args.queueId)]
    if args.queueId is not None and not queues:
        raise AdminError(ResponseCode.QUERY_NOT_FOUND, f"no queue {args.queueId} of {args.topic} on broker {args.brokerName}")
    left = args.MessageNumber
    for q in queues:
        if left == 0:
            break
        mq = MessageQueue(args.topic, q.broker_name, q.queue_id)
        first = await admin.search_offset(mq, begin) if begin is not None else q.min_offset
        last = await admin.search_offset(mq, end) if end is not None else q.max_offset  # exclusive
        first = max(first, args.offset or 0)
        last = min(last, first + left)
        found = [m for off in range(first, last) if (m := await admin.message_at(mq, off)) is not None]
        left -= len(found)
        if found:
            print("Consume ok")
            for m in found:
                _print_line(m, True)
        print(f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}] print msg "
              f"finished. status={'NO_NEW_MSG' if last >= q.max_offset else 'FOUND'}, offset={max(last, first)}")
    return 0


def _java_bool(text: str) -> bool:
    return text.strip().lower() == "true"


def _java_host(h: tuple[str, int]) -> str:
    return f"/{h[0]}:{h[1]}"  # InetSocketAddress.toString of an address without a host name


def message_text(m: MessageExt) -> str:
    """MessageExt.toString of a pulled message, as RocketMQ's printMsgByQueue prints it (the properties
    in key order; Java's HashMap has its own)."""
    props = ", ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))
    tx = m.properties.get("UNIQ_KEY", "null") if m.properties.get("TRAN_MSG", "").lower() == "true" else "null"
    return (f"MessageExt [brokerName={m.broker_name}, queueId={m.queue_id}, storeSize={m.store_size}, "
            f"queueOffset={m.queue_offset}, sysFlag={m.sysflag}, bornTimestamp={m.born_timestamp}, "
            f"bornHost={_java_host(m.born_host)}, storeTimestamp={m.store_timestamp}, "
            f"storeHost={_java_host(m.store_host)}, msgId={m.offset_msg_id}, commitLogOffset={m.commit_log_offset}, "
            f"bodyCRC={body_crc(m.body)}, reconsumeTimes={m.reconsume_times}, "
            f"preparedTransactionOffset={m.prepared_transaction_offset}, toString()=Message{{topic='{m.topic}', "
            f"flag={m.flag}, properties={{{props}}}, body=[{', '.join(str(b - 256 if b > 127 else b) for b in m.body)}], "
            f"transactionId='{tx}'}}]")


async def print_by_queue(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's printMsgByQueue: one queue pulled 32 at a time from its min offset (or -b's) to its max
    (or -e's), as the tools' consumer group TOOLS_CONSUMER: each message with -p true, a count per tag with
    -f true. Pulling stops at the first batch the filter -s leaves empty on the broker, as RocketMQ's does."""
    try:
        codecs.lookup(args.charsetName)
    except LookupError:
        raise UsageError(f"unknown charset {args.charsetName!r}") from None
    consumer = PullConsumer(TOOLS_CONSUMER_GROUP, ";".join(admin.namesrv_addrs) or None, credentials=args.credentials,
                            tls=args.tls)
    await consumer.start()
    counts: dict[str, int] = {}
    try:
        mq = MessageQueue(args.topic.strip(), args.brokerName.strip(), args.queueId)
        low = await consumer.min_offset(mq)
        high = await consumer.max_offset(mq)
        if args.beginTimestamp:
            low = await consumer.search_offset(mq, parse_timestamp(args.beginTimestamp.strip()))
        if args.endTimestamp:
            high = await consumer.search_offset(mq, parse_timestamp(args.endTimestamp.strip()))
        offset = low
        while offset < high:
            try:
                res = await consumer.pull(mq, offset, 32, args.subExpression.strip())
            except (MQClientError, RemotingError) as e:  # as RocketMQ's: reported, then the counts
                print(f"mqadmin: pull {offset}: {e}", file=sys.stderr)
                break
            offset = res.next_begin_offset
            if res.status != PullStatus.FOUND:
                break
            for m in res.messages:
                m.properties = {**m.properties, "MIN_OFFSET": str(res.min_offset), "MAX_OFFSET": str(res.max_offset)}
                if m.tags and m.tags.strip():
                    counts[m.tags] = counts.get(m.tags, 0) + 1
                if args.printMsg:
                    body = m.body.decode(args.charsetName, "replace") if args.printBody else "NOT PRINT BODY"
                    print(f"MSGID: {m.msg_id} {message_text(m)} BODY: {body}")
    finally:
        await consumer.shutdown()
    if args.calculate:
        for tag, n in sorted(counts.items(), key=lambda e: (-e[1], e[0])):
            print(f"Tag: {tag:<30} Count: {n}")
    return 0
