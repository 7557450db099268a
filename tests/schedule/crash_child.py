"""Child process for test_timer_crash: enqueues, pops and commits until SIGKILLed, acknowledging each step
in a log file (one os.write per line, so what is in the file was acknowledged before the kill)."""

from __future__ import annotations

import os
import sys

import numpy as np

from tidalmq.schedule import TimerStore, make_entries

T0 = 1_700_000_000_000
STRIDE = 100  # CommitLog offsets per batch
TICK = 20  # simulated ms per step


def batch(seed: int, k: int) -> tuple[np.ndarray, int]:
    """Batch k as the CommitLog would hold it: deterministic, so the parent can replay it."""
    rng = np.random.default_rng(seed * 1_000_003 + k)
    n = int(rng.integers(1, 40))
    d = T0 + k * TICK + rng.integers(-500, 5_000, n)  # past, within the 2 s wheel, and beyond it (rolls)
    return make_entries(deliver_ms=d, offset=k * STRIDE + np.arange(n), size=1), (k + 1) * STRIDE


def open_store(root: str, now: list[int]) -> TimerStore:
    s = TimerStore(
        root, precision_ms=10, slot_ms=100, wheel_slots=20, clock=lambda: now[0], records_per_segment=256
    )
    s.load()
    return s


def main() -> None:
    root, ack_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    now = [T0]
    s = open_store(root, now)
    ack = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rng = np.random.default_rng(seed)
    k = 0
    while True:
        now[0] = T0 + k * TICK
        e, end = batch(seed, k)
        s.enqueue(e, end)
        os.write(ack, f"E {k}\n".encode())
        got = s.pop_due(now[0])
        if len(got):
            os.write(ack, ("P " + " ".join(str(int(o)) for o in got["offset"]) + "\n").encode())
        if rng.random() < 0.7:
            s.commit_delivered()
            os.write(ack, b"C\n")
        k += 1


if __name__ == "__main__":
    main()
