from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tidalmq.schedule import MAGIC_DELETE, TimerStore, make_entries, uniq_hash
from tidalmq.schedule.entries import uniq_hashes
from tidalmq.schedule.timer_log import MAGIC_SIGNATURE, RECORD_DTYPE, TimerLog

from .conftest import Clock

Open = Callable[..., TimerStore]
DAY = 86_400_000


def offsets(a: np.ndarray) -> list[int]:
    return [int(x) for x in a["offset"]]


def drain(s: TimerStore, now: int) -> np.ndarray:
    """Pop and commit until nothing more is due, as the broker's timer service does."""
    parts = []
    while len(got := s.pop_due(now)):
        parts.append(got)
        s.commit_delivered()
    return np.concatenate(parts) if parts else got  # pop_due's empty answer, with the entry dtype


def test_never_early_and_rounded_to_precision(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t + 1001, t + 1010], offset=[1, 2], size=9), 3)
    assert len(s.pop_due(t + 1000)) == 0
    assert s.next_due_ms() == t + 1010  # 1001 rounds up to the 10 ms tick
    got = s.pop_due(t + 1010)
    assert offsets(got) == [1, 2] and list(got["deliver_ms"]) == [t + 1001, t + 1010]
    assert list(got["size"]) == [9, 9]


def test_a_one_millisecond_tick_releases_each_entry_at_its_own_time(open_store: Open, clock: Clock) -> None:
    s = open_store(precision_ms=1)
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t + 1001, t + 1003, t + 1003, t + 1042], offset=[1, 2, 3, 4]), 5)
    assert len(s.pop_due(t + 1000)) == 0  # the cursor enters the slot: its entries are known
    assert s.next_due_ms() == t + 1001
    assert offsets(s.pop_due(t + 1001)) == [1]
    assert s.next_due_ms() == t + 1003
    assert len(s.pop_due(t + 1002)) == 0
    assert offsets(s.pop_due(t + 1003)) == [2, 3]
    assert s.next_due_ms() == t + 1042 and len(s.pop_due(t + 1041)) == 0
    assert offsets(s.pop_due(t + 1042)) == [4]


def test_order_by_deliver_time_then_offset_within_a_tick(open_store: Open, clock: Clock) -> None:
    s = open_store(precision_ms=100)
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t + 150, t + 120, t + 120, t + 101], offset=[1, 5, 3, 7]), 8)
    got = s.pop_due(t + 200)
    assert offsets(got) == [7, 3, 5, 1]


def test_due_and_late_entries_go_out_at_once(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t + 50], offset=[1]), 2)
    assert offsets(s.pop_due(t + 50)) == [1]
    res = s.enqueue(make_entries(deliver_ms=[t - 10 * DAY, t + 20], offset=[2, 3]), 4)
    assert res.late == 2  # both behind the read cursor (t + 50)
    got = s.pop_due(t + 50)
    assert offsets(got) == [2, 3] and set(got["deliver_ms"]) == {t + 50}


