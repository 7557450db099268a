"""The replication-lag arithmetic of bench/ha_bench.py on hand-made samples (no broker)."""

from __future__ import annotations

from bench.ha_bench import lag_figures


def test_lag_in_ms_is_the_age_of_the_oldest_unacknowledged_byte() -> None:
    # (seconds, master's CommitLog end, slave's ack)
    samples = [(0.00, 100, 100), (0.01, 400, 100), (0.02, 500, 300), (0.03, 500, 500)]
    figs = lag_figures(samples)
    # bytes behind: 0, 300, 200, 0
    assert figs["lag_bytes_max"] == 300
    # at 0.01 byte 100 first exists at this very sample (0 ms); at 0.02 byte 300, the first the slave
    # lacks, has existed since 0.01 (10 ms); at 0.03 the slave holds everything (0 ms)
    assert figs["lag_ms_max"] == 10.0
    assert figs["lag_samples"] == 4
    assert figs["lag_sample_every_ms_p50"] == 10.0


def test_no_samples_give_no_figures() -> None:
    assert lag_figures([]) == {}
