"""The cluster page with replication: a master (standalone, its console) and a slave (``tidalmq broker``)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.console.support import http
from tests.ha.support import Slave, master_settings
from tests.support import Standalone, wait_for


def test_cluster_page_shows_master_and_slave_with_replication_state(tmp_path: Path) -> None:
    with Standalone(tmp_path / "m", master_settings("ASYNC_MASTER")) as master, \
            Slave(tmp_path / "s", master.namesrv_addr) as slave:

        def page_with_both() -> str | None:
            status, page = http(master.console_url + "/")
            rows = re.findall(r"<tr>(.*?)</tr>", page)
            slave_rows = [r for r in rows if slave.broker_addr in r]
            both = slave_rows and [r for r in rows if master.broker_addr in r]
            # the master counts its slave's HA connection, and the slave reports it is connected (each
            # broker's figures are read on their own: one can show the connection before the other)
            connected = both and "haConnections</code>=1" in page and "haConnectedToMaster</code>=true" in slave_rows[0]
            return page if status == 200 and connected else None

        page = wait_for(page_with_both, 30, 0.2, "the slave and its HA connection on the cluster page, from both ends")
        rows = {addr: r for r in re.findall(r"<tr>(.*?)</tr>", page)
                for addr in (master.broker_addr, slave.broker_addr) if addr in r}
        assert "<td>0</td>" in rows[master.broker_addr] and "ASYNC_MASTER" in rows[master.broker_addr]
        assert "<td>1</td>" in rows[slave.broker_addr] and "SLAVE" in rows[slave.broker_addr]
        assert "haMasterAddress</code>=127.0.0.1:" in rows[slave.broker_addr]
        assert "haConnectedToMaster</code>=true" in rows[slave.broker_addr]
