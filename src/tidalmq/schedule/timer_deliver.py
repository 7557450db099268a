"""The timer's deliveries (RocketMQ's TimerDequeueGetService and TimerDequeuePutMessageService): the rounds
that pop what fell due from the TimerStore, re-store each body in its real topic and queue in (deliver time,
CommitLog offset) order with one ``put_messages`` call a batch, then commit.

In the schedule process (``pipeline``) up to ``pipeline_depth`` batches are in flight to the broker,
answered and committed in order. Exactly-once across SIGKILL rests on the journal (schedule/timer_journal.py):
after a restart the TimerStore re-pops from its last durable commit; entries at or below the journal's
*done* key were delivered already and are skipped; entries of a batch that was in flight (*intent* > *done*)
are looked up in the real topic's index by UNIQ_KEY and skipped when their copy is there. Whatever is
delivered again without that proof is counted (``redelivered``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tidalmq.common import message as mc
from tidalmq.common.record import RecordError, RecordView, view_record
from tidalmq.schedule import timer_takeover
from tidalmq.schedule.entries import ENTRY_DTYPE
from tidalmq.schedule.restore import TIMER_PARKING_PROPERTIES, copy_in_real_topic, restore_record
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.schedule.timer_access import PipelinedPuts, TimerStoreAccess
from tidalmq.schedule.timer_fields import EnqueueFields, deliver_of
from tidalmq.schedule.timer_journal import NONE_KEY, DeliverJournal
from tidalmq.schedule.timer_store import TimerStore
from tidalmq.schedule.timer_view import TimerMetrics
from tidalmq.store.results import AppendResult, PutRequest, PutStatus

log = logging.getLogger(__name__)

DELIVER_BATCH = 512


@dataclass(slots=True)
class _Batch:
    """A delivery batch between its put and the broker's answer."""

    due: np.ndarray  # the entries popped (ENTRY_DTYPE)
    requests: list[PutRequest]
    owners: list[int]  # index in ``due`` of each request's last entry
    lateness: list[int]
    topics: list[tuple[str, int]]  # (real topic, deliver ms) of each record
    last: tuple[int, int]  # the key (deliver_ms, offset) of the last entry
    wait: Callable[[], list[AppendResult]] = list


