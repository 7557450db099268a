"""``tidalmq admin``: topics and consumer progress, from the command line."""

from __future__ import annotations

import argparse
import sys

from tidalmq.client.admin import Admin, AdminError
from tidalmq.common.naming import NameError_
from tidalmq.remoting.transport import RemotingError


def add_admin_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("admin", help="operate a running TidalMQ (topics, consumer progress)")
    p.add_argument("-n", "--namesrv", help="NameServer address (default $NAMESRV_ADDR or 127.0.0.1:9876)")
    asub = p.add_subparsers(dest="admin_cmd", required=True)
    t = asub.add_parser("topic", help="topics").add_subparsers(dest="topic_cmd", required=True)
    c = t.add_parser("create")
    c.add_argument("topic")
    c.add_argument("-q", "--queues", type=int, default=8)
    c.add_argument("--order", action="store_true")
    c.add_argument("--cluster")
    t.add_parser("list")
    s = t.add_parser("status")
    s.add_argument("topic")
    d = t.add_parser("delete")
    d.add_argument("topic")
    g = asub.add_parser("progress", help="consumer progress of a group: per queue broker offset, consumer offset, lag")
    g.add_argument("group")
    g.add_argument("-t", "--topic")
    asub.add_parser("cluster", help="brokers registered with the NameServer")
    sc = asub.add_parser("schedule", help="scheduled messages (delay levels, timer)").add_subparsers(
        dest="schedule_cmd", required=True)
    sc.add_parser("stats", help="pending per real topic, deliver-time histogram, rates, lateness")
    cc = sc.add_parser("cancel", help="cancel a timer message before it is due (TIMER_DEL_UNIQKEY)")
    cc.add_argument("topic")
    cc.add_argument("uniq_key", help="the message's client id (UNIQ_KEY)")
    cc.add_argument("--deliver-ms", type=int, help="its deliver time (optional: the broker looks it up)")


def _table(rows: list[list[object]], header: list[str]) -> str:
    cols = [header, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cols)


async def run_admin(args: argparse.Namespace) -> int:
    async with Admin(args.namesrv) as admin:
        try:
            if args.admin_cmd == "topic":
                if args.topic_cmd == "create":
                    brokers = await admin.create_topic(args.topic, args.queues, order=args.order, cluster=args.cluster)
                    print(f"create topic {args.topic} with {args.queues} queues on {', '.join(brokers)}: success")
                elif args.topic_cmd == "list":
                    for t in await admin.topic_list():
                        print(t)
                elif args.topic_cmd == "status":
                    rows = await admin.topic_status(args.topic)
                    print(_table([[r.broker_name, r.queue_id, r.min_offset, r.max_offset] for r in rows],
                                 ["broker", "queue", "minOffset", "maxOffset"]))
                elif args.topic_cmd == "delete":
                    await admin.delete_topic(args.topic)
                    print(f"delete topic {args.topic}: success")
            elif args.admin_cmd == "progress":
                rows = await admin.consumer_progress(args.group, args.topic)
                if not rows:
                    print(f"group {args.group} has no consumer progress", file=sys.stderr)
                    return 1
                print(_table([[r.topic, r.broker_name, r.queue_id, r.broker_offset, r.consumer_offset, r.lag]
                              for r in rows], ["topic", "broker", "queue", "brokerOffset", "consumerOffset", "lag"]))
                print(f"total lag: {sum(r.lag for r in rows)}")
            elif args.admin_cmd == "schedule":
                return await _run_schedule(admin, args)
            elif args.admin_cmd == "cluster":
                info = await admin.cluster_info()
                rows = []
                for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
                    for n in names:
                        for bid, addr in sorted(info["brokerAddrTable"][n]["brokerAddrs"].items()):
                            rows.append([cluster, n, bid, addr])
                print(_table(rows, ["cluster", "broker", "id", "address"]))
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
