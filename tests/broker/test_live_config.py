"""broker/live_config.py without a broker: which keys UPDATE_BROKER_CONFIG takes, and how it rewrites broker.conf."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidalmq.broker.config import BrokerConfig
from tidalmq.broker.live_config import apply_live, checked_update, persist
from tidalmq.common.config import ConfigError
from tidalmq.store.config import MessageStoreConfig


def test_a_replica_waiting_for_election_takes_live_keys() -> None:
    # a controller-mode replica runs as SLAVE until elected, which start-up's checks would refuse
    bc = BrokerConfig(enable_controller_mode=True, broker_role="SLAVE", broker_id=1)
    sc = MessageStoreConfig()
    new_bc, new_sc = checked_update(bc, sc, {"slaveReadEnable": "true", "maxMessageSize": "2048"}, 1 << 24)
    apply_live(bc, sc, new_bc, new_sc, ["slaveReadEnable", "maxMessageSize"])
    assert bc.slave_read_enable and sc.max_message_size == 2048 and bc.broker_role == "SLAVE"
    with pytest.raises(ConfigError, match="waitTimeMillsInSendQueue=0"):
        checked_update(bc, sc, {"waitTimeMillsInSendQueue": "0"}, 1 << 24)


def test_persist_rewrites_lines_in_place_and_appends_new_keys(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("! kept\nbrokerPermission = 6\nlisten: 1\n")
    persist(conf, {"brokerPermission": "4", "slaveReadEnable": "true"})
    assert conf.read_text() == "! kept\nbrokerPermission=4\nlisten: 1\nslaveReadEnable=true\n"
