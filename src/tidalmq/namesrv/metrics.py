"""The NameServer's Prometheus metrics (docs/metrics.md): live brokers, topics, connections, and
``rocketmq_rpc_latency`` of the requests it serves. Read at scrape time, snapshot taken on its loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

from tidalmq.common.config import check_fields, in_range, one_of
from tidalmq.common.metrics_exporter import PromExporter, on_loop
from tidalmq.remoting.rpc_stats import RpcLatencyStats, rpc_latency_family

if TYPE_CHECKING:
    from tidalmq.namesrv.server import NameServer


@dataclass
class NamesrvMetricsConfig:
    """``tidalmq namesrv``'s metrics keys: RocketMQ 5's broker names, the NameServer's own default port."""

    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = 5558

    def validate(self) -> None:
        check_fields(self, {"metrics_exporter_type": one_of("DISABLE", "PROM"),
                            "metrics_prom_exporter_port": in_range(0, 65535)})


def _snapshot(ns: NameServer) -> tuple[dict[str, float], dict[tuple[int, int], list[float]]]:
    routes = ns.routes
    rpc = ns.server.rpc_stats
    gauges: dict[str, float] = {
        "tidalmq_namesrv_live_brokers": len(routes.broker_live_table),
        "tidalmq_namesrv_topics": len(routes.topic_queue_table),
        "tidalmq_namesrv_connections": len(ns.server.connections),
    }
    return gauges, rpc.snapshot() if rpc is not None else {}


def _families(gauges: dict[str, float], rpc: dict[tuple[int, int], list[float]]) -> Iterable[Metric]:
    common = {"node_type": "namesrv"}
    docs = {"tidalmq_namesrv_live_brokers": "Brokers whose registration is live",
            "tidalmq_namesrv_topics": "Topics with a route", "tidalmq_namesrv_connections": "Open connections"}
    for name, value in gauges.items():
        fam = GaugeMetricFamily(name, docs[name], labels=list(common))
        fam.add_metric(list(common.values()), value)
        yield fam
    yield rpc_latency_family(common, rpc)


def start_namesrv_exporter(ns: NameServer, exporter_type: str, host: str, port: int,
                           key: str = "metricsPromExporterPort") -> PromExporter | None:
    """Call on the NameServer's loop, after start; ``exporter_type`` is DISABLE or PROM (validated)."""
    if exporter_type != "PROM":
        return None
    loop = asyncio.get_running_loop()
    ns.server.rpc_stats = RpcLatencyStats()
    exporter = PromExporter(host, port, lambda: _families(*on_loop(loop, lambda: _snapshot(ns))), key)
    exporter.start()
    return exporter
