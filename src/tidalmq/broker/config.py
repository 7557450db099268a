"""BrokerConfig: RocketMQ's broker keys (snake_case here, camelCase in broker.conf)."""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass, field

from tidalmq.common import top_addressing as ta
from tidalmq.common.config import (
    JAVA_INT_MAX,
    Check,
    ConfigError,
    check_fields,
    in_range,
    one_of,
    port_in_range,
)
from tidalmq.common.naming import check_broker_name, check_cluster_name


def default_data_dir() -> str:
    return os.environ.get("TIDALMQ_HOME") or os.path.join(os.path.expanduser("~"), ".tidalmq")


@dataclass
class BrokerConfig:
    broker_name: str = socket.gethostname().split(".")[0] or "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    namesrv_addr: str = ""
    # No namesrvAddr: ask the NameServer address server for the list (broker/out/namesrv_lookup.py)
    fetch_namesrv_addr_by_address_server: bool = False
    rmq_address_server_domain: str = ta.DEFAULT_DOMAIN
    rmq_address_server_sub_group: str = ta.DEFAULT_SUBGROUP
    fetch_namesrv_addr_interval: int = int(ta.FETCH_INTERVAL_S * 1000)  # ms; RocketMQ's is fixed at 2 minutes
    broker_role: str = "ASYNC_MASTER"
    broker_permission: int = 6
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    # Long polling's bounds (broker/longpolling/pull_request_hold.py). RocketMQ's broker holds a pull as long as its
    # suspendTimeoutMillis says; here no longer than this (the clients send their brokerSuspendMaxTimeMillis,
    # 15-20 s, and give up on the pull after consumerTimeoutMillisWhenSuspend, 30 s).
    broker_suspend_max_time_millis: int = 30000
    # Pulls held at once by the whole broker; a pull that would be held past it is answered PULL_NOT_FOUND
    # at once (as a pull without the suspend flag). TidalMQ's key (RocketMQ has none for pulls; its pop
    # has maxPopPollingSize).
    max_held_pull_requests: int = 20000
    register_broker_timeout_mills: int = 24000
    register_name_server_period: int = 30000
    broker_not_active_timeout_millis: int = 120000
    flush_consumer_offset_interval: int = 5000
    channel_expired_timeout: int = 120000
    enable_property_filter: bool = False
    # Flow control (BrokerFastFailure, docs/broker.md "Flow control"): a send that waited in the broker
    # this long before its group commit, or found this many sends queued ahead of it, is answered
    # SYSTEM_BUSY at once instead of being left to time out at the client.
    broker_fast_failure_enable: bool = True
    wait_time_mills_in_send_queue: int = 200
    send_thread_pool_queue_capacity: int = 10000
    notify_consumer_ids_changed_enable: bool = True
    # Transactions (docs/transactions.md): a half message unresolved this long is checked back, every
    # transactionCheckInterval, at most transactionCheckMax times, then rolled back.
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60000
    reject_transaction_message: bool = False
    # RocketMQ 5 message types (docs/message-types.md). RocketMQ's broker never checks a send against its
    # topic's message.type; its proxy does (ProxyConfig.enableTopicMessageTypeCheck, true). Off here by
    # default so RocketMQ 4 clients sending delay messages to plain topics keep working.
    enable_topic_message_type_check: bool = False
    enable_mixed_message_type: bool = False  # message.type=MIXED refused at topic creation unless true
    # Priority messages (RocketMQ 5.4, docs/message-types.md): a pop of a PRIORITY topic reads its queues
    # from the highest id down (priorityOrderAsc=true: queue 0 is the lowest priority) or from 0 up (false),
    # and reads the group's retry topic first in this percentage of pops (else only to fill the batch).
    priority_order_asc: bool = True
    pop_from_retry_probability_for_priority: int = 0
    # RECALL_MESSAGE (RocketMQ 5.3): off by default, as RocketMQ's recallMessageEnable.
    recall_message_enable: bool = False
    allow_recall_when_broker_not_writeable: bool = True
    # Idempotent produce (broker/dedup.py, docs/spark.md "Exactly-once writes"): a send whose UNIQ_KEY was
    # stored within the window is answered with the original's result instead of being stored again.
    duplication_enable: bool = False
    duplication_window_seconds: int = 3600
    duplication_window_size: int = 10_000_000  # ~45 bytes of broker memory a key (broker/dedup_index.py)
    duplication_snapshot_interval_seconds: int = 10
    # Replication (docs/replication.md). brokerRole above: ASYNC_MASTER, SYNC_MASTER or SLAVE; a master's
    # brokerId is 0, a slave's >= 1. -1 for haListenPort means listenPort + 1 (RocketMQ's BrokerStartup
    # rule), 0 any free port; the NameServer tells slaves the address (brokerIP2, else brokerIP1).
    ha_listen_port: int = -1
    broker_ip2: str = ""
    # haListenHost (TidalMQ's key; RocketMQ binds the HA port on every interface): the address the HA port
    # binds; empty: the one slaves are told (brokerIP2, else brokerIP1), not every interface.
    ha_listen_host: str = ""
    # A slave's master, "host:haPort"; empty: the one the NameServer names (updateMasterHAServerAddrPeriodically).
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20000
    ha_transfer_batch_size: int = 32 * 1024
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    # Controller mode (docs/replication.md): the group elects its master through etcd. brokerId is then
    # the replica's own id (>= 1, unique in the group; a master registers as 0), brokerRole the flavour
    # of the master it becomes (SYNC_MASTER or ASYNC_MASTER); every replica starts as a slave.
    enable_controller_mode: bool = False
    controller_etcd_endpoints: str = ""
    # A replica whose lease etcd has not seen renewed for this long is dead (a master: a new one is elected).
    controller_lease_ttl_seconds: int = 3
    # The master drops from the SyncStateSet a replica that has not caught up for this long
    # (RocketMQ 5's haMaxTimeSlaveNotCatchup).
    sync_state_set_max_lag_ms: int = 15000
    # What a SYNC_MASTER waits for in controller mode (RocketMQ 5's MessageStoreConfig keys; counts include the
    # master). allAckInSyncStateSet: every replica in the SyncStateSet; else inSyncReplicas, lowered to the
    # SyncStateSet's size (not below minInSyncReplicas) with enableAutoInSyncReplicas. A send is refused
    # ("in-sync replicas not enough", nothing stored) while the SyncStateSet is smaller than minInSyncReplicas.
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    enable_auto_in_sync_replicas: bool = False
    # Reads from slaves: the master suggests the slave (whichBrokerWhenConsumeSlowly) to a pull that is
    # far behind; the slave suggests the group's brokerId.
    slave_read_enable: bool = False
    # ACL 1.0 (docs/acl.md): check every request against plain_acl.yml; the file's path
    # (broker.conf key rocketmq.acl.plain.file, relative to $ROCKETMQ_HOME or the data directory).
    acl_enable: bool = False
    acl_plain_file: str = ""
    # With ACL on, large chunks of signed requests have their signatures (HMAC-SHA1 over the whole body)
    # checked in a child process beside the event loop (docs/acl.md, "Cost"); false: all on the loop.
    acl_signature_worker_enable: bool = True
    # The account this broker signs its NameServer requests with (REGISTER_BROKER ...).
    # Prometheus endpoints (RocketMQ 5's keys, docs/metrics.md). DISABLE binds nothing; the standalone turns
    # PROM on unless told otherwise. An empty host is 127.0.0.1: metrics are not exposed beyond the machine
    # unless asked. The NameServer beside a standalone gets its own port (namesrvMetricsPromExporterPort).
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = 5557
    namesrv_metrics_prom_exporter_port: int = 5558
    access_key: str = ""
    secret_key: str = field(default="", metadata={"secret": True})

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    @property
    def ha_server_addr(self) -> str:
        """Where slaves connect (the registration's haServerAddr), once the HA port is known."""
        port = self.listen_port + 1 if self.ha_listen_port < 0 else self.ha_listen_port
        return f"{self.broker_ip2 or self.broker_ip1}:{port}"

    def validate(self) -> None:
        """Refuse values the broker cannot run with (``ConfigError`` names the key and what is allowed)."""
        check_fields(self, _CHECKS)
        if self.fetch_namesrv_addr_by_address_server:
            try:
                ta.ws_addr(self.rmq_address_server_domain, self.rmq_address_server_sub_group)
            except ta.AddressServerError as e:
                raise ConfigError(f"fetchNamesrvAddrByAddressServer=true: {e}") from None
            if self.fetch_namesrv_addr_interval < 1000:
                raise ConfigError(f"fetchNamesrvAddrInterval={self.fetch_namesrv_addr_interval}: at least 1000 ms")
        for key, value, check in (("brokerName", self.broker_name, check_broker_name),
                                  ("brokerClusterName", self.broker_cluster_name, check_cluster_name)):
            try:
                check(value)
            except ValueError as e:  # naming's checks: what RocketMQ's topic validator says of a name
                raise ConfigError(f"{key}={value!r}: {e}") from None
        for key, ip in (("brokerIP1", self.broker_ip1), ("brokerIP2", self.broker_ip2)):
            if ip or key == "brokerIP1":
                try:
                    ipaddress.ip_address(ip)
                except ValueError:
                    raise ConfigError(f"{key}={ip!r}: not an IPv4 or IPv6 address") from None
        if self.enable_controller_mode:
            if self.broker_id < 1:
                raise ConfigError("enableControllerMode=true needs brokerId >= 1: the replica's own id in its group")
            if not self.controller_etcd_endpoints:
                raise ConfigError("enableControllerMode=true needs controllerEtcdEndpoints (http://host:port;...)")
            if self.ha_listen_port == 0:
                raise ConfigError("enableControllerMode=true needs a fixed haListenPort (or -1: listenPort+1): "
                                  "the group's record names it before the HA port is bound")
            if self.is_slave:
                raise ConfigError("enableControllerMode=true: brokerRole names the master's flavour "
                                  "(SYNC_MASTER or ASYNC_MASTER); the controller decides who is a slave")
        elif self.is_slave and self.broker_id < 1:
            raise ConfigError("brokerId=0 with brokerRole=SLAVE: a slave's brokerId must be >= 1 (0 is the master's)")


