"""TimerStore: RocketMQ 5's timer message store (TimerLog + TimerWheel + TimerCheckpoint), pure and synchronous.

The caller (the broker's timer service) owns the CommitLog: it enqueues the index of every message it stored
under ``rmq_sys_wheel_timer`` (and of every TIMER_DEL_UNIQKEY cancel), pops what fell due, re-stores those
bodies in their real topic, then commits. The body is written to the CommitLog once; a delivery beyond the
wheel's horizon "rolls" by moving only its 48-byte TimerLog record, never the message.

Ordering: everything is delivered in (deliver_ms, CommitLog offset) order, the read cursor. A message enqueued
with a deliver time the cursor has already passed is "late": it is filed at the cursor (deliver_ms raised to the
cursor's time), so it goes out at once and after everything already delivered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tidalmq.schedule.entries import ENTRY_DTYPE, drop_cancelled, sort_dedup
from tidalmq.schedule.timer_checkpoint import TimerCheckpoint
from tidalmq.schedule.timer_flush import FlushPoint, TimerFlush
from tidalmq.schedule.timer_log import (
    MAGIC_BATCH,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    MAGIC_SIGNATURE,
    RECORD_DTYPE,
    TimerLog,
    valid_mask,
)
from tidalmq.schedule.timer_wheel import TimerWheel

logger = logging.getLogger(__name__)

DAY_MS = 86_400_000
_NO_LIMIT = 1 << 62


def ms_now() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class EnqueueResult:
    accepted: int = 0  # records filed (messages and cancel markers)
    duplicates: int = 0  # below the enqueue watermark or repeated in the batch: already indexed
    late: int = 0  # deliver time already passed by the read cursor: filed to go out at once
    rolled: int = 0  # beyond the wheel's horizon: filed to roll
    cancels_too_late: int = 0  # delete markers for a time the cursor has passed: nothing left to cancel


class TimerStore:
    """The persistent timer index. Not thread-safe: one owner calls it (the broker runs it off the loop)."""

    def __init__(
        self,
        root_dir: str,
        precision_ms: int = 1000,
        slot_ms: int = 1000,
        wheel_slots: int | None = None,
        max_delay_ms: int = 400 * DAY_MS,
        clock: Callable[[], int] = ms_now,
        records_per_segment: int = 1 << 20,
        key_hashes: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    ) -> None:
        if precision_ms < 1 or slot_ms % precision_ms:
            raise ValueError("precision_ms must be >= 1 and divide slot_ms")
        self.root = Path(root_dir)
        self.precision_ms = precision_ms
        self.slot_ms = slot_ms
        # Default horizon: RocketMQ's TIMER_WHEEL_TTL_DAY, 7 days.
        self.wheel_slots = wheel_slots if wheel_slots is not None else 7 * DAY_MS // slot_ms
        if self.wheel_slots < 2:
            raise ValueError("wheel_slots must be >= 2")
        self.max_delay_ms = max_delay_ms
        self.clock = clock
        self.records_per_segment = records_per_segment
        # An entry filed with uhash 0 has its delete key's hash found only when a delete marker for its
        # millisecond meets it (_merge_current): key_hashes(offsets, sizes) reads them from the CommitLog.
        # Cancels are rare, so an enqueue round need not hash every message's key. None: such entries
        # are never cancelled.
        self.key_hashes = key_hashes
        self._log: TimerLog | None = None
        self._wheel: TimerWheel | None = None
        # Records appended but not yet linked from their cells: cells move only once the batch is closed.
        self._pending_cells: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._hint: int | None = None  # lowest slot after the cursor that may be live, when _hint_known
        self._hint_known = False
        self._buf = np.empty(0, ENTRY_DTYPE)  # the current slot's deliverable entries, sorted
        self._bi = 0  # next of them to pop
        self._cancels = np.empty(0, ENTRY_DTYPE)  # delete markers filed in the current slot
        self._released = (0, -1)  # the read cursor: last popped entry, or (slot start, -1) once past it
        # The last entry actually popped. Entering the next slot moves the read cursor past it, so "all popped
        # is committed" must be judged against this key, not the cursor (else a commit of the last popped
        # entry never clears _uncommitted and the cursor wedges a revolution later).
        self._popped = (0, -1)
        self._durable_slot = 0  # slot of the commit in the checkpoint on disk
        self._flush: TimerFlush | None = None  # the durable commit of the files, once loaded
        self._uncommitted = False  # popped entries not yet committed

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Open (or create) the files and recover: cut a torn batch, revise the wheel from the TimerLog tail
        past the last flush, and position the read cursor at the last commit."""
        self.root.mkdir(parents=True, exist_ok=True)
        cp = TimerCheckpoint.read(self.root / "timercheck")
        if cp is not None and (cp.slot_ms, cp.wheel_slots, cp.records_per_segment) != (
            self.slot_ms,
            self.wheel_slots,
            self.records_per_segment,
        ):
            raise ValueError(
                f"timer store at {self.root} was made with slot_ms={cp.slot_ms} wheel_slots={cp.wheel_slots} "
                f"records_per_segment={cp.records_per_segment}"
            )
        log = self._log = TimerLog(self.root / "timerlog", self.records_per_segment)
        self._wheel = TimerWheel(self.root / "timerwheel", self.wheel_slots)
        if cp is None:
            start = self.clock() // self.slot_ms * self.slot_ms
            cp = TimerCheckpoint(self.slot_ms, self.wheel_slots, self.records_per_segment, read_ms=start)
            segs = log.segments()
            cp.flush_pos = segs[0] << log.shift if segs else 0
        self._flush = TimerFlush(cp, self.root / "timercheck")
        self._watermark = cp.enqueue_offset
        self._seg_max: dict[int, int] = dict(cp.segment_max_slot)
        self._commit = (cp.read_ms, cp.read_offset)
        self._slot = self._durable_slot = cp.read_ms // self.slot_ms
        self._uncommitted = False
        self._popped = self._commit
        self._recover_tail(cp.flush_pos)
        # The commit slot was entered (and its rolls re-filed) before anything in it could be committed.
        self._enter(self._slot, roll=False)
        self._release_to(self._commit)
        self.flush()

    def close(self) -> None:
        """Flush and release the files. Popped but uncommitted deliveries are delivered again after load().
        A flush that fails (a full disk) still releases them, then raises: the files are left as a kill
        would leave them, which load() recovers from."""
        if self._log is None:
            return
        try:
            self.flush()
        finally:
            assert self._wheel is not None and self._flush is not None
            self._flush.close()
            self._log.close()
            self._wheel.close()
            self._log = self._wheel = None

    def flush(self) -> None:
        """Make the TimerLog and wheel durable, then record it in the checkpoint (that order: the checkpoint
        must never claim more than the files hold)."""
        point = self.flush_point()
        self.sync_point(point)
        self.flushed(point, delete_consumed=False)

    # A flush in three steps (schedule/timer_flush.py): the point taken and ``flushed`` under the caller's
    # lock, ``sync_point`` without it.

    def flush_point(self) -> FlushPoint:
        """What a checkpoint written now would claim, and the TimerLog segments to sync before it."""
        log, _ = self._files()
        assert self._flush is not None
        return self._flush.point(log, self._watermark, self._commit, self._seg_max)

    def sync_point(self, point: FlushPoint) -> None:
        """``TimerFlush.sync``: the point's segments and the wheel synced, then its checkpoint written."""
        _, wheel = self._files()
        assert self._flush is not None
        self._flush.sync(point, wheel)

    def flushed(self, point: FlushPoint, delete_consumed: bool = True) -> None:
        """After ``sync_point``: the durable commit moves (which moves the bound on the cursor), and the
        TimerLog segments that checkpoint no longer needs are deleted."""
        self._durable_slot = max(self._durable_slot, point.commit[0] // self.slot_ms)
        if delete_consumed:
            self._delete_consumed(point.commit[0] // self.slot_ms, point.write_pos)

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, entries: np.ndarray, enqueue_commit_offset: int) -> EnqueueResult:
        """Index a batch of timer messages read from the CommitLog, in CommitLog order.

        ``enqueue_commit_offset`` is the CommitLog offset the caller has read up to (the end of this batch).
        Entries whose offset is below the watermark left by earlier batches are dropped as already indexed,
        so a caller may replay from ``enqueue_offset`` after a crash without double delivery."""
        log, wheel = self._files()
        e = np.asarray(entries, dtype=ENTRY_DTYPE)
        res = EnqueueResult()
        fresh = e["offset"] >= self._watermark
        if len(e):
            # Keep the first occurrence of each CommitLog offset (np.unique returns first indexes).
            _, first = np.unique(e["offset"], return_index=True)
            once = np.zeros(len(e), dtype=bool)
            once[first] = True
            fresh &= once
        res.duplicates = int(len(e) - fresh.sum())
        e = e[fresh]
        if len(e):
            horizon = self.clock() + self.max_delay_ms
            if int(e["deliver_ms"].max()) > horizon:
                raise ValueError(f"deliver time beyond max_delay_ms={self.max_delay_ms}")
        self._file(e, res)
        if res.accepted or enqueue_commit_offset > self._watermark:
            self._watermark = max(self._watermark, enqueue_commit_offset)
            self._append_marker()
        return res

    def cancel(self, deliver_ms: int, uniq_hash: int) -> bool:
        """File a delete marker (TIMER_DEL_UNIQKEY) outside the CommitLog path. Every not-yet-delivered entry
        with this deliver time and key hash is dropped. False when the cursor is already past deliver_ms.
        A broker should prefer enqueueing the cancel message itself (flags=MAGIC_DELETE) so a replay
        re-files it; this is for tools and tests."""
        e = np.zeros(1, ENTRY_DTYPE)
        e["deliver_ms"], e["uhash"], e["offset"], e["flags"] = deliver_ms, uniq_hash, -1, MAGIC_DELETE
        res = EnqueueResult()
        self._file(e, res)
        self._append_marker()
        return res.cancels_too_late == 0

    def _file(self, e: np.ndarray, res: EnqueueResult) -> None:
        if len(e) == 0:
            return
        is_del = (e["flags"] & MAGIC_DELETE) != 0
        d = e["deliver_ms"].copy()
        late = d < self._released[0]
        too_late = late & is_del
        res.cancels_too_late = int(too_late.sum())
        res.late = int((late & ~is_del).sum())
        if too_late.any():
            e, d, is_del, late = e[~too_late], d[~too_late], is_del[~too_late], late[~too_late]
        d[late] = self._released[0]
        recs = np.zeros(len(e), RECORD_DTYPE)
        recs["deliver_ms"] = d
        recs["offset"] = e["offset"]
        recs["uhash"] = e["uhash"]
        recs["size"] = e["size"]
        recs["magic"] = MAGIC_SIGNATURE | MAGIC_DEFAULT | np.where(is_del, MAGIC_DELETE, 0)
        res.rolled = self._file_records(recs)
        res.accepted = len(recs)

    def _file_records(self, recs: np.ndarray) -> int:
        """Choose each record's slot (its own, or the wheel's last slot to roll from), thread and append.
        Returns how many were rolled."""
        log, wheel = self._files()
        if len(recs) == 0:
            return 0
        target = recs["deliver_ms"] // self.slot_ms
        # The last slot whose cell no live slot uses: the ring must stay valid from the durable commit on,
        # where recovery would restart. _advance keeps the cursor below it.
        far = self._durable_slot + self.wheel_slots - 1
        roll = target > far
        filed = np.where(roll, far, target)
        # Appended grouped by slot (in their order within each): a slot's records from one batch are then a
        # contiguous run of its chain, which TimerLog.chain walks a run at a time, not a record at a time.
        # In CommitLog order, a batch of messages due over many slots left every chain a record per step,
        # and entering a slot many messages fall due in delayed its deliveries (hot_paths_bench's "timer slot
        # entry").
        if len(filed) > 1 and (filed[1:] < filed[:-1]).any():
            order = np.argsort(filed, kind="stable")
            recs, filed, roll = recs[order], filed[order], roll[order]
        recs["filed_slot"] = filed
        recs["magic"] = np.where(roll, recs["magic"] | MAGIC_ROLL, recs["magic"] & ~MAGIC_ROLL)
        pos = np.arange(log.write_pos, log.write_pos + len(recs), dtype=np.int64)
        recs["prev"] = wheel.link(recs["filed_slot"], pos, recs["magic"])
        log.append(recs)
        self._pending_cells.append((recs["filed_slot"], pos, recs["magic"]))
        self._note_segments(recs["filed_slot"], pos)
        here = recs["filed_slot"] == self._slot
        if here.any():
            self._merge_current(recs[here])
        later = recs["filed_slot"][~here]
        if len(later) and self._hint_known:
            low = int(later.min())
            self._hint = low if self._hint is None else min(self._hint, low)
        return int(roll.sum())

    def _append_marker(self) -> None:
        """Close the batch: one BATCH record carrying the watermark, then point the cells at the batch."""
        log, wheel = self._files()
        m = np.zeros(1, RECORD_DTYPE)
        m["deliver_ms"] = self.clock()
        m["offset"] = self._watermark
        m["prev"] = m["filed_slot"] = -1
        m["magic"] = MAGIC_SIGNATURE | MAGIC_BATCH
        log.append(m)
        for filed, pos, magic in self._pending_cells:
            wheel.commit(filed, pos, magic)
        self._pending_cells.clear()

    def _note_segments(self, filed: np.ndarray, pos: np.ndarray) -> None:
        assert self._log is not None
        segs = pos >> self._log.shift
        for seg in np.unique(segs):
            top = int(filed[segs == seg].max())
            s = int(seg)
            self._seg_max[s] = max(self._seg_max.get(s, -1), top)

    # ------------------------------------------------------------------ dequeue

    def pop_due(self, now_ms: int, limit: int = _NO_LIMIT) -> np.ndarray:
        """Entries due at ``now_ms`` (deliver_ms rounded up to precision_ms <= now), in (deliver_ms, offset)
        order, cancelled and duplicate entries removed. At most ``limit``. Advances the in-memory cursor only;
        commit_delivered() makes it durable.

        The cursor may run at most one wheel revolution (minus two slots) ahead of the last *durable* commit:
        the ring's cells are reused every revolution, and recovery restarts from that commit. A caller that
        pops without committing for that long gets a short answer until it commits."""
        self._files()
        out: list[np.ndarray] = []
        cutoff = now_ms // self.precision_ms * self.precision_ms
        now_slot = now_ms // self.slot_ms
        while limit > 0:
            buf, i = self._buf, self._bi
            if i < len(buf):
                end = int(np.searchsorted(buf["deliver_ms"], cutoff, side="right"))
                take = min(end - i, limit)
                if take > 0:
                    out.append(buf[i : i + take])
                    self._bi = i = i + take
                    limit -= take
                    self._released = self._popped = (int(buf["deliver_ms"][i - 1]), int(buf["offset"][i - 1]))
                    self._uncommitted = True
                if i < len(buf):
                    break  # the rest of this slot is not due yet, or the limit is reached
            if not self._advance(now_slot):
                break
        return np.concatenate(out) if out else np.empty(0, ENTRY_DTYPE)

    def _advance(self, now_slot: int) -> bool:
        """Move the cursor to the next live slot due by ``now_slot`` or, when none, towards ``now_slot`` over
        empty slots (so the filing window keeps up with time). False when it cannot move."""
        bound = self._durable_slot + self.wheel_slots - 2
        if (
            bound <= self._slot
            and not self._uncommitted
            and self._commit[0] // self.slot_ms > self._durable_slot
        ):
            self.flush()  # everything popped is committed: make it durable, which moves the bound
            bound = self._durable_slot + self.wheel_slots - 2
        nxt = self._next_live(now_slot)
        if nxt is None and not self._uncommitted and now_slot > bound and self._next_live(None) is None:
            # The wheel is empty and nothing is outstanding: jump straight to now and make it durable.
            self._enter(now_slot, roll=True)
            self._commit = self._released
            self.flush()
            return True
        if nxt is not None and nxt <= bound:
            target = nxt
        else:
            # An empty slot: just before the next live one, or now, within the bound.
            target = min(now_slot if nxt is None else nxt - 1, bound)
        if target <= self._slot:
            return False
        self._enter(target, roll=True)
        if not self._uncommitted:
            self._commit = self._released  # nothing outstanding: the cursor is the commit
            if target > self._durable_slot + self.wheel_slots // 2:
                self.flush()
        return True

    def commit_delivered(self, upto: tuple[int, int] | None = None, sync: bool = True) -> None:
        """Record that entries up to ``upto`` = (deliver_ms, offset) (default: all popped) were re-stored in
        their real topics. Uncommitted pops are delivered again after a crash (at-least-once). With ``sync``
        the checkpoint is written now and consumed TimerLog segments are deleted."""
        key = self._released if upto is None else (int(upto[0]), int(upto[1]))
        if key > self._released:
            raise ValueError(f"cannot commit {key}: only popped up to {self._released}")
        if key > self._commit:
            self._commit = key
        if key >= self._popped:
            # Everything popped is re-stored. The cursor may have entered later (empty) slots since the last
            # pop: those are done too, so the commit follows the cursor, or the bound on the cursor (one
            # revolution past the durable commit) would never move.
            self._uncommitted = False
            self._commit = max(self._commit, self._released)
        if sync:
            point = self.flush_point()
            self.sync_point(point)
            self.flushed(point)

    def next_due_ms(self) -> int | None:
        """When pop_due() next has work (a delivery or a roll), for the caller's timer; None if nothing pends."""
        if self._bi < len(self._buf):
            d = int(self._buf["deliver_ms"][self._bi])
            return -(-d // self.precision_ms) * self.precision_ms
        nxt = self._next_live(None)
        return None if nxt is None else nxt * self.slot_ms

    def _next_live(self, upto_slot: int | None) -> int | None:
        if not self._hint_known or (self._hint is not None and self._hint <= self._slot):
            assert self._wheel is not None
            self._hint = self._wheel.next_live(self._slot)
            self._hint_known = True
        if self._hint is None or (upto_slot is not None and self._hint > upto_slot):
            return None
        return self._hint

    def _enter(self, n: int, roll: bool) -> None:
        """Make slot n the current one: load its chain, re-file its rolls further on (index records only),
        keep its deliverable entries in memory, sorted, cancels applied, duplicates removed."""
        log, wheel = self._files()
        self._slot = n
        self._released = (n * self.slot_ms, -1)
        self._buf = np.empty(0, ENTRY_DTYPE)
        self._bi = 0
        self._cancels = np.empty(0, ENTRY_DTYPE)
        if self._hint_known and self._hint is not None and self._hint <= n:
            self._hint_known = False
        head = wheel.head(n)
        if head < 0:
            return
        recs = log.gather(log.chain(head))
        magic = recs["magic"]
        rolled = (magic & MAGIC_ROLL) != 0
        if roll and rolled.any():
            moved = recs[rolled].copy()
            self._file_records(moved)
            self._append_marker()
        self._merge_current(recs[~rolled])

    def _merge_current(self, recs: np.ndarray) -> None:
        """Add records filed in the current slot to the in-memory due list."""
        is_del = (recs["magic"] & MAGIC_DELETE) != 0
        if is_del.any():
            self._cancels = np.concatenate([self._cancels, _entries(recs[is_del])])
        rest = self._buf[self._bi :]
        new = _entries(recs[~is_del])
        merged = np.concatenate([rest, new]) if len(new) else rest
        cancels = self._cancels
        if len(cancels) and len(merged) and self.key_hashes is not None:
            unknown = (merged["uhash"] == 0) & np.isin(merged["deliver_ms"], cancels["deliver_ms"])
            if unknown.any():  # written in place: a view of _buf at most, which merged replaces below
                merged["uhash"][unknown] = self.key_hashes(merged["offset"][unknown], merged["size"][unknown])
        merged = drop_cancelled(merged, cancels["deliver_ms"], cancels["uhash"])
        self._buf = sort_dedup(merged)
        self._bi = 0

    def _release_to(self, key: tuple[int, int]) -> None:
        """Skip the in-memory entries at or before ``key`` (delivered and committed before a restart)."""
        buf = self._buf
        done = (buf["deliver_ms"] < key[0]) | ((buf["deliver_ms"] == key[0]) & (buf["offset"] <= key[1]))
        self._buf = buf[~done]
        self._bi = 0
        self._released = max(key, (self._slot * self.slot_ms, -1))

    # ------------------------------------------------------------------ recovery and retention

    def _recover_tail(self, flush_pos: int) -> None:
        log, wheel = self._files()
        self._pending_cells = []
        self._hint, self._hint_known = None, False
        tail = log.scan_tail(flush_pos)
        is_batch = (tail["magic"] & MAGIC_BATCH) != 0
        marks = np.flatnonzero(is_batch)
        keep = int(marks[-1]) + 1 if len(marks) else 0
        end = flush_pos + len(tail)
        if keep < len(tail):
            # A batch without its closing marker: cut it whole (the caller's replay re-enqueues it), and one
            # record more in case a half-written record stopped the scan.
            log.zero(flush_pos + keep, end + 1)
        log.write_pos = flush_pos + keep
        self._rebuild_dangling_cells(log.write_pos)
        tail, is_batch = tail[:keep], is_batch[:keep]
        if len(marks):
            self._watermark = max(self._watermark, int(tail["offset"][marks[-1]]))
        recs_pos = np.arange(flush_pos, flush_pos + keep, dtype=np.int64)[~is_batch]
        recs = tail[~is_batch]
        if len(recs):
            live = recs["filed_slot"] >= self._slot
            wheel.commit(recs["filed_slot"][live], recs_pos[live], recs["magic"][live])
            self._note_segments(recs["filed_slot"], recs_pos)

    def _rebuild_dangling_cells(self, end: int) -> None:
        """Re-file from the TimerLog every live cell that points at or past its valid end ``end``.

        A power cut can leave the wheel newer than the log: the kernel may write the wheel's mmapped pages
        back at any moment, while TimerLog records appended since the last flush() were never synced. Such
        a cell's head is gone, and everything else chained under it would be lost with it (or, linked onto
        by new records, read back as zeros). Its durable records are still in the log, each with a correct
        ``prev`` (a record only ever links to an older one), so the cell is emptied and re-filed from the
        records below ``end`` filed in a slot still ahead of the commit. The records the cut lost were
        appended after the checkpoint's enqueue watermark, so the caller's CommitLog replay files them again.
        A cheap check (one compare over the wheel); the log is read only after such a cut."""
        log, wheel = self._files()
        cells = wheel.reset_dangling(end, self._slot)
        if len(cells) == 0:
            return
        want = np.zeros(self.wheel_slots, dtype=bool)
        want[cells] = True
        first, last = self._slot, self._slot + self.wheel_slots - 1
        refiled = 0
        for base, recs in log.records_below(end):
            f = recs["filed_slot"]
            mine = (f >= first) & (f <= last) & valid_mask(recs["magic"])
            mine[mine] = want[f[mine] % self.wheel_slots]
            at = np.flatnonzero(mine)
            wheel.commit(f[at], base + at, recs["magic"][at])
            refiled += len(at)
        logger.warning("timer wheel: %d cells pointed past the TimerLog's end %d (a power cut); re-filed %d "
                    "records from the log", len(cells), end, refiled)

    def _delete_consumed(self, commit_slot: int, flush_pos: int) -> None:
        """Delete TimerLog segments whose every record is filed in a slot before ``commit_slot`` (the
        commit of the checkpoint on disk): those slots are delivered and their rolls re-filed; and none
        from the one holding ``flush_pos`` (that checkpoint's) on. A record lives at most one horizon, so
        so does a segment, however long the delays."""
        log, _ = self._files()
        flush_seg = flush_pos >> log.shift
        for seg in sorted(self._seg_max):
            if seg >= flush_seg:
                break
            if self._seg_max[seg] < commit_slot:
                log.delete_segment(seg)
                del self._seg_max[seg]
        # Segments holding only markers never entered _seg_max.
        for seg in log.segments():
            if seg < flush_seg and seg not in self._seg_max:
                log.delete_segment(seg)

    # ------------------------------------------------------------------ introspection

    @property
    def enqueue_offset(self) -> int:
        """The CommitLog offset to replay timer messages from after load()."""
        return self._watermark

    @property
    def read_cursor(self) -> tuple[int, int]:
        """(deliver_ms, offset) of the last popped entry, or (slot start, -1); late entries are raised to it."""
        return self._released

    @property
    def committed_cursor(self) -> tuple[int, int]:
        return self._commit

    def pending_count(self) -> int:
        """Entries not yet popped: RocketMQ's per-slot counts (a cancel subtracts one), plus the current
        slot's remaining entries. Exact unless a cancel matched nothing or an entry was indexed twice."""
        _, wheel = self._files()
        cells = wheel.live_cells(self._slot)
        return max(0, len(self._buf) - self._bi + int(cells["num"].sum()) + int(cells["rolls"].sum()))

    def histogram(self, now_ms: int) -> dict[str, int]:
        """Pending entries by time to delivery: due, next minute, hour, day, later; 'rolled' counts those
        beyond the wheel's horizon (their exact time is in their record, not in the wheel)."""
        _, wheel = self._files()
        bounds = np.array([0, 60_000, 3_600_000, DAY_MS], dtype=np.int64)
        names = ["due", "minute", "hour", "day", "later"]
        out = dict.fromkeys(names, 0)
        rest = self._buf["deliver_ms"][self._bi :] - now_ms
        for k, c in zip(
            *np.unique(np.searchsorted(bounds, rest, side="left"), return_counts=True), strict=True
        ):
            out[names[int(k)]] += int(c)
        cells = wheel.live_cells(self._slot)
        ahead = cells["slot"] * self.slot_ms - now_ms
        cls = np.searchsorted(bounds, ahead, side="left")
        for k in range(len(names)):
            out[names[k]] += int(cells["num"][cls == k].sum())
        out["rolled"] = int(cells["rolls"].sum())
        return out

    def _files(self) -> tuple[TimerLog, TimerWheel]:
        if self._log is None or self._wheel is None:
            raise RuntimeError("TimerStore is not loaded")
        return self._log, self._wheel


def _entries(recs: np.ndarray) -> np.ndarray:
    out = np.zeros(len(recs), ENTRY_DTYPE)
    for name in ("deliver_ms", "offset", "uhash", "size"):
        out[name] = recs[name]
    return out
