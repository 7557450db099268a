"""``tidalmq admin``: topics and consumer progress, from the command line."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from typing import TYPE_CHECKING

from tidalmq.acl.signature import SessionCredentials
from tidalmq.common.naming import NameError_
from tidalmq.remoting.tls import client_context as tls_context
from tidalmq.remoting.transport import RemotingError

if TYPE_CHECKING:
    # The client is imported when an admin command runs: every command builds this parser, and the namesrv
    # and broker commands never need the client (its import was much of their start: docs/benchmarks.md,
    # "Figures behind the code").
    from tidalmq.client.admin import Admin
    from tidalmq.client.message import MessageExt


def add_connection_options(p: argparse.ArgumentParser) -> None:
    """How an operator's tool reaches the cluster: ``tidalmq admin`` and ``tidalmq console``."""
    p.add_argument("-n", "--namesrv", help="NameServer address (default $NAMESRV_ADDR or 127.0.0.1:9876)")
    p.add_argument("--access-key", help="ACL account to sign requests with (default $TIDALMQ_ACCESS_KEY, "
                                        "else accessKey of $ROCKETMQ_HOME/conf/tools.yml)")
    p.add_argument("--secret-key", help="its secret (default $TIDALMQ_SECRET_KEY, else tools.yml's secretKey)")
    p.add_argument("--tls", action="store_true", help="speak TLS to the NameServer and brokers")
    p.add_argument("--tls-ca", help="verify the servers' certificates against this CA file (PEM)")
    p.add_argument("--tls-cert", help="client certificate (PEM), for tls.server.need.client.auth")
    p.add_argument("--tls-key", help="the client certificate's private key (PEM)")


def add_admin_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("admin", help="operate a running TidalMQ (topics, consumer progress)")
    add_connection_options(p)
    asub = p.add_subparsers(dest="admin_cmd", required=True)
    t = asub.add_parser("topic", help="topics").add_subparsers(dest="topic_cmd", required=True)
    c = t.add_parser("create")
    c.add_argument("topic")
    c.add_argument("-q", "--queues", type=int, default=8)
    c.add_argument("--order", action="store_true")
    c.add_argument("--cluster")
    c.add_argument("--attr", action="append", default=[], metavar="[+|-]KEY[=VALUE]",
                   help="a topic attribute, repeatable: message.type=DELAY (NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY); "
                        "-KEY deletes one (docs/message-types.md)")
    t.add_parser("list")
    s = t.add_parser("status")
    s.add_argument("topic")
    d = t.add_parser("delete")
    d.add_argument("topic")
    g = asub.add_parser("progress", help="consumer progress of a group: per queue broker offset, consumer offset, lag")
    g.add_argument("group")
    g.add_argument("-t", "--topic")
    asub.add_parser("cluster", help="brokers registered with the NameServer")
    rw = asub.add_parser("rewind", help="reset a group's offsets to a time (live consumers replay at once)")
    rw.add_argument("group")
    rw.add_argument("-t", "--topic", help="one topic (default: every topic the group consumes)")
    when = rw.add_mutually_exclusive_group(required=True)
    when.add_argument("--timestamp", type=int, help="milliseconds since the epoch")
    when.add_argument("--time", help="ISO 8601 local time, e.g. 2026-11-21T10:00:00")
    when.add_argument("--earliest", action="store_true")
    when.add_argument("--latest", action="store_true")
    dl = asub.add_parser("dlq", help="dead letters of a group").add_subparsers(dest="dlq_cmd", required=True)
    dls = dl.add_parser("list")
    dls.add_argument("group")
    dls.add_argument("-n", "--max", type=int, default=100)
    dlr = dl.add_parser("resend", help="send dead letters back to their original topic")
    dlr.add_argument("group")
    dlr.add_argument("ids", nargs="*", help="message ids (client id or offset id); none with --all")
    dlr.add_argument("--all", action="store_true")
    q = asub.add_parser("query", help="find messages").add_subparsers(dest="query_cmd", required=True)
    qk = q.add_parser("key", help="by key (or client id) within a time range, from the index")
    qk.add_argument("topic")
    qk.add_argument("key")
    qk.add_argument("--begin", type=int, default=0, help="ms since the epoch (default 0)")
    qk.add_argument("--end", type=int, help="ms since the epoch (default now)")
    qk.add_argument("-n", "--max", type=int, default=32)
    qi = q.add_parser("id", help="by message id (offset id, or client id with --topic), and who consumed it")
    qi.add_argument("msg_id")
    qi.add_argument("-t", "--topic")
    sc = asub.add_parser("schedule", help="scheduled messages (delay levels, timer)").add_subparsers(
        dest="schedule_cmd", required=True)
    sc.add_parser("stats", help="pending per real topic, deliver-time histogram, rates, lateness")
    cc = sc.add_parser("cancel", help="cancel a timer message before it is due (TIMER_DEL_UNIQKEY)")
    cc.add_argument("topic")
    cc.add_argument("uniq_key", help="the message's client id (UNIQ_KEY)")
    cc.add_argument("--deliver-ms", type=int, help="its deliver time (optional: the broker looks it up)")


