"""Rescheduling a pending message: what the store knows of it, and the delay-level side's journal.

A reschedule is ONE record: a copy of the pending message parked in ``rmq_sys_wheel_timer`` at the new time,
carrying RESCHEDULED_FROM, which names what it replaces (docs/scheduled-delivery.md, "Reschedule"):

- ``timer:<old deliver ms>`` — a timer message: the timer's enqueue files, from that one record and in one
  TimerStore batch, a delete marker at the old time (as TIMER_DEL_UNIQKEY's) and the new entry
  (schedule/timer_enqueue.py). A record replayed after a crash files both again, or neither when the old
  one was delivered meanwhile.
- ``delay:<level>:<CommitLog offset>`` — a delay-level message: its level queue is FIFO and read by the
  ScheduleMessageService, which must skip it. The broker writes the target to ``delayReschedule.json``
  (``DelayMoves``) before it stores the record; the service skips what the file names, and at start keeps
  only the entries whose record is in the CommitLog (a crash between the two leaves the old message as it
  was, to be delivered at its old time).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.common.fileutil import persist_config, read_with_backup
from tidalmq.common.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from tidalmq.common.record import RecordError, StoredMessage, decode_record
from tidalmq.schedule.timer_access import TimerStoreAccess

log = logging.getLogger(__name__)

TIMER_KIND, DELAY_KIND = "timer", "delay"
MAX_CANDIDATES = 64


def moved_from_timer(old_ms: int) -> str:
    return f"{TIMER_KIND}:{old_ms}"


def moved_from_delay(level: int, phys: int) -> str:
    return f"{DELAY_KIND}:{level}:{phys}"


def timer_moved_from(value: str | None) -> int:
    """The old deliver time a RESCHEDULED_FROM value of a timer target names; 0 for anything else."""
    if value and value.startswith(TIMER_KIND + ":"):
        digits = value[len(TIMER_KIND) + 1 :]
        if digits.isdigit():
            return int(digits)
    return 0


@dataclass
class Incarnation:
    """One parked record of a message (its original, or a reschedule's copy)."""

    kind: str  # TIMER_KIND (rmq_sys_wheel_timer) or DELAY_KIND (SCHEDULE_TOPIC_XXXX)
    record: StoredMessage
    deliver_ms: int
    level: int = 0


@dataclass
class ScheduleTarget:
    """What the store knows of the message a reschedule names: ``state`` pending (``current`` is its latest
    parked record), delivered, cancelled, unknown, or ambiguous (a key naming several: ``uniq_keys``)."""

    state: str
    uniq: str = ""
    current: Incarnation | None = None
    uniq_keys: list[str] = field(default_factory=list)


def _records(store: TimerStoreAccess, stored_topic: str, key: str) -> list[StoredMessage]:
    out = []
    for view in store.query_message(stored_topic, key, MAX_CANDIDATES, 0, 1 << 62):
        try:
            out.append(decode_record(view, read_body=False))
        except RecordError:
            continue
    return out


def _deliver_ms(m: StoredMessage, levels: dict[int, int]) -> tuple[int, int]:
    """(deliver ms, level) of a parked record (level 0 for the timer's)."""
    out = m.properties.get(mc.TIMER_OUT_MS, "")
    if m.topic == SCHEDULE_TOPIC:
        level = m.queue_id + 1
        return (int(out) if out.isdigit() else m.store_timestamp + levels.get(level, 1000)), level
    return (int(out) if out.isdigit() else 0), 0


def find_schedule_target(store: TimerStoreAccess, topic: str, uniq: str | None, key: str | None, now_ms: int,
                         levels: dict[int, int], delivered_upto: dict[int, int]) -> ScheduleTarget:
    """Look the message up in the index, by uniq key or by ``key`` (KEYS), among the parked records of
    ``topic`` in both schedule topics. ``delivered_upto``: per level, the queue offset its delivery reached.
    Reads the index (it may block on files): called off the event loop, once reput has caught up."""
    if uniq is None:
        found = {m.properties.get(mc.UNIQ_KEY) for t in (TIMER_TOPIC, SCHEDULE_TOPIC) for m in _records(store, t, key or "")
                 if m.properties.get(mc.REAL_TOPIC) == topic and mc.TIMER_DEL_UNIQKEY not in m.properties}
        uniqs = sorted(u for u in found if u)
        states = {u: find_schedule_target(store, topic, u, None, now_ms, levels, delivered_upto) for u in uniqs}
        pending = [u for u, s in states.items() if s.state == "pending"]
        if len(pending) > 1:
            return ScheduleTarget("ambiguous", uniq_keys=pending)
        if pending:
            return states[pending[0]]
        return next(iter(states.values())) if len(states) == 1 else ScheduleTarget("unknown")
    latest: StoredMessage | None = None
    for m in _records(store, TIMER_TOPIC, uniq) + _records(store, SCHEDULE_TOPIC, uniq):
        if m.properties.get(mc.REAL_TOPIC) != topic:
            continue
        if mc.TIMER_DEL_UNIQKEY in m.properties:
            if m.properties[mc.TIMER_DEL_UNIQKEY] == f"{topic}+{uniq}":
                return ScheduleTarget("cancelled", uniq)  # nothing follows a cancel
            continue
        if m.properties.get(mc.UNIQ_KEY) == uniq and (latest is None or m.commit_log_offset > latest.commit_log_offset):
            latest = m  # a reschedule's copy is always stored after what it replaces
    if latest is None:
        return ScheduleTarget("delivered" if store.query_message(topic, uniq, 1, 0, 1 << 62) else "unknown", uniq)
    deliver, level = _deliver_ms(latest, levels)
    inc = Incarnation(DELAY_KIND if level else TIMER_KIND, latest, deliver, level)
    if deliver <= now_ms or (level and latest.queue_offset < delivered_upto.get(level, 0)):
        return ScheduleTarget("delivered", uniq, inc)
    return ScheduleTarget("pending", uniq, inc)


@dataclass(frozen=True)
class DelayMove:
    """A delay-level message replaced by a reschedule's copy: skipped by its level's delivery."""

    level: int
    phys: int  # its CommitLog offset
    queue_offset: int
    topic: str
    uniq: str

    def to_json(self) -> dict[str, object]:
        return {"level": self.level, "phys": self.phys, "queueOffset": self.queue_offset, "topic": self.topic,
                "uniq": self.uniq}


class DelayMoves:
    """``config/delayReschedule.json``: the delay-level messages a reschedule replaced, written before the
    reschedule's record is stored. Shared by the broker's loop (``add``, ``discard``) and the delivery thread
    (``in``, ``passed``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._moves: dict[int, DelayMove] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        raw = read_with_backup(self.path)
        if not raw:
            return
        for d in fastjson.loads(raw).get("moves", []):
            try:
                m = DelayMove(int(d["level"]), int(d["phys"]), int(d["queueOffset"]), str(d["topic"]), str(d["uniq"]))
            except (KeyError, TypeError, ValueError):
                log.warning("%s: ignoring entry %r", self.path, d)
                continue
            self._moves[m.phys] = m

    def _persist(self) -> None:
        body = fastjson.dumpb({"moves": [m.to_json() for m in sorted(self._moves.values(), key=lambda m: m.phys)]})
        if not persist_config(self.path, body):
            raise OSError(f"cannot write {self.path}")

    def __contains__(self, phys: int) -> bool:
        return phys in self._moves

    def __len__(self) -> int:
        return len(self._moves)

    def add(self, move: DelayMove) -> None:
        """Written through before the reschedule's record is stored (OSError: nothing changed)."""
        with self._lock:
            self._moves[move.phys] = move
            try:
                self._persist()
            except OSError:
                del self._moves[move.phys]
                raise

    def discard(self, phys: int) -> None:
        """The reschedule's record was not stored: the message stays where it was."""
        with self._lock:
            if self._moves.pop(phys, None) is not None:
                self._persist()

    def passed(self, level: int, queue_offset: int) -> None:
        """The level's delivery moved past ``queue_offset``: its entries below are done with."""
        if not self._moves:
            return
        with self._lock:
            done = [p for p, m in self._moves.items() if m.level == level and m.queue_offset < queue_offset]
            if not done:
                return
            for p in done:
                del self._moves[p]
            try:
                self._persist()
            except OSError as e:  # kept in memory only: the next write carries the removal
                log.warning("%s: %s", self.path, e)

    def verify(self, store: TimerStoreAccess, delivered_upto: dict[int, int]) -> int:
        """At start, once reput has indexed the CommitLog: drop the entries whose reschedule record is not
        there (the broker stopped between the file and the record) or that delivery has passed. Returns how
        many were dropped."""
        with self._lock:
            dropped = 0
            for phys, m in list(self._moves.items()):
                mark = moved_from_delay(m.level, m.phys)
                stored = any(r.properties.get(mc.RESCHEDULED_FROM) == mark for r in _records(store, TIMER_TOPIC, m.uniq))
                if not stored or m.queue_offset < delivered_upto.get(m.level, 0):
                    del self._moves[phys]
                    dropped += 1
            if dropped:
                self._persist()
                log.warning("delay levels: %d reschedule(s) without their record or already passed dropped from %s",
                            dropped, self.path)
            return dropped
