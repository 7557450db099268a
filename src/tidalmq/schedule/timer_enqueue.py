"""The timer's enqueue (RocketMQ's TimerEnqueueGetService and TimerEnqueuePutService): the rounds that read
the entries of ``rmq_sys_wheel_timer`` queue 0 (each parked message's CommitLog offset, size and deliver
time) from where the last stopped, read what each message needs of its properties (``EnqueueFields``) and
file them in the TimerStore, with the per-topic counts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from itertools import compress, repeat

import numpy as np

from tidalmq.common import message as mc
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.schedule import timer_fields as tf
from tidalmq.schedule.entries import ENTRY_DTYPE, make_entries, uniq_hashes
from tidalmq.schedule.restore import copy_in_real_topic
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.schedule.timer_access import TimerStoreAccess
from tidalmq.schedule.timer_fields import EnqueueFields, FieldColumns, Fields
from tidalmq.schedule.timer_log import MAGIC_DELETE
from tidalmq.schedule.timer_store import TimerStore
from tidalmq.schedule.timer_view import TimerMetrics

log = logging.getLogger(__name__)

# Enqueue in modest batches and drain what is due between them, so a burst of sends does not keep due
# messages waiting behind the indexing of newer ones. A round has a fixed cost (the field pass, filing in
# the TimerLog and the wheel) that larger rounds spread over more entries; a round runs whole only with
# nothing due within ENQUEUE_WHOLE_MS, and stops where its records would span more than one view
# (timer_fields.SPAN_MAX). The figures behind these constants: docs/benchmarks.md, "Enqueue rounds of 4,096".
ENQUEUE_BATCH = 4096
ENQUEUE_MIN = 128
# A round files what it read in one chunk when nothing falls due within this many ms, far more than a round
# of ENQUEUE_BATCH entries takes; otherwise in chunks of ENQUEUE_MIN, checking the clock between them. A
# chunk's numpy calls cost about the same for 128 entries as for 1,024 (docs/benchmarks.md, "whole enqueue
# rounds").
ENQUEUE_WHOLE_MS = 50
# From this many records of one topic on, a chunk's per-minute counts come from np.unique (a fixed cost)
# rather than a Counter of every record (a cost a record).
COUNT_UNIQUE_MIN = 512
# Under a burst of timer sends a round would come after every arrival the broker tells (one every few
# milliseconds) with a few hundred entries, paying a round's fixed cost that often (docs/benchmarks.md,
# "enqueue rounds that gather"). Entries all due later than ENQUEUE_GATHER_MS + ENQUEUE_GATHER_MARGIN_MS +
# the precision from now wait for more, up to ENQUEUE_BATCH, at most ENQUEUE_GATHER_MS from when a round
# first saw them: none of them can fall due meanwhile, and an entry due sooner ends the wait at once.
ENQUEUE_GATHER_MS = 20
ENQUEUE_GATHER_MARGIN_MS = 100


class TimerEnqueue:
    """The enqueue rounds of one TimerStore (``timer``), reading ``store``. Owns where the next round reads
    and the entries waiting for a fuller round; counts what it files in ``metrics`` (per topic), ``stats``
    and ``counters``; calls ``mark_dirty`` when the TimerStore changed and sets ``wake`` when what it filed
    may be due before the timer thread's wait ends."""

    def __init__(self, store: TimerStoreAccess, timer: TimerStore, fields: EnqueueFields, metrics: TimerMetrics, *,
                 stats: ScheduleStats, counters: Counter[str], clock: Callable[[], int], precision_ms: int,
                 wake: threading.Event, mark_dirty: Callable[[], None]) -> None:
        self.store = store
        self.timer = timer
        self.fields = fields
        self.metrics = metrics
        self.stats = stats
        self.counters = counters
        self.clock = clock
        self.precision_ms = precision_ms
        self.wake = wake
        self.mark_dirty = mark_dirty
        self._cq_offset = -1
        self._gather_since: float | None = None  # when a round first left entries for a fuller one (monotonic)
        self._gather_seen = 0  # the queue offset up to which those entries' deliver times were looked at
        # (real topic, deliver minute) -> new pending, of the current enqueue round's column chunks
        self._column_counts: Counter[tuple[bytes, int]] = Counter()

    def gather_wait_s(self) -> float | None:
        """While entries wait for a fuller round: the seconds left until the round reads them anyway."""
        since = self._gather_since
        return None if since is None else since + ENQUEUE_GATHER_MS / 1000.0 - time.monotonic()

    def enqueue_round(self) -> bool:
        """One round: read what arrived in the timer topic's queue since the last and file it in the TimerStore;
        False when there was nothing to do (or the entries wait for a fuller round)."""
        store = self.store
        if not store.has_queue(TIMER_TOPIC, 0):
            return False
        if self._cq_offset < 0:
            # The first entry not yet counted: CommitLog offset at or past the marks.
            mark = min(self.timer.enqueue_offset, self.metrics.mark)
            self._cq_offset = store.queue_offset_at_or_after(TIMER_TOPIC, 0, mark)
        gathered = self._gather_since is not None  # entries have waited for a fuller round
        if gathered and self._still_gathering():
            return False
        got = store.read_queue(TIMER_TOPIC, 0, self._cq_offset, ENQUEUE_BATCH)
        if len(got) == 0:
            if got.next_offset != got.start:  # a missing ConsumeQueue file: go on at the next one
                self._cq_offset = got.next_offset
                return True
            return False
        phys = got.commit_log_offsets
        sizes = got.sizes.astype(np.int32)
        deliver = got.tags_codes
        if not gathered and self._gathering(len(got), deliver):
            self._gather_seen = got.start + len(got)
            return False
        over = phys + sizes - phys[0] > tf.SPAN_MAX
        if over.any():  # large records: fewer of them, so that the round is read in one view (EnqueueFields.chunk_fields)
            fit = max(1, int(np.argmax(over)))
            phys, sizes, deliver = phys[:fit], sizes[:fit], deliver[:fit]
        watermark = self.timer.enqueue_offset
        low = min(watermark, self.metrics.mark)
        # Deliveries come first: once something falls due, the round stops (after ENQUEUE_MIN entries, so a
        # backlog of due messages slows enqueueing down without stopping it) and the deliver rounds run.
        due_at = self.timer.next_due_ms()
        n = len(phys)
        filed: list[np.ndarray] = []  # ENTRY_DTYPE, a chunk each
        enqueued = 0
        taken = 0
        # The whole round's fields in one pass (cheaper a record than chunk by chunk); None: read per chunk
        fields = self.fields.chunk_fields(phys, sizes, deliver)
        # With them read and nothing due within ENQUEUE_WHOLE_MS, the round is filed as one chunk (a chunk's
        # numpy calls cost about the same for 128 entries as for 1,024).
        whole = fields is not None and (due_at is None or due_at - self.clock() > ENQUEUE_WHOLE_MS)
        step = n if whole else ENQUEUE_MIN
        self._column_counts.clear()  # what a round that failed half-way had gathered: it is read again
        while taken < n:
            if taken and due_at is not None and self.clock() >= due_at:
                break
            chunk = slice(taken, min(n, taken + step))
            enqueued += self.enqueue_chunk(phys[chunk], sizes[chunk], deliver[chunk],
                                            None if fields is None else fields[chunk], low, watermark, filed)
            taken = chunk.stop
        self.add_column_counts()
        self._cq_offset = got.start + taken
        entries = filed[0] if len(filed) == 1 else np.concatenate(filed) if filed else np.empty(0, ENTRY_DTYPE)
        end = int(phys[taken - 1]) + int(sizes[taken - 1])
        res = self.timer.enqueue(entries, max(end, watermark))
        self.mark_dirty()
        self.stats.enqueued_n(enqueued)
        if res.cancels_too_late:
            self.counters["cancelsTooLate"] += res.cancels_too_late
            log.warning("%d cancel(s) arrived after their target was released", res.cancels_too_late)
        self.wake.set()  # an enqueued message may be due before the current wait ends
        return True

    def _still_gathering(self) -> bool:
        """While entries wait for a fuller round: whether they still may, reading only the deliver times
        of the arrivals since the last look (not the whole round again at every arrival)."""
        assert self._gather_since is not None
        end = self.store.queue_range(TIMER_TOPIC, 0).max_offset
        if (time.monotonic() - self._gather_since < ENQUEUE_GATHER_MS / 1000.0
                and end - self._cq_offset < ENQUEUE_BATCH):
            if end <= self._gather_seen:
                return True
            new = self.store.read_queue(TIMER_TOPIC, 0, self._gather_seen, end - self._gather_seen)
            if len(new) and new.start + len(new) == end and int(new.tags_codes.min()) > self._gather_soonest():
                self._gather_seen = end
                return True
        self._gather_since = None  # the round reads them all now
        return False

    def _gather_soonest(self) -> int:
        """Entries due later than this may wait for a fuller round."""
        return self.clock() + ENQUEUE_GATHER_MS + ENQUEUE_GATHER_MARGIN_MS + self.precision_ms

    def _gathering(self, n: int, deliver: np.ndarray) -> bool:
        """Whether the ``n`` entries a round first sees, due at ``deliver``, wait for a fuller round
        (ENQUEUE_GATHER_MS)."""
        if n < ENQUEUE_BATCH and int(deliver.min()) > self._gather_soonest():
            self._gather_since = time.monotonic()
            return True
        return False

    def enqueue_chunk(self, phys: np.ndarray, sizes: np.ndarray, deliver: np.ndarray,
                       fields: list[Fields | None] | FieldColumns | None, low: int, watermark: int,
                       filed: list[np.ndarray]) -> int:
        """Files up to ENQUEUE_MIN parked records as timer entries (ENTRY_DTYPE, appended to ``filed``) and
        the per-topic counts; returns how many new timer messages (not cancels) they hold. ``fields``: what
        ``EnqueueFields.chunk_fields`` read of them; None: read here, from one view of the chunk's CommitLog span when
        the records check out, else record by record."""
        if low > int(phys[0]):  # some were counted and filed before a restart
            keep = phys >= low
            if isinstance(fields, FieldColumns):
                fields = fields[keep]
            elif fields is not None:
                fields = [f for f, k in zip(fields, keep.tolist(), strict=True) if k]
            phys, sizes, deliver = phys[keep], sizes[keep], deliver[keep]
            if not len(phys):
                return 0
        if fields is None:
            fields = self.fields.chunk_fields(phys, sizes, deliver)
        if isinstance(fields, FieldColumns):
            return self.enqueue_columns(phys, sizes, deliver, fields, watermark, filed)
        p_l, s_l = phys.tolist(), sizes.tolist()
        cols: tuple[list[int], list[int], list[int], list[int], list[int]] = ([], [], [], [], [])
        if fields is None:
            fields = [self.fields.fields_of(self.fields.properties(p, s)) for p, s in zip(p_l, s_l, strict=True)]
        metrics_mark = self.metrics.mark
        counts: Counter[tuple[str, int]] = Counter()  # (real topic, deliver minute) -> new pending
        enqueued = 0
        keys: list[str | None] = []  # hashed together after the loop (uniq_hashes)
        for p, s, d, f in zip(p_l, s_l, deliver.tolist(), fields, strict=True):
            if f is None:
                self.counters["unreadable"] += 1
                continue
            real, uniq, del_key, out_ms, moved_from = f
            if d <= 0:
                d = out_ms
            if moved_from and uniq:
                if p >= watermark and self._moved_too_late(real, uniq, moved_from):
                    continue  # the message it replaces went out at its old time: it goes nowhere
                # One record, two entries in the same TimerStore batch: the delete marker of the message it
                # replaces (at the old time, as a TIMER_DEL_UNIQKEY's) and itself. The marker takes the
                # record's offset + 1, no record's start, so the TimerStore's once-per-offset rule keeps both.
                cols[0].append(moved_from)
                cols[1].append(p + 1)
                cols[2].append(s)
                keys.append(f"{real}+{uniq}")
                cols[4].append(MAGIC_DELETE)
                if p >= metrics_mark:
                    counts[(real, moved_from // 60_000)] -= 1
                self.counters["reschedules"] += 1
            cols[0].append(d)
            cols[1].append(p)
            cols[2].append(s)
            if del_key is not None:
                keys.append(del_key)
                cols[4].append(MAGIC_DELETE)
            else:
                keys.append(f"{real}+{uniq}" if uniq else None)
                cols[4].append(0)
            if p >= metrics_mark:  # not in the persisted per-topic counts yet
                if del_key is not None:
                    counts[(real, d // 60_000)] -= 1
                    self.counters["cancels"] += 1
                else:
                    counts[(real, d // 60_000)] += 1
            if p >= watermark and del_key is None:
                enqueued += 1
        cols[3].extend(uniq_hashes(keys))
        filed.append(make_entries(deliver_ms=cols[0], offset=cols[1], size=cols[2], uhash=cols[3], flags=cols[4]))
        for (real, minute), c in counts.items():
            if c:
                self.metrics.topics.add(real, minute * 60_000, c)
        return enqueued

    def _moved_too_late(self, real: str, uniq: str, moved_from: int) -> bool:
        """Whether the timer message a reschedule replaces may be delivered already: its time is not after
        what the TimerStore released (its marker would come too late), or its copy is in the real topic
        (released before a crash that took the TimerStore's cursor back with it). Counted, and logged."""
        late = moved_from <= self.timer.read_cursor[0] or copy_in_real_topic(
            self.store, {mc.REAL_TOPIC: real, mc.UNIQ_KEY: uniq}, mc.TIMER_DEQUEUE_MS)
        if late:
            self.counters["reschedulesTooLate"] += 1
            log.warning("reschedule of %s (%s) came after its old time %d: it stays delivered once, at that time",
                        uniq, real, moved_from)
        return late

    def enqueue_columns(self, phys: np.ndarray, sizes: np.ndarray, deliver: np.ndarray, fields: FieldColumns,
                         watermark: int, filed: list[np.ndarray]) -> int:
        """``enqueue_chunk`` for records read as columns: the same entries and counts, with no Python
        step per record. The delete keys' hashes are left 0: found when a cancel needs them (EnqueueFields.key_hashes)."""
        filed.append(make_entries(deliver_ms=deliver, offset=phys, size=sizes))
        new = phys >= self.metrics.mark  # not in the persisted per-topic counts yet
        topics = fields.topics
        if len(topics) == 1 and len(phys) >= COUNT_UNIQUE_MIN and new.all():
            # One topic, all new (a round of a burst): counted a minute at a time, not a record at a time
            minutes, counts = np.unique(deliver // 60_000, return_counts=True)
            pairs = zip(repeat(topics[0]), minutes.tolist(), strict=False)  # as many as minutes
            self._column_counts.update(dict(zip(pairs, counts.tolist(), strict=True)))
            return int(np.count_nonzero(phys >= watermark))
        minutes = (deliver // 60_000).tolist()
        # one topic (the usual round): no list of it a record
        real = repeat(topics[0]) if len(topics) == 1 else map(topics.__getitem__, fields.which.tolist())
        pairs = zip(real, minutes, strict=False)  # as many as minutes: ``real`` repeats, or has one a record
        # Added to the per-topic counts once a round (add_column_counts): a chunk's deliver times spread over
        # dozens of minutes, so adding chunk by chunk made a TopicCounts.add call every two or three messages.
        self._column_counts.update(pairs if new.all() else compress(pairs, new.tolist()))
        return int(np.count_nonzero(phys >= watermark))

    def add_column_counts(self) -> None:
        for (real, minute), c in self._column_counts.items():
            self.metrics.topics.add(real.decode("utf-8"), minute * 60_000, c)
        self._column_counts.clear()