def attribute_modification(attrs: list[str]) -> str | None:
    """``--attr`` values as RocketMQ's modification text: ``KEY=VALUE`` adds or alters (``+`` implied),
    ``-KEY`` deletes."""
    return ",".join(a if a.startswith(("+", "-")) else "+" + a for a in attrs) or None


def _table(rows: list[list[object]], header: list[str]) -> str:
    cols = [header, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cols)


def admin_credentials(args: argparse.Namespace) -> SessionCredentials | None:
    """The account ``tidalmq admin`` signs with (ACL, docs/acl.md): the options, else the environment,
    else mqadmin's ``$ROCKETMQ_HOME/conf/tools.yml``; None to send unsigned requests."""
    ak = args.access_key or os.environ.get("TIDALMQ_ACCESS_KEY")
    sk = args.secret_key or os.environ.get("TIDALMQ_SECRET_KEY")
    home = os.environ.get("ROCKETMQ_HOME")
    if not (ak or sk) and home:
        from tidalmq.acl import tools_credentials

        return tools_credentials(home)
    if not ak and not sk:
        return None
    if not ak or not sk:
        raise ValueError("an access key needs its secret key, and the other way round")
    return SessionCredentials(ak, sk)


def admin_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context of the ``--tls*`` options, None for plain connections."""
    if args.tls or args.tls_ca or args.tls_cert:
        return tls_context(trust_cert_path=args.tls_ca or "", cert_path=args.tls_cert or "", key_path=args.tls_key or "")
    return None


async def run_admin(args: argparse.Namespace) -> int:
    from tidalmq.client.admin import Admin, AdminError

    try:
        credentials = admin_credentials(args)
    except ValueError as e:
        print(f"tidalmq admin: {e}", file=sys.stderr)
        return 2
    async with Admin(args.namesrv, credentials=credentials, tls=admin_tls(args)) as admin:
        try:
            if args.admin_cmd == "topic":
                if args.topic_cmd == "create":
                    brokers = await admin.create_topic(args.topic, args.queues, order=args.order, cluster=args.cluster,
                                                       attributes=attribute_modification(args.attr))
                    print(f"create topic {args.topic} with {args.queues} queues on {', '.join(brokers)}: success")
                elif args.topic_cmd == "list":
                    for t in await admin.topic_list():
                        print(t)
                elif args.topic_cmd == "status":
                    queues = await admin.topic_status(args.topic)
                    print(_table([[r.broker_name, r.queue_id, r.min_offset, r.max_offset] for r in queues],
                                 ["broker", "queue", "minOffset", "maxOffset"]))
                elif args.topic_cmd == "delete":
                    await admin.delete_topic(args.topic)
                    print(f"delete topic {args.topic}: success")
            elif args.admin_cmd == "progress":
                progress = await admin.consumer_progress(args.group, args.topic)
                if not progress:
                    print(f"group {args.group} has no consumer progress", file=sys.stderr)
                    return 1
                print(_table([[r.topic, r.broker_name, r.queue_id, r.broker_offset, r.consumer_offset, r.lag]
                              for r in progress], ["topic", "broker", "queue", "brokerOffset", "consumerOffset", "lag"]))
                print(f"total lag: {sum(r.lag for r in progress)}")
            elif args.admin_cmd == "schedule":
                return await _run_schedule(admin, args)
            elif args.admin_cmd == "rewind":
                return await _run_rewind(admin, args)
            elif args.admin_cmd == "dlq":
                return await _run_dlq(admin, args)
            elif args.admin_cmd == "query":
                return await _run_query(admin, args)
            elif args.admin_cmd == "cluster":
                info = await admin.cluster_info()
                rows: list[list[object]] = []
                for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
                    for n in names:
                        for bid, addr in sorted(info["brokerAddrTable"][n]["brokerAddrs"].items()):
                            rows.append([cluster, n, bid, addr, await _disk_status(admin, addr)])
                print(_table(rows, ["cluster", "broker", "id", "address", "disk"]))
        except (AdminError, RemotingError) as e:
            print(f"tidalmq admin: error {e.code}: {e.remark}", file=sys.stderr)
            return 1
        except NameError_ as e:
            print(f"tidalmq admin: {e}", file=sys.stderr)
            return 2
    return 0


async def _run_schedule(admin: Admin, args: argparse.Namespace) -> int:
    if args.schedule_cmd == "cancel":
        name = await admin.cancel_scheduled(args.topic, args.uniq_key, args.deliver_ms)
        print(f"cancel {args.topic} {args.uniq_key} on {name}: success")
        return 0
    for name, rep in (await admin.schedule_stats()).items():
        t = rep.get("timer") or {}
        d = rep.get("delayLevel") or {}
        print(f"broker {name}")
        print(f"  timer: pending {t.get('pending', 0)}, enqueued {t.get('enqueued', 0)} ({t.get('enqueueTps', 0)}/s), "
              f"delivered {t.get('delivered', 0)} ({t.get('deliverTps', 0)}/s), early {t.get('early', 0)}, "
              f"lateness p50/p99/max {t.get('latenessP50Ms', 0)}/{t.get('latenessP99Ms', 0)}/{t.get('latenessMaxMs', 0)} ms, "
              f"behind now {t.get('latenessNowMs', 0)} ms, precision {t.get('precisionMs', '-')} ms")
        print(f"  timer: duplicates skipped {t.get('duplicatesSkipped', 0)}, redelivered {t.get('redelivered', 0)}, "
              f"cancels {t.get('cancels', 0)} (too late {t.get('cancelsTooLate', 0)})")
        print(f"  delay levels: delivered {d.get('delivered', 0)}, lateness p50/p99/max "
              f"{d.get('latenessP50Ms', 0)}/{d.get('latenessP99Ms', 0)}/{d.get('latenessMaxMs', 0)} ms, "
              f"pending by level {d.get('pending', {})}")
        buckets = rep.get("histogramBuckets", ["due", "minute", "hour", "day", "beyond"])
        rows = [[topic, v["pending"], v["delayLevel"], v["timer"], *(v["histogram"][b] for b in buckets)]
                for topic, v in rep.get("topics", {}).items()]
        if rows:
            print(_table(rows, ["topic", "pending", "delayLevel", "timer", *buckets]))
        if rep.get("delayLevelScanTruncated"):
            print("  (delay-level counts truncated: too many pending to scan)")
    return 0



async def _disk_status(admin: Admin, addr: str) -> str:
    """"ok", or "FULL (why): writes refused" when the broker refuses sends for lack of space."""
    from tidalmq.client.admin import AdminError

    try:
        info = await admin.broker_runtime_info(addr)
    except (AdminError, RemotingError) as e:
        return f"unknown ({e})"
    if info.get("diskFull") == "true":
        return f"FULL ({info.get('diskFullReason', '')}): writes refused"
    return "ok"

def _describe(m: MessageExt) -> list[object]:
    import time

    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m.store_timestamp / 1000))
    return [m.properties.get("UNIQ_KEY") or m.offset_msg_id, m.topic, m.queue_id, m.queue_offset,
            m.properties.get("TAGS", ""), m.properties.get("KEYS", ""), when, len(m.body)]


_MSG_HEADER = ["msgId", "topic", "queue", "queueOffset", "tags", "keys", "stored", "bodyBytes"]


async def _run_rewind(admin: Admin, args: argparse.Namespace) -> int:
    from datetime import datetime

    if args.latest:
        ts = -1
    elif args.earliest:
        ts = 0
    elif args.time:
        try:
            ts = int(datetime.fromisoformat(args.time).timestamp() * 1000)
        except ValueError:
            print(f"tidalmq admin: --time {args.time!r} is not an ISO 8601 time", file=sys.stderr)
            return 2
    else:
        ts = args.timestamp
    res = await admin.rewind(args.group, ts, args.topic)
    print(_table([[mq.topic, mq.broker_name, mq.queue_id, off] for mq, off in sorted(res.offsets.items())],
                 ["topic", "broker", "queue", "newOffset"]))
    for note in res.notes:
        print(f"note: {note}")
    for name, remark in res.refused.items():
        print(f"broker {name}: {remark}", file=sys.stderr)
    return 0


async def _run_dlq(admin: Admin, args: argparse.Namespace) -> int:
    if args.dlq_cmd == "list":
        letters = await admin.dead_letters(args.group, args.max)
        if not letters:
            print(f"group {args.group} has no dead letters")
            return 0
        rows = [[*_describe(m)[:1], m.properties.get("DLQ_ORIGIN_TOPIC") or m.properties.get("RETRY_TOPIC", ""),
                 m.reconsume_times, *_describe(m)[4:]] for m in letters]
        print(_table(rows, ["msgId", "originTopic", "reconsumeTimes", "tags", "keys", "stored", "bodyBytes"]))
        return 0
    if not args.ids and not args.all:
        print("tidalmq admin: name the ids to re-send, or --all", file=sys.stderr)
        return 2
    sent = await admin.resend_dead_letters(args.group, None if args.all else args.ids)
    for old, new in sent:
        print(f"re-sent {old} as {new}")
    print(f"{len(sent)} dead letters re-sent")
    return 0


async def _run_query(admin: Admin, args: argparse.Namespace) -> int:
    if args.query_cmd == "key":
        found = await admin.query_messages_by_key(args.topic, args.key, args.max, args.begin, args.end)
        if not found:
            print(f"no message with key {args.key} in {args.topic} in that time range", file=sys.stderr)
            return 1
        print(_table([_describe(m) for m in found], _MSG_HEADER))
        return 0
    m = await admin.view_message(args.msg_id, args.topic)
    print(_table([_describe(m)], _MSG_HEADER))
    print("properties: " + ", ".join(f"{k}={v}" for k, v in sorted(m.properties.items())))
    for group, done in sorted((await admin.consumed_by(m)).items()):
        print(f"group {group}: {'consumed' if done else 'not consumed yet'}")
    return 0
