"""The broker keys replication reads (RocketMQ keeps them in its store's and broker's configs).

A Protocol, so that ha/ stays below broker/: the broker hands its BrokerConfig, which has them all, and
the HA services read them live (UPDATE_BROKER_CONFIG may change the in-sync rules while they run)."""

from __future__ import annotations

from typing import Protocol


class HAConfig(Protocol):
    broker_id: int
    broker_ip1: str
    broker_ip2: str
    ha_listen_host: str
    ha_send_heartbeat_interval: int
    ha_housekeeping_interval: int
    ha_transfer_batch_size: int
    enable_controller_mode: bool
    in_sync_replicas: int
    min_in_sync_replicas: int
    enable_auto_in_sync_replicas: bool
    all_ack_in_sync_state_set: bool
