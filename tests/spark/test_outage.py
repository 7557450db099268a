"""A caught-up streaming query (the driver polling ``latestOffset``) rides out what a deadline like Kafka's
``default.api.timeout.ms`` (``retryDeadlineMs``, 60 s) covers: a 30 s outage of the whole standalone
(NameServer and broker; at its restart the NameServer answers "topic does not exist" until the broker
has registered), and on a cluster a NameServer restart that the brokers fill again only at their next
registration (``registerNameServerPeriod``, 30 s)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import create_topic, produce, stream_reader, topic_name

pytestmark = pytest.mark.spark

OUTAGE_S = 30.0


def _rows(spark: Any, name: str) -> int:
    return spark.sql(f"select count(*) c from {name}").first().c


def _until(spark: Any, q: Any, name: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _rows(spark, name) < n:
        assert q.exception() is None, str(q.exception())[-3000:]
        assert q.isActive, "the query stopped"
        assert time.monotonic() < deadline, f"{_rows(spark, name)} rows of {n} after {timeout} s"
        time.sleep(0.2)


def _caught_up_query(spark: Any, ns: str, topic: str, name: str, ck: Path) -> Any:
    df = stream_reader(spark, ns, topic, startingOffsets="earliest").load().selectExpr("cast(body as string) as b")
    return (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(ck))
            .trigger(processingTime="500 milliseconds").start())


@pytest.mark.timeout(400)
def test_caught_up_query_rides_out_a_30s_outage_of_the_standalone(spark, tmp_path: Path) -> None:
    from tests.support import Standalone

    s = Standalone(tmp_path / "data", {"mappedFileSizeCommitLog": str(64 << 20)}).start()
    try:
        ns = s.namesrv_addr
        topic = topic_name("Outage30")
        create_topic(ns, topic, 2)
        produce(ns, topic, 100)
        q = _caught_up_query(spark, ns, topic, "outage30", tmp_path / "ck")
        try:
            _until(spark, q, "outage30", 100, 120)
            s.kill()
            began = time.monotonic()
            while time.monotonic() - began < OUTAGE_S:  # the outage: the driver keeps polling a dead address
                assert q.exception() is None, str(q.exception())[-3000:]
                time.sleep(0.5)
            s.start()  # and its restart, with the NameServer up before the broker has registered the topic
            produce(ns, topic, 100, start=100)
            _until(spark, q, "outage30", 200, 120)
            assert sorted(int(r.b[1:]) for r in spark.sql("select b from outage30").collect()) == list(range(200))
        finally:
            q.stop()
    finally:
        s.stop()


@pytest.mark.timeout(400)
def test_caught_up_query_rides_out_a_name_server_restart_on_a_cluster(spark, tmp_path: Path) -> None:
    """The broker stays up; the restarted NameServer knows no topic until the broker's next registration,
    up to 30 s later: the query's route lookups get "topic does not exist" all that time."""
    from tests.ha.support import Broker, NameServer

    namesrv = NameServer(tmp_path / "ns").start()
    broker = Broker(tmp_path / "broker", f"127.0.0.1:{namesrv.namesrv_port}",
                    {"mappedFileSizeCommitLog": str(64 << 20)}).start()
    try:
        ns = f"127.0.0.1:{namesrv.namesrv_port}"
        topic = topic_name("NsRestart")
        deadline = time.monotonic() + 30
        while True:  # the broker's first registration follows its "ready" line
            try:
                create_topic(ns, topic, 2)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        produce(ns, topic, 100)
        q = _caught_up_query(spark, ns, topic, "nsrestart", tmp_path / "ck")
        try:
            _until(spark, q, "nsrestart", 100, 120)
            namesrv.kill()
            namesrv.start()
            from tidalmq.client.admin import AdminError
            from tidalmq.client.sync import Admin
            from tidalmq.remoting.codes import ResponseCode

            with Admin(ns) as admin:  # the race the query must ride out: the topic is unknown for a while
                with pytest.raises(AdminError) as unknown:
                    admin.route(topic)
                assert unknown.value.code == ResponseCode.TOPIC_NOT_EXIST
            deadline = time.monotonic() + 45
            while True:  # the broker registers again (registerNameServerPeriod); then the topic is routed
                try:
                    with Admin(ns) as admin:
                        if admin.route(topic).get("queueDatas"):
                            break
                except Exception:
                    pass
                assert q.exception() is None, str(q.exception())[-3000:]
                assert time.monotonic() < deadline, "the broker did not register again"
                time.sleep(0.5)
            produce(ns, topic, 100, start=100)
            _until(spark, q, "nsrestart", 200, 120)
        finally:
            q.stop()
    finally:
        broker.stop()
        namesrv.stop()
