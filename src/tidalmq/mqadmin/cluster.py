"""Cluster, broker and NameServer subcommands: clusterList, brokerStatus, getBrokerConfig,
updateBrokerConfig, updateKvConfig, deleteKvConfig (RocketMQ's ``tools/command/cluster``, ``broker``,
``namesrv``)."""

from __future__ import annotations

import argparse
import asyncio
import time

from tidalmq.client.admin import Admin, AdminError
from tidalmq.mqadmin.common import command
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.transport import RemotingError


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "clusterList", "List cluster infos", cluster_list)
    p.add_argument("-m", "--moreStats", action="store_true", help="Print more stats")
    p.add_argument("-i", "--interval", type=int, help="specify intervals numbers, it is in seconds")
    p.add_argument("-c", "--clusterName", help="which cluster")
    for name, help_, func in (("brokerStatus", "Fetch broker runtime status data", broker_status),
                              ("getBrokerConfig", "Get broker config by cluster or special broker!", get_broker_config)):
        p = command(sub, name, help_, func)
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("-b", "--brokerAddr", help="Broker address")
        target.add_argument("-c", "--clusterName", help="which cluster")
    p = command(sub, "updateBrokerConfig", "Update broker's config", update_broker_config)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("-b", "--brokerAddr", help="update which broker")
    target.add_argument("-c", "--clusterName", help="update which cluster")
    p.add_argument("-k", "--key", required=True, help="config key")
    p.add_argument("-v", "--value", required=True, help="config value")
    p = command(sub, "cleanExpiredCQ", "Clean expired ConsumeQueue on broker.", clean_expired_cq)
    p.add_argument("-b", "--brokerAddr", help="Broker address")
    p.add_argument("-c", "--cluster", help="clustername")
    p = command(sub, "updateKvConfig", "Create or update KV config.", update_kv_config)
    p.add_argument("-s", "--namespace", required=True, help="set the namespace")
    p.add_argument("-k", "--key", required=True, help="set the key name")
    p.add_argument("-v", "--value", required=True, help="set the key value")
    p = command(sub, "deleteKvConfig", "Delete KV config.", delete_kv_config)
    p.add_argument("-s", "--namespace", required=True, help="set the namespace")
    p.add_argument("-k", "--key", required=True, help="set the key name")


async def _addrs(admin: Admin, args: argparse.Namespace) -> list[str]:
    if args.brokerAddr:
        return [args.brokerAddr]
    addrs = sorted((await admin.master_addrs(args.clusterName)).values())
    if not addrs:
        raise AdminError(ResponseCode.BROKER_NOT_EXIST, f"no master broker in cluster {args.clusterName}")
    return addrs


async def _masters_and_slaves(admin: Admin, cluster: str) -> list[tuple[str, list[str]]]:
    """RocketMQ's CommandUtil.fetchMasterAndSlaveDistinguish: each broker group's master and its slaves."""
    info = await admin.cluster_info()
    out = []
    for name in sorted(info.get("clusterAddrTable", {}).get(cluster, [])):
        addrs = info["brokerAddrTable"][name]["brokerAddrs"]
        if "0" in addrs:
            out.append((addrs["0"], [a for bid, a in sorted(addrs.items(), key=lambda i: int(i[0])) if bid != "0"]))
    if not out:
        raise AdminError(ResponseCode.BROKER_NOT_EXIST, f"no master broker in cluster {cluster}")
    return out


async def cluster_list(admin: Admin, args: argparse.Namespace) -> int:
    """RocketMQ's clusterList: once, or with -i every that many seconds until interrupted; -m prints the
    messages in and out yesterday and today instead of the base table; -c only that cluster's brokers."""
    first = True
    while first or args.interval is not None:
        if not first:
            await asyncio.sleep(args.interval)
        first = False
        info = await admin.cluster_info()
        table = info.get("clusterAddrTable", {})
        if args.clusterName is not None:
            table = {args.clusterName: table.get(args.clusterName, [])}
        await (_more_stats(admin, info, table) if args.moreStats else _base_info(admin, info, table))
    return 0


async def _more_stats(admin: Admin, info: dict, table: dict) -> None:
    print(f"{'#Cluster Name':<16}  {'#Broker Name':<32} {'#InTotalYest':>14} {'#OutTotalYest':>14} "
          f"{'#InTotalToday':>14} {'#OutTotalToday':>14}")
    for cluster, names in sorted(table.items()):
        for name in sorted(names):
            for _bid, addr in sorted(info["brokerAddrTable"][name]["brokerAddrs"].items()):
                totals = [0, 0, 0, 0]
                try:  # as RocketMQ's: a broker that cannot say prints zeros
                    rt = await admin.broker_runtime_info(addr)
                    put = [int(rt[f"msgPutTotal{k}"]) for k in ("YesterdayMorning", "TodayMorning", "TodayNow")]
                    get = [int(rt[f"msgGetTotal{k}"]) for k in ("YesterdayMorning", "TodayMorning", "TodayNow")]
                    totals = [put[1] - put[0], get[1] - get[0], put[2] - put[1], get[2] - get[1]]
                except (AdminError, RemotingError, KeyError, ValueError):
                    pass
                print(f"{cluster:<16}  {name:<32} {totals[0]:>14} {totals[1]:>14} {totals[2]:>14} {totals[3]:>14}")