_CHECKS: dict[str, Check] = {
    "broker_role": one_of("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
    "broker_id": in_range(0, 2**63 - 1),
    "listen_port": port_in_range(),
    "metrics_exporter_type": one_of("DISABLE", "PROM"),
    "metrics_prom_exporter_port": port_in_range(),
    "namesrv_metrics_prom_exporter_port": port_in_range(),
    "ha_listen_port": port_in_range(-1),
    "ha_send_heartbeat_interval": in_range(1, JAVA_INT_MAX),
    "ha_housekeeping_interval": in_range(1, JAVA_INT_MAX),
    "ha_transfer_batch_size": in_range(1, JAVA_INT_MAX),
    "ha_max_gap_not_in_sync": in_range(1, 2**63 - 1),
    "controller_lease_ttl_seconds": in_range(2, 3600),
    "sync_state_set_max_lag_ms": in_range(1, JAVA_INT_MAX),
    "in_sync_replicas": in_range(1, 64),
    "min_in_sync_replicas": in_range(1, 64),
    "broker_permission": in_range(0, 7),  # PermName's bits: 4 read, 2 write, 1 inherit
    "default_topic_queue_nums": in_range(1, 1024),
    "flush_consumer_offset_interval": in_range(1, JAVA_INT_MAX),
    "channel_expired_timeout": in_range(1, JAVA_INT_MAX),
    "wait_time_mills_in_send_queue": in_range(1, JAVA_INT_MAX),
    "send_thread_pool_queue_capacity": in_range(1, JAVA_INT_MAX),
    "broker_suspend_max_time_millis": in_range(0, JAVA_INT_MAX),
    "max_held_pull_requests": in_range(0, JAVA_INT_MAX),
    "transaction_check_max": in_range(0, JAVA_INT_MAX),
    "transaction_check_interval": in_range(1, JAVA_INT_MAX),
    "duplication_window_seconds": in_range(1, JAVA_INT_MAX),
    "duplication_window_size": in_range(1, JAVA_INT_MAX),
    "duplication_snapshot_interval_seconds": in_range(1, JAVA_INT_MAX),
}
