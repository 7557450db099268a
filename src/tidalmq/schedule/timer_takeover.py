"""Timer state across a failover: a replica's timer files are not the master's, so a promoted replica rebuilds
its wheel from the replicated CommitLog and proves, message by message, what the old master delivered.

A slave delivers nothing and keeps no timer state of its own; it leaves the marker ``timertakeover`` (state
"replica") in its store root. The timer service that loads next to that marker (the replica promoted at
runtime, or restarted as master) does not trust the timer files there: it removes them, so that its enqueue
replays ``rmq_sys_wheel_timer`` from the ConsumeQueue's start, and records in the marker the time it took over.
Every entry due at or before that time may have been delivered by the old master: before re-storing it, the
service looks its copy up in the real topic's index (the check it makes after a crash mid-batch) and skips it
when found. Entries due later go out on time as usual. The marker goes once the service has durably committed
past the takeover time; a crash before that repeats the rebuild check, never a delivery.

The bound: a copy the old master stored but had not replicated when it died is not in the new master's
index, so that message is delivered again (RocketMQ's promoted slave likewise re-delivers from its last synced
checkpoint). A delivered copy is the broker's own put, acknowledged by no slave: the duplicates are at most
what the slave lagged by when the master died (tests/ha/test_timer_failover.py counts them).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidalmq.common.fileutil import atomic_write, read_with_backup

MARKER = "timertakeover"
# The timer's own files (timer_store, timer_service): what a takeover rebuilds. Not ``timerlock``, the
# schedule process's lock, held by whoever runs the service.
TIMER_FILES = ("timerwheel", "timercheck", "timercheck.tmp", "timerdeliver", "timermetrics", "timermetrics.bak")
TIMER_DIRS = ("timerlog",)
# The old master may have delivered by a clock slightly ahead of this one's (another machine): entries due
# this far past the takeover are checked too.
CLOCK_MARGIN_MS = 2000


@dataclass(frozen=True)
class Takeover:
    """Entries with deliver ms at or before ``verify_upto_ms`` are checked against the index before delivery."""

    verify_upto_ms: int


def mark_replica(root: str | Path) -> None:
    """A slave's start: whatever timer files lie here (an old term's) are not to be trusted on promotion."""
    path = Path(root) / MARKER
    if _read(path).get("state") != "replica":
        Path(root).mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"state": "replica"}).encode())


def begin(root: str | Path, now_ms: int) -> Takeover | None:
    """The timer service's load: None when this store's timer files are its own; else the takeover in
    progress (the files removed first when it begins now)."""
    root = Path(root)
    path = root / MARKER
    state = _read(path)
    if state.get("state") == "replica":
        for name in TIMER_FILES:
            (root / name).unlink(missing_ok=True)
        for name in TIMER_DIRS:
            shutil.rmtree(root / name, ignore_errors=True)
        state = {"state": "verifying", "verifyUpToMs": now_ms + CLOCK_MARGIN_MS}
        atomic_write(path, json.dumps(state).encode())
    if state.get("state") == "verifying":
        return Takeover(int(state["verifyUpToMs"]))
    return None


def finish(root: str | Path) -> None:
    """Everything the old master could have delivered has been checked and committed durably."""
    path = Path(root) / MARKER
    path.with_name(MARKER + ".bak").unlink(missing_ok=True)  # first: read_with_backup falls back on it
    path.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any]:
    raw = read_with_backup(path)
    data = json.loads(raw) if raw else {}
    return data if isinstance(data, dict) else {}