def test_beyond_the_horizon_rolls_the_index_only(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    res = s.enqueue(make_entries(deliver_ms=[t + 7_777], offset=[42], size=100), 43)
    assert res.rolled == 1
    assert s.histogram(t)["rolled"] == 1
    now = t
    while now < t + 7_770:
        assert len(s.pop_due(now)) == 0, now
        now += 50
    got = s.pop_due(t + 7_780)
    assert offsets(got) == [42] and int(got["deliver_ms"][0]) == t + 7_777 and int(got["size"][0]) == 100
    assert s.pending_count() == 0


def test_range_10ms_to_400_days(tmp_path: Path, clock: Clock) -> None:
    s = TimerStore(str(tmp_path / "t"), precision_ms=10, clock=clock)  # default geometry: 1 s slots, 7 days
    s.load()
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t + 10, t + 400 * DAY], offset=[1, 2]), 3)
    with pytest.raises(ValueError):
        s.enqueue(make_entries(deliver_ms=[t + 400 * DAY + 1], offset=[3]), 4)
    assert offsets(s.pop_due(t + 10)) == [1]
    assert s.histogram(t)["rolled"] == 1
    assert s.next_due_ms() == (t // 1000 + 7 * 86_400 - 1) * 1000  # the roll slot at the horizon
    s.close()


def test_cancel(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    h1, h2 = uniq_hash("T+A"), uniq_hash("T+B")
    s.enqueue(make_entries(deliver_ms=[t + 300, t + 300, t + 5_000], offset=[1, 2, 3], uhash=[h1, h2, h1]), 4)
    assert s.cancel(t + 300, h1)
    # The broker's way: the TIMER_DEL_UNIQKEY message itself, enqueued with the delete flag; beyond horizon.
    s.enqueue(make_entries(deliver_ms=[t + 5_000], offset=[4], uhash=[h1], flags=MAGIC_DELETE), 5)
    assert offsets(s.pop_due(t + 300)) == [2]
    assert not s.cancel(t + 200, h2)  # the cursor is past it
    assert len(s.pop_due(t + 6_000)) == 0
    assert s.pending_count() == 0


def test_entries_filed_without_a_hash_are_hashed_when_a_cancel_meets_them(open_store: Open, clock: Clock) -> None:
    """uhash 0: the store asks ``key_hashes`` for the hashes of the entries a delete marker of their
    millisecond meets, and of no others."""
    t = clock.now
    asked: list[int] = []

    def key_hashes(offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        asked.extend(offsets.tolist())
        return np.array([uniq_hash(f"T+{o}") for o in offsets.tolist()], dtype=np.int64)

    s = open_store(key_hashes=key_hashes)
    s.enqueue(make_entries(deliver_ms=[t + 300, t + 300, t + 600, t + 300], offset=[1, 2, 3, 4], size=1), 5)
    assert s.cancel(t + 300, uniq_hash("T+2"))
    assert offsets(s.pop_due(t + 300)) == [1, 4]
    assert offsets(s.pop_due(t + 600)) == [3]
    assert sorted(asked) == [1, 2, 4]


def test_without_key_hashes_entries_filed_without_a_hash_are_never_cancelled(open_store: Open, clock: Clock) -> None:
    t = clock.now
    s = open_store()
    s.enqueue(make_entries(deliver_ms=[t + 300, t + 300], offset=[1, 2], size=1), 3)
    assert s.cancel(t + 300, uniq_hash("T+1"))
    assert offsets(s.pop_due(t + 300)) == [1, 2]


def test_cancel_in_the_current_slot(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now // 100 * 100
    s.enqueue(make_entries(deliver_ms=[t + 10, t + 60], offset=[1, 2], uhash=[7, 8]), 3)
    assert offsets(s.pop_due(t + 10)) == [1]
    assert s.cancel(t + 60, 8)
    assert len(s.pop_due(t + 100)) == 0


def test_replay_below_watermark_is_ignored(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    batch = make_entries(deliver_ms=[t + 100, t + 200], offset=[10, 20])
    s.enqueue(batch, 30)
    res = s.enqueue(batch, 30)
    assert res.duplicates == 2 and res.accepted == 0
    res = s.enqueue(make_entries(deliver_ms=[t + 300, t + 300], offset=[30, 30]), 40)
    assert res.duplicates == 1
    assert offsets(s.pop_due(t + 1_000)) == [10, 20, 30]


def test_reopen_redelivers_only_uncommitted(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t + 100, t + 200, t + 300, t + 3_000], offset=[1, 2, 3, 4]), 5)
    got = s.pop_due(t + 300)
    assert offsets(got) == [1, 2, 3]
    s.commit_delivered((int(got["deliver_ms"][1]), int(got["offset"][1])))
    s.close()
    s.load()
    assert s.enqueue_offset == 5
    assert offsets(s.pop_due(t + 300)) == [3]
    # Uncommitted pops hold the cursor within one revolution (2 s here) of the durable commit.
    assert len(s.pop_due(t + 3_000)) == 0
    s.commit_delivered()
    assert offsets(s.pop_due(t + 3_000)) == [4]


def test_torn_batch_is_cut_and_wheel_revised(tmp_path: Path, clock: Clock) -> None:
    root = tmp_path / "timer"
    s = TimerStore(
        str(root), precision_ms=10, slot_ms=100, wheel_slots=20, clock=clock, records_per_segment=64
    )
    s.load()
    t = clock.now
    s.enqueue(make_entries(deliver_ms=t + np.arange(100, 3_000, 25), offset=np.arange(1, 117)), 117)
    s.close()
    # Lose the wheel and the checkpoint's flush position: recovery rebuilds the cells from the TimerLog.
    (root / "timerwheel").write_bytes(bytes((root / "timerwheel").stat().st_size))
    cp = json.loads((root / "timercheck").read_text())
    cp["flush_pos"] = 0
    (root / "timercheck").write_text(json.dumps(cp))
    # And a torn batch at the tail: two records with no closing marker.
    log = TimerLog(root / "timerlog", 64)
    log.write_pos = log.scan_tail(0).size
    torn = np.zeros(2, RECORD_DTYPE)
    torn["deliver_ms"], torn["offset"], torn["filed_slot"] = t + 150, [500, 501], (t + 150) // 100
    torn["magic"], torn["prev"] = MAGIC_SIGNATURE | 1, -1
    log.append(torn)
    log.close()
    s.load()
    assert s.enqueue_offset == 117
    got = drain(s, t + 10_000)
    assert offsets(got) == list(range(1, 117))
    s.close()


def test_wheel_written_back_past_the_durable_log_loses_nothing(tmp_path: Path, clock: Clock) -> None:
    """A power cut after which the kernel had written the mmapped wheel back, but not the TimerLog records
    appended since the last flush: cells point past the durable log. Everything flushed is still delivered,
    and what the cut lost is re-filed by the CommitLog replay from ``enqueue_offset``, each exactly once."""
    root = tmp_path / "timer"
    s = TimerStore(str(root), precision_ms=10, slot_ms=100, wheel_slots=20, clock=clock, records_per_segment=64)
    s.load()
    t = clock.now
    # Durable: 40 entries over the whole horizon, and one beyond it (rolled).
    a = make_entries(deliver_ms=np.append(t + 100 + np.arange(40) * 45, t + 5_000), offset=np.arange(1, 42))
    s.enqueue(a, 42)
    s.flush()
    saved = {p.name: p.read_bytes() for p in (root / "timerlog").iterdir()}
    checkpoint = (root / "timercheck").read_bytes()
    # Not durable: as many again into the same slots, crossing into a new TimerLog segment.
    b = make_entries(deliver_ms=np.append(t + 120 + np.arange(40) * 45, t + 5_050), offset=np.arange(42, 83))
    s.enqueue(b, 83)
    # The cut: the wheel reached the disk (its mmap written back), the TimerLog's pwrites and the
    # checkpoint did not. Preallocated segments read back as zeros past what was synced.
    log, wheel = s._files()
    wheel.close()
    log.close()
    s._log = s._wheel = None
    for seg in (root / "timerlog").iterdir():
        seg.write_bytes(saved.get(seg.name, bytes(seg.stat().st_size)))
    (root / "timercheck").write_bytes(checkpoint)

    s = TimerStore(str(root), precision_ms=10, slot_ms=100, wheel_slots=20, clock=clock, records_per_segment=64)
    s.load()
    assert s.enqueue_offset == 42
    s.enqueue(b, 83)  # the timer service's replay of the CommitLog from enqueue_offset
    got = [o for k in range(5) for o in offsets(drain(s, t + 2_500 + k * 1_000))]
    assert sorted(got) == list(range(1, 83))
    s.close()


def test_chain_walk_stops_at_a_broken_link(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A chain link past the log's end, to an unwritten record, or not to an older record ends the walk
    with an error, keeping what was read (it used to read zeros as records, or loop for ever)."""
    log = TimerLog(tmp_path / "timerlog", 64)
    recs = np.zeros(5, RECORD_DTYPE)
    recs["magic"] = MAGIC_SIGNATURE | 1
    recs["prev"] = [-1, 0, 1, 3, 2]  # slot chain 4 -> 2 -> 1 -> 0; record 3 links to itself
    log.append(recs)
    assert list(log.chain(4)) == [4, 2, 1, 0]
    with caplog.at_level("ERROR", logger="tidalmq.schedule.timer_log"):
        assert list(log.chain(7)) == []
        assert list(log.chain(3)) == [3]
        log.zero(1, 2)  # a record the cut took: its zeros would read as a link to 0
        assert list(log.chain(4)) == [4, 2]
    assert ["past the log's end" in m for m in caplog.messages] == [True, False, False]
    assert "links forward" in caplog.messages[1] and "unwritten record 1" in caplog.messages[2]
    log.close()


def test_consumed_segments_are_deleted(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    for k in range(10):
        s.enqueue(
            make_entries(deliver_ms=t + 50 * k + np.arange(30), offset=k * 30 + np.arange(30)), (k + 1) * 30
        )
    log = s._log
    assert log is not None and len(log.segments()) >= 5
    assert len(s.pop_due(t + 1_000)) == 300
    s.enqueue(np.zeros(0), 301)
    s.pop_due(t + 2_000)
    s.commit_delivered()
    assert len(log.segments()) <= 1


def test_many_in_one_slot_across_segments(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now // 100 * 100 + 100
    n = 1_000  # ~16 segments of 64 records, one chain
    rng = np.random.default_rng(1)
    d = t + rng.integers(0, 100, n)
    for part in np.array_split(np.arange(n), 7):
        s.enqueue(make_entries(deliver_ms=d[part], offset=part), int(part[-1]) + 1)
    got = s.pop_due(t + 100)
    assert len(got) == n
    assert np.all(np.diff(got["deliver_ms"]) >= 0)


def test_geometry_mismatch_refused(tmp_path: Path, clock: Clock) -> None:
    s = TimerStore(str(tmp_path / "t"), slot_ms=100, precision_ms=100, wheel_slots=20, clock=clock)
    s.load()
    s.close()
    with pytest.raises(ValueError):
        TimerStore(str(tmp_path / "t"), slot_ms=100, precision_ms=100, wheel_slots=30, clock=clock).load()


def test_idle_for_weeks_then_resume(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    assert len(s.pop_due(t + 30 * DAY)) == 0  # empty wheel: one jump, not 26 000 slot steps
    assert s.committed_cursor[0] == (t + 30 * DAY) // 100 * 100
    clock.now = t + 30 * DAY
    s.enqueue(make_entries(deliver_ms=[clock.now + 5_000, clock.now + 50], offset=[1, 2]), 3)
    assert offsets(drain(s, clock.now + 5_000)) == [2, 1]


def test_long_outage_with_rolled_entries(open_store: Open, clock: Clock) -> None:
    s = open_store()
    t = clock.now
    d = t + np.arange(1, 200) * 997  # up to ~200 s: many rolls at a 2 s horizon
    s.enqueue(make_entries(deliver_ms=d, offset=np.arange(199)), 199)
    s.close()
    s.load()
    got = drain(s, t + 1_000_000)
    assert offsets(got) == list(range(199)) and list(got["deliver_ms"]) == list(d)
    assert s.pending_count() == 0 and s.next_due_ms() is None


def test_commit_after_a_last_tick_pop_then_a_lull_longer_than_a_revolution(open_store: Open, clock: Clock) -> None:
    # Driven as the broker's timer service drives it: pop, commit the last popped key (sync=False), a periodic
    # sync. The message is due in its slot's last tick (t + 95 rounds up to t + 100, the next slot), so the pop
    # that releases it also moves the cursor into the next slot.
    s = open_store()  # 100 ms slots, 20 slots: a 2 s revolution
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t + 95], offset=[1]), 2)
    clock.now = t + 100
    got = s.pop_due(clock.now)
    assert offsets(got) == [1]
    s.commit_delivered((int(got["deliver_ms"][-1]), int(got["offset"][-1])), sync=False)
    s.commit_delivered(s.committed_cursor, sync=True)
    clock.now += 3 * 2_000  # a lull of three revolutions, nothing due
    assert len(s.pop_due(clock.now)) == 0
    s.enqueue(make_entries(deliver_ms=[clock.now + 50], offset=[3]), 4)
    clock.now += 50
    assert offsets(s.pop_due(clock.now)) == [3]
    assert s.next_due_ms() is None


def test_commit_of_the_last_pop_follows_the_cursor_into_empty_slots(open_store: Open, clock: Clock) -> None:
    # A late pop with a limit: the entry is taken and the cursor runs on over empty slots up to its bound.
    # Committing that entry must let the cursor go further (a roll filed beyond the bound comes back due).
    s = open_store()
    t = clock.now
    s.enqueue(make_entries(deliver_ms=[t], offset=[0]), 1)
    clock.now = t + 2_000  # one revolution late
    got = s.pop_due(clock.now, 1)
    s.commit_delivered((int(got["deliver_ms"][0]), int(got["offset"][0])), sync=False)
    assert s.enqueue(make_entries(deliver_ms=[clock.now], offset=[2]), 3).rolled == 1
    assert offsets(s.pop_due(clock.now, 1)) == [2]


def test_live_cells_are_the_window_of_the_wheel(tmp_path) -> None:  # noqa: ANN001
    """live_cells compares in place; the cells it returns are those a walk over the window (after,
    after + slots) finds: the slot each cell holds matches the window's, and the cell has records."""
    import numpy as np

    from tidalmq.schedule.timer_wheel import TimerWheel

    slots = 97
    wheel = TimerWheel(tmp_path / "wheel", slots)
    rng = np.random.default_rng(7)
    for after in (0, 5, 96, 97, 1000, 12345):
        cells = wheel.cells
        cells["slot"] = after + rng.integers(-slots, 2 * slots, slots)  # stale, current and future revolutions
        cells["last"] = np.where(rng.random(slots) < 0.7, rng.integers(0, 1 << 20, slots), -1)
        n = np.arange(after + 1, after + slots, dtype=np.int64)
        walk = cells[n % slots]
        expected = walk[(walk["slot"] == n) & (walk["last"] >= 0)]
        got = wheel.live_cells(after)
        assert sorted(got["slot"].tolist()) == sorted(expected["slot"].tolist())
        assert sorted(got["last"].tolist()) == sorted(expected["last"].tolist())
    del cells, walk, expected, got  # views of the mapping: closing it needs them gone
    wheel.close()


def test_uniq_hashes_are_uniq_hash_of_each_key() -> None:
    """The enqueue path hashes a chunk's keys together; the values are the ones timerlog holds (a cancel
    computed one by one must match them), 0 for a message without a key."""
    keys = ["T+A", None, "Topic+7F0000010000000000000000000000AB", "主题+ü", "", *(f"T+{i}" for i in range(200))]
    got = uniq_hashes(keys)
    assert got == [0 if k is None else uniq_hash(k) for k in keys]
    # the values timerlog files already hold: blake2b, 8-byte digest, little-endian, signed
    assert [uniq_hash(k) for k in keys if k is not None] == [
        int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little", signed=True)
        for k in keys if k is not None]
    assert any(h < 0 for h in got) and any(h > 0 for h in got)  # signed, as the int64 column holds them
    assert uniq_hashes([]) == []




def test_a_batch_is_filed_grouped_by_slot_so_each_chain_is_one_run_a_batch(open_store: Open, clock: Clock) -> None:
    """A batch whose deliver times spread over many slots is appended grouped by slot (CommitLog order within
    each), so a slot's chain holds one contiguous run per batch: entering a slot walks runs, not records.
    What is popped, and the cancels applied, are the same as for any order."""
    s = open_store(slot_ms=1000)  # 1 s slots, a 20 s horizon, 64-record segments: runs cross segments
    t = (clock.now // 1000 + 2) * 1000
    log, _ = s._files()
    rng = np.random.default_rng(3)
    d = t + rng.integers(0, 3000, 600)  # three slots, interleaved in CommitLog order
    start = log.write_pos
    s.enqueue(make_entries(deliver_ms=d, offset=np.arange(600), size=1, uhash=np.arange(600) + 1), 600)
    s.enqueue(make_entries(deliver_ms=d[:100], offset=np.arange(601, 701), size=1, uhash=np.arange(601, 701) + 1), 701)
    victim = 17
    s.enqueue(make_entries(deliver_ms=[int(d[victim])], offset=[701], uhash=[victim + 1], flags=[MAGIC_DELETE]), 702)
    recs = log.gather(np.arange(start, start + 600))
    assert np.all(np.diff(recs["filed_slot"]) >= 0), "the batch was not appended grouped by slot"
    for slot in np.unique(recs["filed_slot"]):
        mine = recs[recs["filed_slot"] == slot]
        assert np.all(np.diff(mine["offset"]) > 0), "CommitLog order lost within a slot"
        assert sorted(mine["offset"].tolist()) == sorted(np.flatnonzero(d // 1000 == slot).tolist())
    got = drain(s, t + 3000)
    # the cancel drops its target; everything else comes out once, in (deliver time, offset) order
    expected = sorted((int(dd), o) for o, dd in [*enumerate(d), *((601 + i, d[i]) for i in range(100))] if o != victim)
    assert [(int(x), int(o)) for x, o in zip(got["deliver_ms"], got["offset"], strict=True)] == expected
