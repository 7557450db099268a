"""bench/RESULTS.md's W6 section: the pending-scale rows (bench/pending_bench.py, run by run.py)."""

from __future__ import annotations

from typing import Any

TITLE = {"tidalmq": "TidalMQ (tidalmq.client, batches)",
         "tidalmq_java": "TidalMQ (Java client, batches)",
         "rocketmq_java": "Apache RocketMQ 5, timer 100 ms (Java client, single async sends)",
         "rocketmq": "Apache RocketMQ 5, timer 1000 ms (tidalmq.client, single async sends)",
         "rocketmq_p100": "Apache RocketMQ 5, timer 100 ms (tidalmq.client, single async sends)"}

METHOD = """\
- **W6 pending scale** (`bench/pending_bench.py`): N timer messages (100-byte bodies, due uniformly 7..30 days
  ahead) enqueued in one go, cut at the time budget (a peer cut short is not tried at a larger N: the last N
  it reached is what it sustains here); the rate of each tenth of N (does it fall as N grows?); disk = the
  allocated blocks of the broker's data dir / N (the preallocated CommitLog file dominates at small N);
  anonymous RSS (RssAnon) grown over the enqueue / N. Then SIGKILL with the N pending and restart: seconds to
  ready (the harness sees the broker routable) and to the first delivery of 100 messages due 3 s after the
  kill. Then lateness p50/p99 of 10,000 due/s over a window (5 s; 1 s with --quick) with the N still pending.
"""


def _f(v: Any, digits: int = 0) -> str:
    if not isinstance(v, int | float) or v != v:
        return "—"
    return f"{v:,.{digits}f}"


def rows(pending: dict[str, Any]) -> list[list[str]]:
    out = []
    for key, r in pending.items():
        peer, _, n = key.rpartition("_")
        head = [TITLE.get(peer, peer), f"{int(n):,}"]
        if "skipped" in r or "error" in r:
            out.append(head + [f"{'skipped' if 'skipped' in r else 'error'}: {r.get('skipped') or r.get('error')}"])
            continue
        tenths = r.get("enqueue_per_s_by_tenth") or []
        over = f"{_f(tenths[0])} → {_f(tenths[-1])}" if tenths else "—"
        pend = f"{r['pending']:,}" + (" (**cut short**)" if r.get("cut_short") else "")
        out.append(head + [pend, _f(r.get("enqueue_per_s")), over, _f(r.get("disk_bytes_per_msg")),
                           _f(r.get("anon_bytes_per_msg"), 1), _f(r.get("restart_to_ready_s"), 2),
                           _f(r.get("restart_to_first_delivery_s"), 2),
                           f"{_f(r.get('late_p50_ms'), 1)} / {_f(r.get('late_p99_ms'), 1)}"
                           f" ({r.get('late_delivered', 0):,} of {r.get('late_expected', 0):,})"
                           + (f"; sends overran the window's start by {_f(r['late_sends_overran_ms'])} ms"
                              if r.get("late_sends_overran_ms") else "")])
    return out


HEADER = ["peer", "N", "pending", "enqueue msgs/s", "first tenth → last tenth msgs/s", "disk B / pending",
          "anon RSS B / pending", "SIGKILL → ready s", "SIGKILL → first delivery s (due at +3 s)",
          "lateness p50 / p99 ms at 10,000 due/s"]
