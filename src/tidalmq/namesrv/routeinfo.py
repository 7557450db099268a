"""The route table (RouteInfoManager): pure state, no sockets, so it is tested alone."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

PERM_PRIORITY = 0x1 << 3
PERM_READ = 0x1 << 2
PERM_WRITE = 0x1 << 1
PERM_INHERIT = 0x1 << 0
MASTER_ID = 0

ORDER_TOPIC_CONFIG_NAMESPACE = "ORDER_TOPIC_CONFIG"
BROKER_CHANNEL_EXPIRED_MS = 120_000


@dataclass
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSysFlag": self.topic_sys_flag,
        }


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "brokerName": self.broker_name, "brokerAddrs": dict(self.broker_addrs)}


@dataclass
class BrokerLiveInfo:
    last_update_ms: int
    data_version: dict[str, Any]
    ha_server_addr: str
    timeout_ms: int = BROKER_CHANNEL_EXPIRED_MS
    conn: Any = None


class RouteInfoManager:
    def __init__(self, clock: Any = None) -> None:
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.RLock()
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.kv: dict[str, dict[str, str]] = {}

    # registration -----------------------------------------------------------------------------
    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_configs: dict[str, dict[str, Any]],
        data_version: dict[str, Any],
        conn: Any = None,
        timeout_ms: int = BROKER_CHANNEL_EXPIRED_MS,
    ) -> tuple[str, str]:
        """Register or refresh a broker; returns (master HA address, master address) for slaves."""
        with self._lock:
            self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
            bd = self.broker_addr_table.get(broker_name)
            if bd is None:
                bd = BrokerData(cluster, broker_name)
                self.broker_addr_table[broker_name] = bd
            # An address registered under another id (a slave promoted) is dropped first.
            for bid, addr in list(bd.broker_addrs.items()):
                if addr == broker_addr and bid != broker_id:
                    del bd.broker_addrs[bid]
            bd.broker_addrs[broker_id] = broker_addr
            if broker_id == MASTER_ID:
                # The master's topic table is authoritative for its queue data (every heartbeat).
                self._apply_topics(broker_name, topic_configs)
            self.broker_live_table[broker_addr] = BrokerLiveInfo(
                self._clock(), data_version, ha_server_addr, timeout_ms, conn
            )
            if broker_id != MASTER_ID:
                master = bd.broker_addrs.get(MASTER_ID)
                if master:
                    live = self.broker_live_table.get(master)
                    return (live.ha_server_addr if live else "", master)
            return ("", "")

    def _apply_topics(self, broker_name: str, topic_configs: dict[str, dict[str, Any]]) -> None:
        for topic, tc in topic_configs.items():
            qd = QueueData(
                broker_name,
                int(tc.get("readQueueNums", 0)),
                int(tc.get("writeQueueNums", 0)),
                int(tc.get("perm", PERM_READ | PERM_WRITE)),
                int(tc.get("topicSysFlag", 0)),
            )
            self.topic_queue_table.setdefault(topic, {})[broker_name] = qd
        # Topics the master no longer has are removed from its queue data.
        for topic in list(self.topic_queue_table):
            if topic not in topic_configs and broker_name in self.topic_queue_table[topic]:
                del self.topic_queue_table[topic][broker_name]
                if not self.topic_queue_table[topic]:
                    del self.topic_queue_table[topic]

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        with self._lock:
            self.broker_live_table.pop(broker_addr, None)
            bd = self.broker_addr_table.get(broker_name)
            removed_name = False
            if bd is not None:
                if bd.broker_addrs.get(broker_id) == broker_addr:
                    del bd.broker_addrs[broker_id]
                if not bd.broker_addrs:
                    del self.broker_addr_table[broker_name]
                    removed_name = True
            if removed_name:
                names = self.cluster_addr_table.get(cluster)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.cluster_addr_table[cluster]
                self._remove_topics_of(broker_name)

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            qds = self.topic_queue_table[topic]
            qds.pop(broker_name, None)
            if not qds:
                del self.topic_queue_table[topic]

    def scan_not_active_brokers(self) -> list[str]:
        """Expire brokers whose last heartbeat is older than their timeout (120 s)."""
        now = self._clock()
        expired: list[str] = []
        with self._lock:
            for addr, live in list(self.broker_live_table.items()):
                if now - live.last_update_ms > live.timeout_ms:
                    expired.append(addr)
            for addr in expired:
                self.on_broker_gone(addr)
        return expired

    def on_broker_gone(self, broker_addr: str) -> None:
        with self._lock:
            self.broker_live_table.pop(broker_addr, None)
            for name, bd in list(self.broker_addr_table.items()):
                for bid, addr in list(bd.broker_addrs.items()):
                    if addr == broker_addr:
                        self.unregister_broker(bd.cluster, addr, name, bid)

    def broker_addr_of_conn(self, conn: Any) -> str | None:
        with self._lock:
            for addr, live in self.broker_live_table.items():
                if live.conn is conn:
                    return addr
        return None

    # queries ----------------------------------------------------------------------------------
    def pickup_topic_route(self, topic: str) -> dict[str, Any] | None:
        with self._lock:
            qds = self.topic_queue_table.get(topic)
            if not qds:
                return None
            brokers = [self.broker_addr_table[n] for n in qds if n in self.broker_addr_table]
            if not brokers:
                return None
            route: dict[str, Any] = {
                "queueDatas": [qd.to_json() for qd in qds.values()],
                "brokerDatas": [bd.to_json() for bd in brokers],
                "filterServerTable": {},
            }
            order = self.kv.get(ORDER_TOPIC_CONFIG_NAMESPACE, {}).get(topic)
            if order:
                route["orderTopicConf"] = order
            return route

    def cluster_info(self) -> dict[str, Any]:
        with self._lock:
            return {
                "brokerAddrTable": {n: bd.to_json() for n, bd in self.broker_addr_table.items()},
                "clusterAddrTable": {c: sorted(ns) for c, ns in self.cluster_addr_table.items()},
            }

    def all_topics(self) -> list[str]:
        with self._lock:
            return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        with self._lock:
            names = self.cluster_addr_table.get(cluster, set())
            return sorted(t for t, qds in self.topic_queue_table.items() if names & qds.keys())

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        with self._lock:
            if cluster is None:
                self.topic_queue_table.pop(topic, None)
                return
            names = self.cluster_addr_table.get(cluster, set())
            qds = self.topic_queue_table.get(topic, {})
            for n in names:
                qds.pop(n, None)
            if not qds:
                self.topic_queue_table.pop(topic, None)

    # KV config --------------------------------------------------------------------------------
    def put_kv(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self.kv.setdefault(namespace, {})[key] = value

    def get_kv(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self.kv.get(namespace, {}).get(key)

    def delete_kv(self, namespace: str, key: str) -> None:
        with self._lock:
            ns = self.kv.get(namespace)
            if ns is not None:
                ns.pop(key, None)
                if not ns:
                    del self.kv[namespace]

    def kv_list(self, namespace: str) -> dict[str, str]:
        with self._lock:
            return dict(self.kv.get(namespace, {}))
