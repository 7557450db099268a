"""RocketMQ 4's delay levels (ScheduleMessageService).

A message sent with ``DELAY`` = level is parked in ``SCHEDULE_TOPIC_XXXX``, queue level − 1; the
ConsumeQueue entry's tag field holds its deliver time. One thread walks the 18 (or however many are
configured) level queues in order; each queue is FIFO by deliver time because all its messages have
the same delay, so a level only has to look at its head. Due messages are stored again in their real
topic and queue; per-level progress is persisted to ``config/delayOffset.json`` after each round
(at-least-once: a crash between the re-store and the persist re-delivers those messages).

At start a master first moves each level's offset past the messages whose copy is already in their real
topic (``catch_up``): the offsets a promoted slave copied from its old master (SlaveSynchronize, every 10 s)
lag what that master delivered, and so does a crashed master's own file. The copy is found in the index
by UNIQ_KEY; what the old master delivered but did not replicate is delivered again.

The table can change while the broker runs (``set_levels``, a live ``messageDelayLevel``): each parked message
carries the deliver time its level gave it, and a level the new table no longer has is still walked, at its
old delay, until its queue is empty (``draining``), so no pending message is left behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tidalmq.common import fastjson
from tidalmq.common.fileutil import persist_config, read_with_backup
from tidalmq.common.naming import SCHEDULE_TOPIC
from tidalmq.common.record import RecordError, view_record
from tidalmq.schedule.reschedule import DelayMoves
from tidalmq.schedule.restore import copy_in_real_topic, restore_record
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.store.api import MessageStore
from tidalmq.store.config import MAX_DELAY_LEVEL_MS, MAX_DELAY_LEVELS
from tidalmq.store.message_store import PutRequest, PutStatus

log = logging.getLogger(__name__)

MAX_BATCH = 512
IDLE_WAIT_S = 1.0


def _ms() -> int:
    return int(time.time() * 1000)


class ScheduleMessageService:
    def __init__(self, store: MessageStore, levels: dict[int, int], offset_path: str | Path,
                 stats: ScheduleStats | None = None, clock: Callable[[], int] = _ms,
                 moves: DelayMoves | None = None) -> None:
        self.store = store
        self.moves = moves  # messages a reschedule replaced: skipped (schedule/reschedule.py)
        self.levels = dict(sorted(levels.items()))
        self.max_level = max(self.levels) if self.levels else 0
        # Levels out of the table that still hold messages: walked at the delay they had until empty.
        self.draining: dict[int, int] = {}
        self._table_lock = threading.Lock()  # set_levels (the loop) against _drained (the delivery thread)
        self.offset_path = Path(offset_path)
        self.offsets: dict[int, int] = {}
        self.stats = stats or ScheduleStats()
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dirty = False
        self.caught_up = 0  # messages skipped at start: already delivered (catch_up)

    # lifecycle --------------------------------------------------------------------------------
    def load(self) -> None:
        raw = read_with_backup(self.offset_path)
        if raw:
            table = fastjson.loads(raw).get("offsetTable", {})
            for k, v in table.items():
                try:
                    self.offsets[int(k)] = int(v)
                except (TypeError, ValueError):
                    # Not a level and an offset: reported, and left out (a level is never a path).
                    log.warning("%s: ignoring entry %r: %r, not a delay level and an offset", self.offset_path, k, v)
        if self.moves is not None:
            self.moves.load()

    def persist(self) -> None:
        if persist_config(self.offset_path, fastjson.dumpb({"offsetTable": dict(sorted(self.offsets.items()))})):
            self._dirty = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ScheduleMessageService", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._dirty:
            self.persist()

    def set_levels(self, levels: dict[int, int]) -> None:
        """The table from now on (one reference swap each: the delivery thread reads either table whole).
        A level it drops is drained at its old delay."""
        with self._table_lock:
            draining = {**self.draining, **{lv: d for lv, d in self.levels.items() if lv not in levels}}
            self.draining = {lv: d for lv, d in draining.items() if lv not in levels}
            self.levels = dict(sorted(levels.items()))
            self.max_level = max(self.levels) if self.levels else 0
        self._wake.set()

    @property
    def walked(self) -> dict[int, int]:
        """Every level the delivery loop walks, with its delay: the table's, then the draining ones."""
        return {**self.levels, **self.draining} if self.draining else self.levels

    def adopt_leftovers(self) -> int:
        """At start: queues of levels the table lacks (it was shortened before a restart) that still hold
        messages are drained. Their delay is unknown: their deliver times are not corrected (no clip)."""
        found = 0
        for level in range(self.max_level + 1, MAX_DELAY_LEVELS + 1):
            if level in self.draining or not self.store.has_queue(SCHEDULE_TOPIC, level - 1):
                continue
            if self._undelivered(level):
                self.draining[level] = MAX_DELAY_LEVEL_MS
                found += 1
        if found:
            log.warning("delay levels: %d queue(s) of levels beyond messageDelayLevel hold messages; delivering "
                        "them at the times they were given", found)
        return found

    def on_arrival(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Store arrival listener: a newly parked message may be due sooner than the current wait."""
        if any(topic == SCHEDULE_TOPIC for topic, _ in arrivals):
            self._wake.set()

    # the delivery loop ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            # The index is built by reput: dispatch what the CommitLog holds before looking copies up.
            self.store.wait_reput(self.store.max_phy_offset, 30.0)
            self.adopt_leftovers()
            if self.moves is not None and self.store.has_index:
                self.moves.verify(self.store, self.offsets)
            self.catch_up()
        except Exception:
            log.exception("schedule catch-up failed; delivering from the offsets on file")
        while not self._stop.is_set():
            try:
                next_due = self.deliver_due()
            except Exception:
                log.exception("schedule delivery round failed")
                next_due = self._clock() + 1000
            wait = IDLE_WAIT_S if next_due is None else max(0.0, (next_due - self._clock()) / 1000.0)
            if wait > 0:
                self._wake.wait(min(wait, IDLE_WAIT_S))
            self._wake.clear()

    def deliver_due(self) -> int | None:
        """One round over all levels; returns the earliest deliver time still pending, if any."""
        earliest: int | None = None
        for level, delay_ms in self.walked.items():
            nxt = self._deliver_level(level, delay_ms)
            if nxt is not None and (earliest is None or nxt < earliest):
                earliest = nxt
            elif nxt is None and level in self.draining:
                self._drained(level)
        if self._dirty:
            self.persist()
        return earliest

    def _deliver_level(self, level: int, delay_ms: int) -> int | None:
        qid = level - 1
        offset = self.offsets.get(level, 0)
        while not self._stop.is_set():
            entries = self.store.read_queue(SCHEDULE_TOPIC, qid, offset, MAX_BATCH)
            offset = entries.start
            if len(entries) == 0:
                if entries.next_offset != offset:
                    offset = entries.next_offset  # past the end of one ConsumeQueue file
                    continue
                return None
            now = self._clock()
            deliver = entries.tags_codes
            # A deliver time further out than the level's delay came from a clock that went back:
            # correct it as RocketMQ's correctDeliverTimestamp does.
            deliver = deliver.clip(max=now + delay_ms)
            due = int((deliver <= now).sum()) if deliver[0] <= now else 0
            # Entries are in deliver order within a level, but a corrected one may break that: stop
            # at the first entry not yet due.
            if due:
                not_due = (deliver > now).nonzero()[0]
                due = int(not_due[0]) if len(not_due) else len(deliver)
            if due == 0:
                return int(deliver[0])
            delivered = self._restore(entries.commit_log_offsets[:due].tolist(), entries.sizes[:due].tolist(),
                                      deliver[:due].tolist(), now)
            offset += delivered
            self.offsets[level] = offset
            self._dirty = True
            if self.moves is not None:
                self.moves.passed(level, offset)
            if delivered < due:
                return now + 1000  # the store refused: try again in a second
        return None

    def _drained(self, level: int) -> None:
        """A draining level whose queue is read to its end leaves the walk (unless it came back meanwhile)."""
        if self._undelivered(level):
            return
        with self._table_lock:
            if level in self.draining:
                self.draining = {lv: d for lv, d in self.draining.items() if lv != level}

    def _undelivered(self, level: int) -> bool:
        rng = self.store.queue_range(SCHEDULE_TOPIC, level - 1)
        return rng.max_offset > max(self.offsets.get(level, 0), rng.min_offset)

    def catch_up(self) -> int:
        """Move each level past the head messages already delivered (their copy is in the real topic's
        index); a level is FIFO, so its first message without a copy ends the run. Returns how many."""
        if not self.store.has_index:
            return 0
        skipped = 0
        for level in self.walked:
            offset = self.offsets.get(level, 0)
            while not self._stop.is_set():
                entries = self.store.read_queue(SCHEDULE_TOPIC, level - 1, offset, MAX_BATCH)
                offset = entries.start
                n = 0
                for phys, size in zip(entries.commit_log_offsets.tolist(), entries.sizes.tolist(), strict=True):
                    if not self._has_copy(phys, size):
                        break
                    n += 1
                if n:
                    offset += n
                    self.offsets[level] = offset
                    skipped += n
                    self._dirty = True
                if n < len(entries) or len(entries) == 0 and entries.next_offset == offset:
                    break
                if len(entries) == 0:
                    offset = entries.next_offset  # past the end of one ConsumeQueue file
        if skipped:
            log.warning("delay levels: %d message(s) already delivered by a previous master skipped", skipped)
            self.persist()
        self.caught_up += skipped
        return skipped

    def _has_copy(self, phys: int, size: int) -> bool:
        raw = self.store.select_one_message_by_offset(phys, size)
        try:
            props = view_record(raw).properties if raw is not None else {}
        except RecordError:
            return False
        return copy_in_real_topic(self.store, props)

    def _restore(self, phys_offsets: list[int], sizes: list[int], deliver: list[int], now: int) -> int:
        requests: list[PutRequest] = []
        lateness: list[int] = []
        moves = self.moves
        for phys, size, when in zip(phys_offsets, sizes, deliver, strict=True):
            if moves is not None and phys in moves:
                requests.append(PutRequest("", -1, []))  # rescheduled: its copy waits in the timer
                continue
            raw = self.store.select_one_message_by_offset(phys, size)
            try:
                view = view_record(raw) if raw is not None else None
            except RecordError:
                view = None
            if view is None:
                log.error("scheduled message at %d (size %d) cannot be read; skipped", phys, size)
                requests.append(PutRequest("", -1, []))
                continue
            try:
                topic, queue_id, record = restore_record(view)
            except ValueError as e:
                log.error("%s; skipped", e)
                requests.append(PutRequest("", -1, []))
                continue
            requests.append(PutRequest(topic, queue_id, [record]))
            lateness.append(now - when)
        real = [r for r in requests if r.records]
        results = iter(self.store.put_messages(real)) if real else iter(())
        delivered = 0
        for req in requests:
            if not req.records:
                delivered += 1
                continue
            res = next(results)
            if res.status != PutStatus.PUT_OK:
                log.warning("re-storing a scheduled message into %s failed: %s", req.topic, res.status)
                break
            delivered += 1
        self.stats.delivered(lateness[:delivered])
        return delivered

    # observability ----------------------------------------------------------------------------
    def pending(self) -> dict[int, int]:
        """Messages waiting per level."""
        out = {}
        for level in self.walked:
            if self.store.has_queue(SCHEDULE_TOPIC, level - 1):
                rng = self.store.queue_range(SCHEDULE_TOPIC, level - 1)
                out[level] = max(0, rng.max_offset - max(self.offsets.get(level, 0), rng.min_offset))
        return out
