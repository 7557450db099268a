"""The Java load generator's W1 (bench/compare/jload.py) when the throughput phase's sends fail: one more
attempt on a fresh topic, and the report names the first attempt's failure; two failures fail the
workload with both causes. The load generator is stood in for by phases that answer as it does (no JVM)."""

from __future__ import annotations

from typing import Any

import pytest
from bench.compare import jload, report

GOOD = {"errors": 0, "received": 5_000, "send_s": 0.5, "last_recv_ms": 900, "t0_ms": 0, "broker_cpu_s": 0.2,
        "expected": 2_000, "p50_ms": 1.0, "p99_ms": 3.0}


def _phases(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[str]:
    """Phases whose first ``failures`` throughput runs report failed sends; the topics they were run on."""
    topics: list[str] = []

    class Phase:
        def __init__(self, server: Any, **kw: Any) -> None:
            self.kw = kw

        def run(self, timeout_s: float) -> dict[str, Any]:
            topics.append(self.kw["topic"])
            failed = sum(1 for t in topics if t.startswith("jw1t"))
            if self.kw["phase"] == "throughput" and failed <= failures:
                return {**GOOD, "errors": 2_352, "first_error": f"busy #{failed}"}
            return GOOD

    monkeypatch.setattr(jload, "Phase", Phase)
    monkeypatch.setattr(jload, "_setup", lambda *a: None)
    return topics


def test_a_failed_throughput_phase_runs_once_more_and_the_report_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    topics = _phases(monkeypatch, failures=1)
    out = jload.w1(None, "rocketmq_java", quick=True)  # type: ignore[arg-type]
    assert topics == ["jw1t", "jw1t2", "jw1l"]
    assert out["received"] == 5_000
    assert out["first_attempt_failed"] == "2352 sends failed, the first: busy #1"
    rows = report.w1_rows({"peers": {"rocketmq_java": {"workloads": {"W1": out}}}})
    assert "a second attempt: in the first 2352 sends failed, the first: busy #1" in rows[0][-1]


def test_a_throughput_phase_that_fails_twice_fails_the_workload_with_both_causes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _phases(monkeypatch, failures=2)
    with pytest.raises(RuntimeError, match="busy #1; again: 2352 sends failed, the first: busy #2"):
        jload.w1(None, "rocketmq_java", quick=True)  # type: ignore[arg-type]


def test_a_clean_first_attempt_reports_no_second(monkeypatch: pytest.MonkeyPatch) -> None:
    topics = _phases(monkeypatch, failures=0)
    out = jload.w1(None, "rocketmq_java", quick=True)  # type: ignore[arg-type]
    assert topics == ["jw1t", "jw1l"]
    rows = report.w1_rows({"peers": {"rocketmq_java": {"workloads": {"W1": out}}}})
    assert "second attempt" not in rows[0][-1]
