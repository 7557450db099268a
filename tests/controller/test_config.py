"""Controller mode's keys are checked at start (broker/config.py)."""

from __future__ import annotations

import pytest


def test_controller_mode_keys_are_checked() -> None:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.common.config import ConfigError

    ok = dict(enable_controller_mode=True, controller_etcd_endpoints="http://127.0.0.1:2379", broker_id=1,
              broker_role="SYNC_MASTER")
    BrokerConfig(**ok).validate()  # type: ignore[arg-type]
    for bad, why in ((dict(broker_id=0), "brokerId >= 1"), (dict(controller_etcd_endpoints=""), "controllerEtcdEndpoints"),
                     (dict(broker_role="SLAVE"), "brokerRole"), (dict(ha_listen_port=0), "haListenPort")):
        with pytest.raises(ConfigError, match=why):
            BrokerConfig(**{**ok, **bad}).validate()  # type: ignore[arg-type]


def test_in_sync_replica_counts_are_checked() -> None:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.common.config import ConfigError

    BrokerConfig(in_sync_replicas=3, min_in_sync_replicas=2).validate()
    for bad in (dict(in_sync_replicas=0), dict(min_in_sync_replicas=0)):
        with pytest.raises(ConfigError):
            BrokerConfig(**bad).validate()  # type: ignore[arg-type]
