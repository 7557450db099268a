"""The Prometheus endpoints of a real standalone, scraped over HTTP as Prometheus would (docs/metrics.md)."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.broker.rawclient import pull_cmd, records, run, send_cmd
from tests.support import ModuleTmp, Standalone, wait_for
from tidalmq.client import Admin, Message, Producer
from tidalmq.common import message as mc
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    s = Standalone(module_tmp("metrics") / "data",
                   {"messageDelayLevel": "1s 2s", "timerPrecisionMs": "100",
                    "mappedFileSizeCommitLog": str(8 << 20)})
    with s:
        yield s


def commit(c: RemotingClient, addr: str, group: str, topic: str, offset: int) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
        "consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": str(offset)})


def test_in_out_totals_and_lag_move_as_messages_flow(broker: Standalone) -> None:
    n, topic, group, body = 20, "MetricsFlow", "MetricsCG", b"m" * 100
    before = scrape(broker.metrics_url)

    async def produce() -> None:
        c = RemotingClient()
        try:
            for _ in range(n):
                assert (await c.invoke(broker.broker_addr, send_cmd(topic, body), 5)).code == ResponseCode.SUCCESS
            assert (await c.invoke(broker.broker_addr, commit(c, broker.broker_addr, group, topic, 0), 5)).code == 0
        finally:
            await c.close()

    run(produce(), 30)
    mid = scrape(broker.metrics_url)
    assert value(mid, "rocketmq_messages_in_total", topic=topic) - value(before, "rocketmq_messages_in_total", topic=topic) == n
    assert value(mid, "rocketmq_throughput_in_total", topic=topic) >= n * len(body)
    assert value(mid, "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group) == n
    # every send was timed: the histogram's count for the send code moved by n, its buckets are cumulative
    code = "send_message_v2"
    assert value(mid, "rocketmq_rpc_latency_count", request_code=code, response_code="success") - \
        value(before, "rocketmq_rpc_latency_count", request_code=code, response_code="success") == n
    assert value(mid, "rocketmq_rpc_latency_bucket", request_code=code, le="+Inf") == \
        value(mid, "rocketmq_rpc_latency_count", request_code=code)

    async def consume() -> None:
        c = RemotingClient()
        try:
            got = 0
            while got < n:
                r = await c.invoke(broker.broker_addr, pull_cmd(topic, 0, got, group=group), 5)
                assert r.code == ResponseCode.SUCCESS
                got += len(records(r.body_bytes()))
            assert (await c.invoke(broker.broker_addr, commit(c, broker.broker_addr, group, topic, n), 5)).code == 0
        finally:
            await c.close()

    run(consume(), 30)
    after = scrape(broker.metrics_url)
    assert value(after, "rocketmq_messages_out_total", topic=topic) == n
    assert value(after, "rocketmq_messages_out_total", topic=topic, consumer_group=group) == n  # by group too
    assert value(after, "rocketmq_throughput_out_total", topic=topic) >= n * len(body)
    assert value(after, "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group) == 0
    assert value(after, "rocketmq_storage_size") > 0
    assert value(after, "tidalmq_storage_disk_full") == 0


def test_scheduled_pending_moves_with_delayed_messages(broker: Standalone) -> None:
    topic = "MetricsDelay"

    async def produce() -> None:
        c = RemotingClient()
        try:
            deliver = int(time.time() * 1000) + 1500
            r = await c.invoke(broker.broker_addr, send_cmd(topic, b"t", props={mc.TIMER_DELIVER_MS: str(deliver)}), 5)
            assert r.code == ResponseCode.SUCCESS
            r = await c.invoke(broker.broker_addr, send_cmd(topic, b"d", props={mc.DELAY: "2"}), 5)
            assert r.code == ResponseCode.SUCCESS
        finally:
            await c.close()

    base = scrape(broker.metrics_url)
    run(produce(), 30)
    # pending shows both (the timer's count comes from its last view: it is asked for a fresh one each scrape)
    wait_for(lambda: value(scrape(broker.metrics_url), "tidalmq_schedule_pending_messages", service="timer") >= 1
             and value(scrape(broker.metrics_url), "tidalmq_schedule_pending_messages", bucket="level2") == 1,
             10, 0.1, "both scheduled messages pending")
    wait_for(lambda: value(scrape(broker.metrics_url), "tidalmq_schedule_pending_messages") == 0, 20, 0.2,
             "both delivered")
    done = scrape(broker.metrics_url)
    for service in ("timer", "delay_level"):
        assert value(done, "rocketmq_timer_enqueue_total", service=service) - \
            value(base, "rocketmq_timer_enqueue_total", service=service) == 1
        assert value(done, "rocketmq_timer_dequeue_total", service=service) - \
            value(base, "rocketmq_timer_dequeue_total", service=service) == 1
        # each delivery lands in the lateness histogram: one more in the +Inf bucket (all of them), and in
        # the 60 s bucket (on time within a minute), and a sum that grew by the lateness (>= 0: never early)
        h = "tidalmq_schedule_delivery_lateness_ms"
        for suffix, labels in (("_count", {}), ("_bucket", {"le": "+Inf"}), ("_bucket", {"le": "60000"})):
            assert value(done, h + suffix, service=service, **labels) - \
                value(base, h + suffix, service=service, **labels) == 1, (service, suffix, labels)
        assert value(done, h + "_sum", service=service) >= value(base, h + "_sum", service=service)
    # at send, a scheduled message is stored under the system topic that holds it until due
    assert value(done, "rocketmq_messages_in_total", topic="SCHEDULE_TOPIC_XXXX") >= 1


def test_producer_connections_and_timer_cancels_show(broker: Standalone) -> None:
    topic, group = "MetricsCancel", "MetricsCancelPG"
    base = scrape(broker.metrics_url)

    async def scenario() -> None:
        async with Producer(group, broker.namesrv_addr) as p, Admin(broker.namesrv_addr) as admin:
            res = await p.send(Message(topic, b"later", delay_ms=600_000))  # the broker is in its route now
            await p.instance.send_heartbeat()  # what its 30 s heartbeat timer sends: it names the group
            wait = time.monotonic() + 10
            while value(scrape(broker.metrics_url), "rocketmq_producer_connections", producer_group=group) != 1:
                assert time.monotonic() < wait, "the producer's connection never showed"
                await asyncio.sleep(0.1)
            assert await admin.cancel_scheduled(topic, res.msg_id)

    run(scenario(), 30)
    wait_for(lambda: value(scrape(broker.metrics_url), "tidalmq_timer_cancels_total")
             - value(base, "tidalmq_timer_cancels_total") == 1, 10, 0.1, "the cancel counted")
    # the producer unregistered as it closed
    wait_for(lambda: value(scrape(broker.metrics_url), "rocketmq_producer_connections", producer_group=group) == 0,
             10, 0.1, "the producer's connection gone")


def test_namesrv_endpoint_serves(broker: Standalone) -> None:
    samples = scrape(broker.namesrv_metrics_url)
    assert value(samples, "tidalmq_namesrv_live_brokers") == 1
    # the broker's registration went through the NameServer's remoting server, and was timed
    assert value(samples, "rocketmq_rpc_latency_count", request_code="register_broker") >= 1


def _bound(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_disabled_binds_nothing(tmp_path: Path) -> None:
    with Standalone(tmp_path / "data", {"metricsExporterType": "DISABLE"}) as s:
        assert not _bound(s.metrics_port) and not _bound(s.namesrv_metrics_port)


def test_bad_port_key_is_refused(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "data", {"metricsPromExporterPort": "70000"})
    with pytest.raises(RuntimeError):
        s.start(timeout=30)
    assert "metricsPromExporterPort=70000: must be between 0 and 65535" in s.log_tail()


DOCS = Path(__file__).resolve().parents[2] / "docs"
METRIC_NAME = re.compile(r"\b((?:rocketmq|tidalmq)_[a-z_]+)")


def documented() -> set[str]:
    return set(METRIC_NAME.findall((DOCS / "metrics.md").read_text()))


def test_every_served_and_charted_metric_is_documented(broker: Standalone) -> None:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        families = {fam.name for fam in text_string_to_metric_families(r.read().decode())}
    with urllib.request.urlopen(broker.namesrv_metrics_url, timeout=10) as r:
        families |= {fam.name for fam in text_string_to_metric_families(r.read().decode())}
    docs = {n.removesuffix("_total") for n in documented()}
    assert families - docs == set()
    charted = {re.sub(r"_(total|bucket)$", "", n)
               for n in METRIC_NAME.findall((DOCS / "grafana-dashboard.json").read_text())}
    assert charted - docs == set()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_flush_and_dispatch_behind_follow_the_store(tmp_path: Path, flush: str) -> None:
    """ASYNC_FLUSH with an hour between flushes: what was sent stays unflushed, and the gauge says so;
    SYNC_FLUSH: nothing acknowledged is unflushed. Once every message is in its queue nothing is behind
    the dispatch."""
    hour = str(3_600_000)
    settings = {"flushDiskType": flush, "flushIntervalCommitLog": hour, "flushCommitLogThoroughInterval": hour,
                "mappedFileSizeCommitLog": str(8 << 20)}
    n, topic, body = 10, "MetricsBehind", b"f" * 2048
    with Standalone(tmp_path / "data", settings) as s:
        before = value(scrape(s.metrics_url), "rocketmq_storage_flush_behind_bytes")

        async def produce() -> None:
            c = RemotingClient()
            try:
                for _ in range(n):
                    assert (await c.invoke(s.broker_addr, send_cmd(topic, body), 5)).code == ResponseCode.SUCCESS
                got = 0
                deadline = time.monotonic() + 10
                while got < n:  # in the queue: dispatched
                    assert time.monotonic() < deadline
                    r = await c.invoke(s.broker_addr, pull_cmd(topic, 0, got), 5)
                    got += len(records(r.body_bytes())) if r.code == ResponseCode.SUCCESS else 0
            finally:
                await c.close()

        run(produce(), 30)
        after = scrape(s.metrics_url)
        behind = value(after, "rocketmq_storage_flush_behind_bytes")
        if flush == "ASYNC_FLUSH":
            assert behind - before >= n * len(body)
        else:
            assert behind == 0
        assert value(after, "rocketmq_storage_dispatch_behind_bytes") == 0
