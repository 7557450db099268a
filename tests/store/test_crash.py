"""Process-crash recovery of the store alone: SIGKILL a writer under load; after recovery every
acknowledged message is readable exactly once, and the ConsumeQueues hold exactly the recovered CommitLog's
records. Both flush types are held to that, because a SIGKILL leaves the page cache intact: these tests
cannot tell SYNC_FLUSH from ASYNC_FLUSH. A power-cut harness that drops unsynced writes (not built yet) is
what will show that SYNC_FLUSH keeps every acknowledged message where ASYNC_FLUSH may not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from tidalmq.common.record import decode_record
from tidalmq.store.commit_log import CommitLog

from .conftest import small_config
from .test_recovery import read_queue

WRITER = os.path.join(os.path.dirname(__file__), "crash_writer.py")


def run_and_kill(root: str, mode: str, acks_wanted: int, run_id: str = "r1") -> tuple[list[str], str]:
    proc = subprocess.Popen([sys.executable, WRITER, root, mode, run_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    acked: list[str] = []
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line == b"READY\n", (line, proc.stderr.read() if proc.stderr and proc.poll() is not None else b"")
        while len(acked) < acks_wanted and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.endswith(b"\n") and line.startswith(b"ACK "):
                acked.append(line[4:-1].decode())
        os.kill(proc.pid, signal.SIGKILL)
        rest, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    for line in rest.split(b"\n")[:-1]:  # a last line without newline was cut by the kill
        if line.startswith(b"ACK "):
            acked.append(line[4:].decode())
    return acked, err.decode(errors="replace")


def verify(root: str, acked: list[str]) -> tuple[int, int]:
    from tidalmq.store.message_store import DefaultMessageStore

    cfg = small_config(root, mapped_file_size_commit_log=256 * 1024, mapped_file_size_consume_queue=20 * 1000)
    store = DefaultMessageStore(cfg)
    assert store.load()
    assert not store.last_exit_ok
    try:
        seen: Counter[str] = Counter()
        in_cq = set()
        for q in range(4):
            for m in read_queue(store, "CRASH", q):
                seen[m.properties["KEYS"]] += 1
                assert m.body == m.properties["KEYS"].encode() * 20
                in_cq.add(m.commit_log_offset)
        dup = [k for k, c in seen.items() if c > 1]
        assert not dup, dup[:10]
        missing = [k for k in acked if k not in seen]
        # The ConsumeQueues hold exactly the records of the recovered CommitLog.
        cl: CommitLog = store.commit_log
        off = cl.min_offset
        batch, end, stalled = cl.read_dispatch_requests(off, 1 << 40)
        reqs = batch.rows()
        assert not stalled and end == store.max_phy_offset
        stored = {r.commit_log_offset for r in reqs if r.topic == "CRASH"}
        assert stored == in_cq
        for r in reqs[:50]:
            view = store.select_one_message_by_offset(r.commit_log_offset)
            assert view is not None and decode_record(view, check_crc=True)
        return len(missing), len(seen)
    finally:
        store.shutdown()


FLUSH_TYPES = ["SYNC_FLUSH", "ASYNC_FLUSH"]


@pytest.mark.parametrize("mode", FLUSH_TYPES)
def test_sigkill_recovery_keeps_every_acknowledged_message(tmp_path, mode: str) -> None:
    root = str(tmp_path / "s")
    acked, err = run_and_kill(root, mode, 4000 if mode == "SYNC_FLUSH" else 1500)
    assert len(acked) >= 200, err
    missing, total = verify(root, acked)
    assert missing == 0, f"{missing} of {len(acked)} acknowledged messages missing after SIGKILL ({mode})"
    assert total >= len(acked)
    # and a second crash on top of the recovered store
    acked2, err = run_and_kill(root, mode, 800, "r2")
    missing, _ = verify(root, acked + acked2)
    assert missing == 0


@pytest.mark.parametrize("mode", FLUSH_TYPES)
def test_sigkill_early(tmp_path, mode: str) -> None:
    """Kill right after the first acknowledgements (file creation, first dispatch in flight)."""
    root = str(tmp_path / "e")
    acked, err = run_and_kill(root, mode, 5)
    assert acked, err
    missing, _ = verify(root, acked)
    assert missing == 0
