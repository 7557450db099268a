"""Stopping the HA service while slaves are connected logs no error: their handlers end by returning, not
cancelled (Python 3.11's start_server logs a traceback for a cancelled one)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.broker.rawclient import run
from tests.client.helpers import wait_until
from tests.support import collect_loop_errors
from tidalmq.broker.config import BrokerConfig
from tidalmq.ha.service import HAService


class _Store:
    """What HAService.start and a silent slave's connection touch of the store."""

    def add_arrival_listener(self, listener: Any) -> None:
        pass


def test_stopping_the_ha_service_with_a_slave_connected_logs_no_error() -> None:
    async def body() -> None:
        errors = collect_loop_errors()
        svc = HAService(BrokerConfig(), store=_Store(), sync_flush_timeout_ms=100)  # type: ignore[arg-type]
        await svc.start(0)
        _reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
        await wait_until(lambda: svc.connections, 10, "the slave's connection")
        await svc.stop()
        assert not svc.connections
        assert errors == []
        writer.close()

    run(body(), timeout=30)
