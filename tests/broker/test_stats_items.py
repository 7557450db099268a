"""The broker's StatsItem windows (RocketMQ's StatsItem): snapshots every 10 s kept 7 deep, the sum the newest
minus the oldest, a new key's first snapshot after a zero one a period earlier; and the per-second totals
behind the runtime info's putTps."""

from tidalmq.broker.stats import BrokerStats, java_double
from tidalmq.common.stats_keys import GROUP_GET_NUMS, TOPIC_PUT_NUMS, TOPIC_PUT_SIZE


def test_minute_window_sum_tps_and_avgpt() -> None:
    s = BrokerStats("C")
    s.on_put("T", 4, 400)  # a batch of 4: one call
    s.on_put("T", 1, 100)
    s.sample("minute", now_ms=100_000)
    item = s.item(TOPIC_PUT_NUMS, "T")
    assert item is not None
    m = item.in_minute()
    assert (m.sum, m.times) == (5, 2) and m.tps == 0.5 and m.avgpt == 2.5  # over the zero snapshot 10 s before
    size = s.item(TOPIC_PUT_SIZE, "T")
    assert size is not None and size.in_minute().sum == 500
    for i in range(1, 8):  # seven more samples: the window keeps 7, the oldest now 60 s back
        s.on_put("T", 1, 10)
        s.sample("minute", now_ms=100_000 + i * 10_000)
    m = item.in_minute()
    assert m.sum == 6 and m.tps == 0.1  # one message per 10 s over the last minute
    assert item.in_day().sum == 0  # no day sample yet
    assert s.item(GROUP_GET_NUMS, "T@G") is None and s.item("NO_SUCH", "T") is None


def test_group_keys_and_deletes() -> None:
    s = BrokerStats("C")
    s.on_get("G", "T", 3, 30)
    s.on_get("H", "T", 2, 20)
    s.sample("minute", now_ms=50_000)
    assert s.tps_group_get("G", "T") == 0.3
    assert s.per_topic(GROUP_GET_NUMS) == {"T": 5}
    s.on_group_deleted("G")
    assert s.item(GROUP_GET_NUMS, "T@G") is None and s.item(GROUP_GET_NUMS, "T@H") is not None
    s.on_topic_deleted("T")
    assert s.per_topic(GROUP_GET_NUMS) == {}


def test_put_tps_needs_enough_seconds() -> None:
    s = BrokerStats("C")
    for sec in range(11):
        s.on_put("T", 2, 10)
        s.sample_store(now_ms=sec * 1000)
    assert s.put_tps() == "2.0  "  # the 60 s and 600 s figures empty until that many seconds are sampled
    assert s.get_transfered_tps() == "0.0  "
    assert java_double(0.1) == "0.1" and java_double(1.0e7) == "1.0E7"


def test_totals_at_midnight() -> None:
    """BrokerStats.record: yesterday's and today's morning totals, behind clusterList -m."""
    s = BrokerStats("C")
    s.on_put("T", 5, 50)
    s.record_morning()
    s.on_put("T", 2, 20)
    s.on_get("G", "T", 3, 30)
    assert (s.put_yesterday_morning, s.put_today_morning, s.put_total) == (0, 5, 7)
    s.record_morning()
    assert (s.put_yesterday_morning, s.put_today_morning, s.get_today_morning) == (5, 7, 3)
