"""Smoke test of bench/compare against TidalMQ alone (no peer installed): W1 --quick end to end, and the
report with every kind of cell (measured, unsupported, not installed, failed)."""

from __future__ import annotations

from pathlib import Path

from bench.compare import report, workloads
from bench.compare.peers.tidalmq import Server


def _rss_anon(pid: int | None) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def test_w1_quick_and_report(tmp_path: Path) -> None:
    s = Server(tmp_path / "tidalmq")
    s.start()
    try:
        w1 = workloads.w1(s, "tidalmq", quick=True)
        rss = s.rss()
        own_anon = _rss_anon(s.server_pid())
        tree, anon = s.tree_pids(), s.rss_anon()
    finally:
        s.stop()
    # the schedule process (the timer's index) is under the broker: W3/W6 count its memory as the broker's
    assert len(tree) >= 2 and anon > own_anon > 0
    assert w1["received"] == w1["n"] and w1["paced_received"] == w1["paced_n"]
    assert w1["produced_per_s"] > 0 and w1["consumed_per_s"] > 0 and w1["lat_p50_ms"] >= 0
    assert rss > 0
    results = {
        "quick": True, "started": "now", "elapsed_s": 1.0, "workloads": ["W1", "W2", "W3", "W4", "W5"],
        "peers": {
            "tidalmq": {"version": Server.version(), "settings": s.settings(), "settings_durable": {},
                        "workloads": {"W1": w1, "W2": {"error": "RuntimeError: boom"}}},
            "nats": {"version": "x", "settings": {}, "workloads": {"W1": w1, "W2": {"unsupported": "no delays"}}},
            "beanstalkd": {"unavailable": "not installed (beanstalkd): run bench/compare/install.sh", "workloads": {}},
        },
    }
    out = tmp_path / "RESULTS.md"
    report.write(results, out, tmp_path / "raw.json")
    text = out.read_text()
    assert "not available from Debian here" in text
    assert "cannot: no delays" in text
    assert "error: RuntimeError: boom" in text
    assert "| TidalMQ |" in text
