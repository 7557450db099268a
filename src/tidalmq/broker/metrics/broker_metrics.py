"""The broker's Prometheus metrics (RocketMQ 5's names where it has them, docs/metrics.md).

Nothing here runs per message: the send and pull paths already count into the broker's stats items
(broker/stats.py, ``BrokerController.stats_put``/``stats_get``), the remoting server into ``RpcLatencyStats``. At scrape
time ``BrokerMetrics.snapshot`` copies what the loop owns (on the loop, ``on_loop``) and ``families`` turns the
copy into metric families on the exporter's thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from tidalmq.broker.stats import GROUP_GET_NUMS, GROUP_GET_SIZE, TOPIC_PUT_NUMS, TOPIC_PUT_SIZE
from tidalmq.common.metrics_exporter import PromExporter, on_loop
from tidalmq.common.naming import SCHEDULE_TOPIC
from tidalmq.remoting.rpc_stats import RpcLatencyStats, rpc_latency_family
from tidalmq.schedule.stats import LATENESS_BUCKETS_MS

if TYPE_CHECKING:
    from tidalmq.broker.client.consumer_manager import ClientChannelInfo, ConsumerManager
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.broker.replication import BrokerReplication
    from tidalmq.broker.schedule.services import ScheduleServices
    from tidalmq.broker.stats import BrokerStats
    from tidalmq.remoting.transport import Connection, RemotingServer
    from tidalmq.store.api import MessageStore

LATENESS_QUANTILES = (("0.5", "latenessP50Ms"), ("0.99", "latenessP99Ms"), ("1", "latenessMaxMs"))


@dataclass
class BrokerSnapshot:
    put_counts: dict[str, int]
    put_bytes: dict[str, int]
    get_counts: dict[str, int]  # "topic@group" (RocketMQ's stats key) -> messages
    get_bytes: dict[str, int]
    lag: dict[tuple[str, str], int]  # (topic, consumer group) -> messages not consumed yet
    producer_connections: dict[str, int]
    consumer_connections: dict[str, int]
    rpc: dict[tuple[int, int], list[float]]
    flush_behind: int
    dispatch_behind: int
    disk_full: bool
    delay_pending: dict[int, int]
    delay_stats: dict[str, Any]
    timer: dict[str, Any] | None
    ha_behind: int | None  # master: bytes its furthest-behind slave lacks (None: no slave, or not a master)
    store_root: str = ""
    common: dict[str, str] = field(default_factory=dict)


class BrokerMetrics:
    """What the exporter reads of the broker, each part handed in."""

    def __init__(self, config: BrokerConfig, server: RemotingServer, store: MessageStore, stats: BrokerStats,
                 offsets: ConsumerOffsetManager, consumers: ConsumerManager,
                 producers: dict[str, dict[Connection, ClientChannelInfo]], scheduled: ScheduleServices,
                 replication: BrokerReplication) -> None:
        self.config = config
        self.server = server
        self.store = store
        self.stats = stats
        self.offsets = offsets
        self.consumers = consumers
        self.producers = producers
        self.scheduled = scheduled
        self.replication = replication

    def _value(self, name: str, key: str) -> int:
        item = self.stats.item(name, key)
        return item.value if item is not None else 0

    def consumer_lag(self) -> dict[tuple[str, str], int]:
        """Per (topic, group): the messages in the queues past the group's committed offsets."""
        out: dict[tuple[str, str], int] = {}
        store, offsets = self.store, self.offsets
        for group in offsets.all_groups():
            for topic in offsets.topics_of_group(group):
                lag = 0
                for queue_id, offset in offsets.offsets_of(group, topic).items():
                    lag += max(0, store.get_max_offset_in_queue(topic, queue_id) - offset)
                out[(topic, group)] = lag
        return out

    def snapshot(self) -> BrokerSnapshot:
        """Everything the metrics read, copied: call on the broker's loop."""
        store, stats = self.store, self.stats
        rpc = self.server.rpc_stats
        ha_behind = None
        ha = self.replication.ha_service
        if ha is not None and ha.connections:
            ha_behind = max(0, store.max_phy_offset - ha.push2slave_max_offset)
        scheduled = self.scheduled
        timer = scheduled.timer.snapshot(ask_fresh=True) if scheduled.timer is not None else None
        cfg = self.config
        return BrokerSnapshot(
            put_counts=stats.per_topic(TOPIC_PUT_NUMS), put_bytes=stats.per_topic(TOPIC_PUT_SIZE),
            get_counts=stats.per_key(GROUP_GET_NUMS), get_bytes=stats.per_key(GROUP_GET_SIZE),
            lag=self.consumer_lag(),
            producer_connections={g: len(conns) for g, conns in self.producers.items()},
            consumer_connections={g: len(info.channels) for g, info in self.consumers.groups.items()},
            rpc=rpc.snapshot() if rpc is not None else {},
            flush_behind=store.flush_behind_bytes(),
            dispatch_behind=store.dispatch_behind_bytes(),
            disk_full=bool(store.disk_full),
            delay_pending=scheduled.schedule.pending(),
            # delay levels count deliveries only; their enqueues are the stores into SCHEDULE_TOPIC_XXXX
            delay_stats={**scheduled.schedule_stats.snapshot(), "enqueued": self._value(TOPIC_PUT_NUMS, SCHEDULE_TOPIC),
                         "latenessHistogram": scheduled.schedule_stats.lateness_histogram()},
            timer=timer, ha_behind=ha_behind, store_root=store.config.store_path_root_dir,
            common={"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name},
        )

    def start_exporter(self) -> PromExporter | None:
        """The broker's endpoint when ``metricsExporterType=PROM`` (call on the broker's loop, after start)."""
        cfg = self.config
        if cfg.metrics_exporter_type != "PROM":
            return None
        loop = asyncio.get_running_loop()
        self.server.rpc_stats = RpcLatencyStats()
        exporter = PromExporter(cfg.metrics_prom_exporter_host, cfg.metrics_prom_exporter_port,
                                lambda: families(on_loop(loop, self.snapshot)))
        exporter.start()
        return exporter


def disk_usage_bytes(root: str) -> int:
    """Bytes the store's files take on disk (allocated blocks: preallocated CommitLog files count whole)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:  # deleted between the listing and the stat (cleanup): not there any more
                pass
    return total


def families(s: BrokerSnapshot) -> Iterable[Metric]:
    base, lv = list(s.common), list(s.common.values())

    def per_topic(name: str, doc: str, data: dict[str, int]) -> Metric:
        fam = CounterMetricFamily(name.removesuffix("_total"), doc, labels=[*base, "topic"])
        for topic, n in sorted(data.items()):
            fam.add_metric([*lv, topic], n)
        return fam

    def per_group(name: str, doc: str, data: dict[str, int]) -> Metric:
        fam = CounterMetricFamily(name.removesuffix("_total"), doc, labels=[*base, "topic", "consumer_group"])
        for key, n in sorted(data.items()):
            topic, _, group = key.partition("@")
            fam.add_metric([*lv, topic, group], n)
        return fam

    yield per_topic("rocketmq_messages_in_total", "Messages stored, by topic", s.put_counts)
    yield per_group("rocketmq_messages_out_total", "Messages delivered by pulls and pops, by topic and group",
                    s.get_counts)
    yield per_topic("rocketmq_throughput_in_total", "Bytes stored (CommitLog records), by topic", s.put_bytes)
    yield per_group("rocketmq_throughput_out_total", "Bytes delivered by pulls and pops, by topic and group",
                    s.get_bytes)
    lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Messages past the group's committed offset",
                            labels=[*base, "topic", "consumer_group"])
    for (topic, group), n in sorted(s.lag.items()):
        lag.add_metric([*lv, topic, group], n)
    yield lag
    # RocketMQ labels consumer connections by consumer_group; producers have no group label there, so
    # producer_group is ours
    for name, data, label in (("rocketmq_producer_connections", s.producer_connections, "producer_group"),
                              ("rocketmq_consumer_connections", s.consumer_connections, "consumer_group")):
        fam = GaugeMetricFamily(name, "Client connections, by group", labels=[*base, label])
        for group, n in sorted(data.items()):
            fam.add_metric([*lv, group], n)
        yield fam
    yield rpc_latency_family(s.common, s.rpc)
    for name, doc, value in (
        ("rocketmq_storage_size", "Bytes the store's files take on disk", disk_usage_bytes(s.store_root)),
        ("rocketmq_storage_flush_behind_bytes", "CommitLog bytes written but not flushed", s.flush_behind),
        ("rocketmq_storage_dispatch_behind_bytes", "CommitLog bytes not yet dispatched to the queues",
         s.dispatch_behind),
        ("tidalmq_storage_disk_full", "1 while the store refuses writes for lack of disk", int(s.disk_full)),
    ):
        fam = GaugeMetricFamily(name, doc, labels=base)
        fam.add_metric(lv, value)
        yield fam
    yield from schedule_families(s, base, lv)
    if s.ha_behind is not None:
        fam = GaugeMetricFamily("tidalmq_ha_slave_fall_behind_bytes", "CommitLog bytes the furthest-behind "
                                "slave has not acknowledged", labels=base)
        fam.add_metric(lv, s.ha_behind)
        yield fam


def schedule_families(s: BrokerSnapshot, base: list[str], lv: list[str]) -> Iterable[Metric]:
    enq = CounterMetricFamily("rocketmq_timer_enqueue", "Scheduled messages taken in", labels=[*base, "service"])
    deq = CounterMetricFamily("rocketmq_timer_dequeue", "Scheduled messages delivered", labels=[*base, "service"])
    pending = GaugeMetricFamily("tidalmq_schedule_pending_messages", "Scheduled messages waiting, by due-time "
                                "bucket (timer) or delay level", labels=[*base, "service", "bucket"])
    late = GaugeMetricFamily("tidalmq_schedule_lateness_ms", "Delivery lateness over the recent window",
                             labels=[*base, "service", "quantile"])
    late_hist = HistogramMetricFamily("tidalmq_schedule_delivery_lateness_ms", "Deliveries by how late they were "
                                      "(ms after their due time; early ones in the first bucket)",
                                      labels=[*base, "service"])
    sources: list[tuple[str, dict[str, Any]]] = [("delay_level", s.delay_stats)]
    for level, n in sorted(s.delay_pending.items()):
        pending.add_metric([*lv, "delay_level", f"level{level}"], n)
    if s.timer is not None:
        sources.append(("timer", s.timer))
        for bucket, n in s.timer.get("histogram", {}).items():
            pending.add_metric([*lv, "timer", bucket], n)
        cancels = CounterMetricFamily("tidalmq_timer_cancels", "Timer cancels applied", labels=base)
        cancels.add_metric(lv, s.timer.get("cancels", 0))
        yield cancels
        timing = GaugeMetricFamily("rocketmq_timing_messages", "Timer messages waiting", labels=base)
        timing.add_metric(lv, max(0, s.timer.get("pending", 0)))
        yield timing
    for service, stats in sources:
        enq.add_metric([*lv, service], stats.get("enqueued", 0))
        deq.add_metric([*lv, service], stats.get("delivered", 0))
        for q, key in LATENESS_QUANTILES:
            late.add_metric([*lv, service, q], stats.get(key, 0))
        hist = stats.get("latenessHistogram")
        if hist:
            late_hist.add_metric([*lv, service], cumulative_buckets(hist["buckets"]), hist["sumMs"])
    yield from (enq, deq, pending, late, late_hist)


def cumulative_buckets(counts: list[int]) -> list[tuple[str, float]]:
    """Prometheus's ``le`` buckets from per-bucket counts over LATENESS_BUCKETS_MS (+ the rest)."""
    out, total = [], 0
    for le, n in zip([*map(str, LATENESS_BUCKETS_MS), "+Inf"], counts, strict=True):
        total += n
        out.append((le, float(total)))
    return out
