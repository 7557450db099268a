"""SIGKILL a process that enqueues, pops and commits; after load() and the caller's replay nothing
acknowledged is lost, and nothing committed is delivered again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.schedule.crash_child import STRIDE, T0, batch, open_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed,delay", [(1, 0.4), (2, 0.9), (3, 1.3), (4, 0.7)])
def test_sigkill_loses_nothing(tmp_path: Path, seed: int, delay: float) -> None:
    root, ack = tmp_path / "timer", tmp_path / "ack"
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'src'}")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.schedule.crash_child", str(root), str(ack), str(seed)],
        env=env,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 20
    while not (ack.exists() and ack.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.01)  # wait out the interpreter's start, then kill mid-flight
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait()

    last_k, popped, committed = -1, [], set()
    for line in ack.read_text().splitlines():
        kind, *rest = line.split()
        if kind == "E":
            last_k = int(rest[0])
        elif kind == "P":
            popped += [int(x) for x in rest]
        else:
            committed = set(popped)
    assert last_k > 10, "the child did too little before the kill"

    now = [T0 + (last_k + 1) * 20]
    s = open_store(str(root), now)
    assert s.enqueue_offset >= (last_k + 1) * STRIDE  # acknowledged batches are all indexed
    # The caller's replay from the CommitLog: from a little before the watermark (idempotent) to the batch the
    # child may have been writing when it died.
    first = max(0, s.enqueue_offset // STRIDE - 3)
    for k in range(first, last_k + 2):
        e, end = batch(seed, k)
        s.enqueue(e, end)
    drained = []
    far = now[0] + 10_000
    while len(got := s.pop_due(far)):
        drained += [int(x) for x in got["offset"]]
        s.commit_delivered()
    s.close()

    expected = {int(o) for k in range(last_k + 2) for o in batch(seed, k)[0]["offset"]}
    assert len(drained) == len(set(drained)), "delivered twice after recovery"
    assert not (set(drained) & committed), "a committed delivery came back"
    assert expected <= set(drained) | set(popped), "an acknowledged entry was lost"
