"""The lateness histogram behind the metrics endpoint (schedule/stats.py): bucket edges are Prometheus's
"less or equal", early deliveries count in the first bucket, and large batches (counted with numpy) land
where one-by-one counting puts them."""

from __future__ import annotations

import random

from tidalmq.broker.metrics.broker_metrics import cumulative_buckets
from tidalmq.schedule.stats import LATENESS_BUCKETS_MS, ScheduleStats


def test_lateness_falls_in_the_bucket_whose_bound_it_does_not_exceed() -> None:
    s = ScheduleStats()
    s.delivered([-3, 0, 1, 2, 5, 6, 60_000, 60_001])
    h = s.lateness_histogram()
    by_bound = dict(zip([*LATENESS_BUCKETS_MS, "rest"], h["buckets"], strict=True))
    assert by_bound[1] == 3  # -3 (early), 0 and 1
    assert by_bound[5] == 2 and by_bound[10] == 1 and by_bound[60_000] == 1 and by_bound["rest"] == 1
    assert h["sumMs"] == -3 + 0 + 1 + 2 + 5 + 6 + 60_000 + 60_001
    assert s.snapshot()["early"] == 1
    cum = cumulative_buckets(h["buckets"])
    assert cum[0] == ("1", 3.0) and cum[-1] == ("+Inf", 8.0)


def test_a_large_batch_counts_as_its_messages_one_by_one() -> None:
    rng = random.Random(7)
    values = [rng.choice([-1, 0, 1, 5, 10, 11, 250, 251, 60_000, 90_000]) + rng.randint(0, 2) for _ in range(500)]
    whole, single = ScheduleStats(), ScheduleStats()
    whole.delivered(values)
    for v in values:
        single.delivered([v])
    assert whole.lateness_histogram() == single.lateness_histogram()
    assert sum(whole.lateness_histogram()["buckets"]) == 500