# RocketMQ 5's clusterList base table: the columns and widths of its printf
_BASE = "{:<22}  {:<22}  {:<4}  {:<22} {:<16}  {:>16}  {:>30}  {:<22}  {:>11}  {:<12}  {:<8}  {:>10}"


async def _base_info(admin: Admin, info: dict, table: dict) -> None:
    print(_BASE.format("#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)", "#OutTPS(LOAD)",
                       "#Timer(Progress)", "#PCWait(ms)", "#Hour", "#SPACE", "#ACTIVATED"))
    for cluster, names in sorted(table.items()):
        for name in sorted(names):
            for bid, addr in sorted(info["brokerAddrTable"][name]["brokerAddrs"].items()):
                try:  # as RocketMQ's: a broker that cannot answer still gets its line, empty values in it
                    rt = await admin.broker_runtime_info(addr)
                except (AdminError, RemotingError, OSError):
                    rt = {}
                print(_BASE.format(cluster, name, bid, addr, *_base_values(rt)))


def _base_values(rt: dict[str, str]) -> list[str]:
    """The values of one broker's base line after its address, as RocketMQ 5's clusterList computes them."""
    def val(key: str) -> str:
        return rt.get(key, "N")  # what RocketMQ 5 prints for a key the broker does not report

    def num(key: str) -> float:
        try:
            return float(rt.get(key) or 0)
        except ValueError:
            return 0.0

    tps_in = _first_tps(rt.get("putTps"))
    tps_out = _first_tps(rt.get("getTransferredTps") or rt.get("getTransferedTps"))
    load_in = f"{tps_in:9.2f}({val('sendThreadPoolQueueSize')},{val('sendThreadPoolQueueHeadWaitTimeMills')}ms)"
    load_out = (f"{tps_out:9.2f}({val('pullThreadPoolQueueSize')},{val('pullThreadPoolQueueHeadWaitTimeMills')}ms|"
                f"{val('ackThreadPoolQueueSize')},{val('ackThreadPoolQueueHeadWaitTimeMills')}ms)")
    timer = (f"{int(num('timerReadBehind'))}-{int(num('timerOffsetBehind'))}({num('timerCongestNum') / 10000:.1f}w, "
             f"{num('timerEnqueueTps'):.1f}, {num('timerDequeueTps'):.1f})")
    earliest = rt.get("earliestMessageTimeStamp") or ""
    hour = (time.time() * 1000 - int(earliest)) / 1000 / 3600 if earliest else 0.0
    return [rt.get("brokerVersionDesc", ""), load_in, load_out, timer, rt.get("pageCacheLockTimeMills", ""),
            f"{hour:2.2f}", f"{num('commitLogDiskRatio'):.4f}", str(rt.get("brokerActive") == "true").lower()]


def _first_tps(text: str | None) -> float:
    """The 10 s figure of a runtime TPS key (``putTps``: "tps10 tps60 tps600", parts empty while the broker
    has too few samples), as RocketMQ's clusterList reads it."""
    parts = (text or "").split(" ")
    return float(parts[0]) if parts and parts[0] else 0.0


async def broker_status(admin: Admin, args: argparse.Namespace) -> int:
    for addr in await _addrs(admin, args):
        for k, v in sorted((await admin.broker_runtime_info(addr)).items()):
            print(f"{k:<32}: {v}" if args.brokerAddr else f"{addr:<24} {k:<32}: {v}")
    return 0


async def get_broker_config(admin: Admin, args: argparse.Namespace) -> int:
    if args.brokerAddr:
        targets = [(f"============{args.brokerAddr}============", args.brokerAddr)]
    else:  # RocketMQ's -c: each master, then its slaves
        targets = []
        for master, slaves in await _masters_and_slaves(admin, args.clusterName):
            targets.append((f"============Master: {master}============", master))
            targets += [(f"============My Master: {master}=====Slave: {s}============", s) for s in slaves]
    for header, addr in targets:
        print(header)
        for k, v in sorted((await admin.broker_config(addr)).items()):
            print(f"{k:<50}=  {v}")
        print()
    return 0


async def update_broker_config(admin: Admin, args: argparse.Namespace) -> int:
    props = {args.key.strip(): args.value.strip()}
    for addr in await _addrs(admin, args):
        await admin.update_broker_config(addr, props)
        print(f"update broker config success, {addr}")
    return 0


async def clean_expired_cq(admin: Admin, args: argparse.Namespace) -> int:
    # without -b or -c: every master of every cluster, as RocketMQ's tool with no cluster
    addrs = [args.brokerAddr] if args.brokerAddr else sorted((await admin.master_addrs(args.cluster)).values())
    for addr in addrs:
        await admin.clean_expired_consume_queue(addr)
    print("success", end="")  # RocketMQ's printf, no newline
    return 0


async def update_kv_config(admin: Admin, args: argparse.Namespace) -> int:
    await admin.put_kv_config(args.namespace, args.key, args.value)
    print("create or update kv config to namespace success.")
    return 0


async def delete_kv_config(admin: Admin, args: argparse.Namespace) -> int:
    await admin.delete_kv_config(args.namespace, args.key)
    print("delete kv config from namespace success.")
    return 0