class TimerDeliver:
    """The deliveries of one TimerStore (``timer``) into ``store`` (or through ``pipeline``). Owns the
    batches in flight, those to retry, the journal, and what may have been delivered before a crash or by
    an old master (``load``); counts in ``metrics`` (per topic), ``stats`` and ``counters``; calls
    ``mark_dirty`` when the TimerStore's commit moved."""

    def __init__(self, store: TimerStoreAccess, timer: TimerStore, fields: EnqueueFields, metrics: TimerMetrics,
                 root: Path, *, stats: ScheduleStats, counters: Counter[str], clock: Callable[[], int],
                 mark_dirty: Callable[[], None], pipeline: PipelinedPuts | None = None,
                 pipeline_depth: int = 1) -> None:
        self.store = store
        self.timer = timer
        self.fields = fields
        self.metrics = metrics
        self.root = root
        self.stats = stats
        self.counters = counters
        self.clock = clock
        self.mark_dirty = mark_dirty
        # Puts that answer later (the schedule process's channel to the broker): up to pipeline_depth
        # delivery batches in flight, so the next one is prepared while the broker appends this one.
        self.pipeline = pipeline
        self.pipeline_depth = max(1, pipeline_depth) if pipeline is not None else 0  # 0: answered at once
        self.journal = DeliverJournal(root / "timerdeliver")
        self._inflight: deque[_Batch] = deque()
        self._retry = np.empty(0, ENTRY_DTYPE)  # popped, the store refused them: re-stored first next round
        self._verify_upto = NONE_KEY  # after a crash: entries up to here may already be in their real topic
        # A replica promoted (schedule/timer_takeover.py): entries up to here may have been delivered by the
        # old master, whatever their CommitLog offset.
        self._takeover_upto = NONE_KEY
        self._load_watermark = 0  # everything delivered before a crash lies below this CommitLog offset
        self.last_lateness_ms = 0

    def load(self, load_watermark: int, takeover_upto_ms: int | None) -> None:
        """After the TimerStore's load (``load_watermark``: its enqueue offset then): open the journal, and
        take what it and a takeover (``takeover_upto_ms``) say may be delivered already."""
        if takeover_upto_ms is not None:
            self._takeover_upto = (takeover_upto_ms, 1 << 62)
        self._load_watermark = load_watermark
        self.journal.open()
        if self.journal.intent > self.journal.done:
            self._verify_upto = self.journal.intent

    def committed(self, commit: tuple[int, int]) -> None:
        """The TimerStore's commit ``commit`` is durable: past everything an old master could have delivered,
        the takeover is over."""
        if self._takeover_upto != NONE_KEY and commit > self._takeover_upto:
            timer_takeover.finish(self.root)
            self._takeover_upto = NONE_KEY

    def deliver_round(self) -> bool:
        """Pop a batch of what fell due (or the batch to retry) and put it; False when nothing was due."""
        if len(self._retry):
            due, self._retry = self._retry, np.empty(0, ENTRY_DTYPE)
        else:
            due = self.timer.pop_due(self.clock(), DELIVER_BATCH)
            if len(due) == 0:
                return False
        now = self.clock()
        requests: list[PutRequest] = []
        last_records: list[bytearray] = []  # the records of requests[-1]
        owners: list[int] = []  # index in ``due`` of each request's last entry
        lateness: list[int] = []
        topics: list[tuple[str, int]] = []
        skipped_keys: list[tuple[str, int]] = []
        for i, e in enumerate(due.tolist()):
            d, off, _uh, size, _fl = e
            key = (d, off)
            if key <= self.journal.done and off < self._load_watermark:
                # Delivered before a crash; the TimerStore's durable commit had not caught up. (Only entries
                # indexed before the crash can have been delivered: one replayed after it may be filed at a
                # time before the journal's key, and must go out.)
                self.counters["duplicatesSkipped"] += 1
                props = self.fields.properties(off, size)
                if props is not None:
                    skipped_keys.append((props.get(mc.REAL_TOPIC, ""), deliver_of(props, d)))
                continue
            got = self._read_parked(off, size)
            if got is None:
                self.counters["unreadable"] += 1
                continue
            view, parked = got
            real_deliver = deliver_of(parked, d)
            if (key <= self._verify_upto and off < self._load_watermark) or key <= self._takeover_upto:
                if self._already_delivered(parked):
                    self.counters["duplicatesSkipped"] += 1
                    skipped_keys.append((parked.get(mc.REAL_TOPIC, ""), real_deliver))
                    continue
                if not self.store.has_index:
                    self.counters["redelivered"] += 1
            try:
                topic, qid, record = restore_record(view, {
                    mc.TIMER_ENQUEUE_MS: str(view.store_timestamp), mc.TIMER_DEQUEUE_MS: str(now)}, parked,
                    TIMER_PARKING_PROPERTIES)
            except ValueError as err:
                self.counters["unreadable"] += 1
                log.error("%s; skipped", err)
                continue
            if requests and requests[-1].topic == topic and requests[-1].queue_id == qid:
                last_records.append(record)
                owners[-1] = i
            else:
                last_records = [record]
                requests.append(PutRequest(topic, qid, last_records))
                owners.append(i)
            lateness.append(now - real_deliver)
            topics.append((topic, real_deliver))
        for t, d in skipped_keys:
            self.metrics.topics.add(t, d, -1)
        batch = _Batch(due, requests, owners, lateness, topics, (int(due["deliver_ms"][-1]), int(due["offset"][-1])))
        if requests:
            # The journal's intent covers every batch in flight (the broker acknowledges them in order).
            self._inflight.append(batch)
            self.journal.write(max(b.last for b in self._inflight), self.journal.done)
            batch.wait = self._submit(requests)
        else:
            self._inflight.append(batch)  # nothing to put: done once the batches before it are
        while len(self._inflight) > self.pipeline_depth:
            self._complete(self._inflight.popleft())
        return True

    def _submit(self, requests: list[PutRequest]) -> Callable[[], list[AppendResult]]:
        if self.pipeline is None:
            results = self.store.put_messages(requests)
            return lambda: results
        return self.pipeline.submit_put(requests)

    def drain(self) -> None:
        """Complete every batch in flight (in order)."""
        while self._inflight:
            self._complete(self._inflight.popleft())

    def _complete(self, batch: _Batch) -> None:
        """The broker answered ``batch`` (the oldest in flight): count what it stored, move the journal's
        done key and the TimerStore's commit up to it. After a refusal, every later batch in flight was
        refused too (the broker refuses puts after a failed one until RESUME): they are all retried, in
        order, once the ones in flight are answered."""
        due, requests, owners = batch.due, batch.requests, batch.owners
        done_upto: tuple[int, int] | None = batch.last
        if requests:
            results = batch.wait()
            ok = 0
            for req, res in zip(requests, results, strict=True):
                if res.status != PutStatus.PUT_OK:
                    log.warning("re-storing timer messages into %s failed: %s; retrying", req.topic, res.status)
                    break
                ok += 1
            if ok < len(requests):
                first_failed = owners[ok - 1] + 1 if ok else 0
                retry = [due[first_failed:]]
                for later in self._inflight:  # refused by the broker after this one: nothing of them stored
                    if later.requests:
                        later.wait()
                    retry.append(later.due)
                self._inflight.clear()
                self._retry = np.concatenate(retry)
                if self.pipeline is not None:
                    self.pipeline.resume()
                done_upto = (int(due["deliver_ms"][first_failed - 1]), int(due["offset"][first_failed - 1])) \
                    if first_failed else None
            delivered = sum(len(r.records) for r in requests[:ok])
            lateness = batch.lateness[:delivered]
            self.stats.delivered(lateness)
            for t, d in batch.topics[:delivered]:
                self.metrics.topics.add(t, d, -1)
            if lateness:
                self.last_lateness_ms = max(lateness)
            if done_upto is not None:
                intent = max((b.last for b in self._inflight), default=done_upto)
                self.journal.write(max(intent, done_upto), done_upto)
        if done_upto is not None and done_upto <= self.timer.read_cursor:
            if done_upto > self.timer.committed_cursor:
                self.timer.commit_delivered(done_upto, sync=False)
        self.mark_dirty()
        if self._retry.size:
            time.sleep(0.05)  # the store is refusing writes (disk full, shutting down): do not spin

    def _read_parked(self, phys: int, size: int) -> tuple[RecordView, dict[str, str]] | None:
        """A parked record read in place, and its properties (nothing else of it is decoded: the
        delivered copy is made from its bytes); None, logged, when it cannot be read."""
        raw = self.store.select_one_message_by_offset(phys, size)
        try:
            if raw is not None:
                view = view_record(raw)
                return view, view.properties
        except RecordError as e:
            log.error("timer message at %d (size %d) cannot be decoded (%s); skipped", phys, size, e)
            return None
        log.error("timer message at %d (size %d) cannot be read; skipped", phys, size)
        return None

    def _already_delivered(self, props: dict[str, str]) -> bool:
        """After a crash mid-batch: is the copy of the message with these (parked) properties in its
        real topic already?"""
        return copy_in_real_topic(self.store, props, mc.TIMER_DEQUEUE_MS)
