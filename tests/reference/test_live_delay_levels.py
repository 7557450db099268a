"""Apache's mqadmin (RocketMQ 5.4's tools) changes TidalMQ's messageDelayLevel at run time, and is told when
TidalMQ refuses a table (docs/scheduled-delivery.md, "Live delay levels")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.reference.apache import mqadmin
from tests.support import Standalone
from tidalmq.client.admin import Admin
from tidalmq.client.message import Message
from tidalmq.client.producer import Producer

pytestmark = [pytest.mark.reference, pytest.mark.timeout(300)]


def _levels(s: Standalone) -> str:
    async def get() -> str:
        async with Admin(s.namesrv_addr) as admin:
            return (await admin.broker_config(s.broker_addr))["messageDelayLevel"]
    return asyncio.run(get())


def test_apache_mqadmin_updates_the_delay_levels(rocketmq_jars: Path, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=1s 8s\n")

    class FromFile(Standalone):
        def command(self) -> list[str]:
            return [*super().command(), "-c", str(conf)]

    with FromFile(tmp_path / "data") as s:
        def update(levels: str) -> str:
            out = mqadmin(rocketmq_jars, tmp_path / "home", ["updateBrokerConfig", "-n", s.namesrv_addr, "-b",
                                                             s.broker_addr, "-k", "messageDelayLevel", "-v", levels])
            return out.stdout + out.stderr

        assert f"update broker config success, {s.broker_addr}" in update("1s 10s 1d")
        assert _levels(s) == "1s 10s 1d" and conf.read_text() == "messageDelayLevel=1s 10s 1d\n"

        async def park() -> None:
            async with Admin(s.namesrv_addr) as admin:
                await admin.create_topic("RefLiveLevels", 1)
            async with Producer("PID_RefLive", s.namesrv_addr) as p:
                assert (await p.send(Message("RefLiveLevels", b"held", delay_level=2))).ok  # due in 10 s

        asyncio.run(park())
        refused = update("1s 2s 1d")
        assert "delay level 2 (10s) holds messages due until" in refused, refused
        assert _levels(s) == "1s 10s 1d"
