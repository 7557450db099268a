"""TimerMessageService: RocketMQ 5's arbitrary delivery time on top of the TimerStore.

The send path (broker/schedule/hooks.TimerRewrite) parks a timer message in ``rmq_sys_wheel_timer`` queue 0 with
TIMER_OUT_MS = its deliver time; the CommitLog's dispatch copies that time into the ConsumeQueue entry's tag.
One thread then:

- **enqueues**: reads that ConsumeQueue from where the TimerStore's watermark says it stopped, reads each
  message's properties (REAL_TOPIC + UNIQ_KEY make the cancel hash; TIMER_DEL_UNIQKEY makes a delete marker) and
  hands the batch to ``TimerStore.enqueue`` — idempotent, so a replay after a crash files nothing twice;
- **delivers**: sleeps until ``next_due_ms`` (woken early by the store's arrival listener), pops what fell due,
  re-stores the bodies in their real topic and queue in (deliver time, CommitLog offset) order with one
  ``put_messages`` call per batch, then commits. In the schedule process (``pipeline``) up to
  ``pipeline_depth`` batches are in flight to the broker, answered and committed in order.

Exactly-once across SIGKILL: before each batch is re-stored its last key is written to a small journal
(``timerdeliver``, pwrite, no fsync — SIGKILL keeps the page cache), and again once the store accepted it. After
a restart the TimerStore re-pops from its last durable commit; entries at or below the journal's *done* key were
delivered already and are skipped; entries in a batch that was in flight (*intent* > *done*) are looked up in the
real topic's index by UNIQ_KEY and skipped when their copy is there. Whatever is delivered again without that
proof is counted (``redelivered``). A power loss is only as safe as the flushes (at-least-once).
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tidalmq.common import message as mc
from tidalmq.common.columns import gather_be
from tidalmq.common.fileutil import atomic_write
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import (
    CRC32_RESERVED_LEN,
    CRC_PLACEHOLDER,
    MIN_RECORD_SIZE,
    RecordError,
    RecordView,
    StoredMessage,
    decode_record,
    properties_span,
    view_record,
)
from tidalmq.common.record_columns import record_columns
from tidalmq.schedule import timer_takeover
from tidalmq.schedule.entries import ENTRY_DTYPE, make_entries, uniq_hashes
from tidalmq.schedule.restore import TIMER_PARKING_PROPERTIES, copy_in_real_topic, restore_record
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.schedule.timer_log import MAGIC_DELETE
from tidalmq.schedule.timer_store import DAY_MS, FlushPoint, TimerStore, ms_now
from tidalmq.store.message_store import AppendResult, DefaultMessageStore, PutRequest, PutStatus
from tidalmq.store.results import QueueEntries, QueueRange

log = logging.getLogger(__name__)

# Enqueue in modest batches and drain what is due between them, so a burst of sends does not keep due
# messages waiting behind the indexing of newer ones. A round's fixed cost (~170 us: the field pass, filing in
# the TimerLog and the wheel) is spread over up to this many entries: W2-shaped rounds of 1,024 cost 0.59 us a
# message, of 4,096 0.41 (docs/benchmarks.md); a whole round of 4,096 takes ~1.7 ms, and runs whole only with
# nothing due within ENQUEUE_WHOLE_MS. A round also stops where its records would span more than _SPAN_MAX.
ENQUEUE_BATCH = 4096
ENQUEUE_MIN = 128
# A round files what it read in one chunk when nothing falls due within this many ms, which a round of
# ENQUEUE_BATCH entries takes a fraction of (~1.7 ms here); in chunks of ENQUEUE_MIN, checking the clock
# between them, otherwise. One chunk: 0.72-0.78 -> 0.63 us a W2-shaped message (docs/benchmarks.md).
ENQUEUE_WHOLE_MS = 50
# From this many records of one topic on, a chunk's per-minute counts come from np.unique (a fixed cost)
# rather than a Counter of every record (a cost a record): a W2-shaped round 0.63 -> 0.57-0.60 us a message.
_COUNT_UNIQUE_MIN = 512
# Under a burst of timer sends a round comes after every arrival the broker tells (one STATE every few
# milliseconds) with a few hundred entries, and what a round costs whatever its size (filing in the
# TimerLog and the wheel, the field pass) was paid that often: ~170 us a round, 1.6 us a message in rounds of
# 170, 0.9 in rounds of 1,024 (docs/benchmarks.md). Entries all due later than ENQUEUE_GATHER_MS +
# ENQUEUE_GATHER_MARGIN_MS + the precision from now wait for more, up to ENQUEUE_BATCH, at most
# ENQUEUE_GATHER_MS from when a round first saw them: none of them can fall due meanwhile, and an entry due
# sooner ends the wait at once.
ENQUEUE_GATHER_MS = 20
ENQUEUE_GATHER_MARGIN_MS = 100
MAX_DELIVER_ROUNDS = 16
DELIVER_BATCH = 512
IDLE_WAIT_S = 1.0
SYNC_INTERVAL_MS = 1000  # how often the TimerStore's commit is made durable (bounds re-pops after a crash)
SLOT_MS = 1000
# While it works, the thread publishes its view (TimerView) at most this often unless a reader asked:
# counting the pending entries walks the whole wheel (tens of ms with the default 7-day wheel).
VIEW_INTERVAL_S = 1.0
# The properties the enqueue round and the duplicate skip read (the cancel hash, a delete marker, the
# real topic's counts, the deliver time when the tag lacks it).
_ENQUEUE_NAMES = b"|".join(n.encode() for n in (mc.REAL_TOPIC, mc.UNIQ_KEY, mc.TIMER_DEL_UNIQKEY, mc.TIMER_OUT_MS))
_ENQUEUE_PROPERTIES = re.compile(rb"(?:\A|\x02)(" + _ENQUEUE_NAMES + rb")\x01([^\x02]*)")
# The same in a round's properties joined with a mark before each record's (_chunk_fields): a mark no valid
# properties hold (an empty name with an empty value), found with no groups, that ends with the separator the
# first property name needs. A pattern that begins with a literal (the separator, not an alternation) lets re
# skip from separator to separator instead of trying the names at every byte (several times faster).
_RECORD_MARK = b"\x02\x01\x01\x02"
_ENQUEUE_PROPERTIES_MARKED = re.compile(rb"\x02(?:\x01\x01|(" + _ENQUEUE_NAMES + rb")\x01([^\x02]*))")
_REAL_TOPIC_B, _UNIQ_KEY_B, _TIMER_DEL_UNIQKEY_B = (n.encode() for n in (mc.REAL_TOPIC, mc.UNIQ_KEY, mc.TIMER_DEL_UNIQKEY))
# The columnar reading of a round (_FieldColumns): the parked properties end with what the broker appends,
# REAL_TOPIC, REAL_QID and TIMER_OUT_MS (TimerRewrite.timer_properties and park_batch), so one pass finds each
# record's real topic as that tail, right before the next record's mark or the end. As many tails as
# records and as many REAL_TOPIC names: one each, in record order. A cancel marker anywhere sends the round
# to the per-property loop.
_MARK_BYTES = _RECORD_MARK[:3]
_REAL_TOPIC_NAMED = b"\x02" + _REAL_TOPIC_B + b"\x01"
_PARKED_TAIL = re.compile(rb"\x02" + _REAL_TOPIC_B + rb"\x01([^\x02]*)\x02" + mc.REAL_QID.encode() + rb"\x01[^\x02]*\x02"
                          + mc.TIMER_OUT_MS.encode() + rb"\x01[^\x02]*\x02(?=\x02\x01\x01\x02|\Z)")
_CANCEL_FOUND = b"\x02" + _TIMER_DEL_UNIQKEY_B + b"\x01"
# The most of the CommitLog the enqueue round reads as one view for a chunk of ENQUEUE_MIN records
# (farther apart, they are read one by one).
_SPAN_MAX = 8 << 20
# What the enqueue round reads of a parked record: REAL_TOPIC, UNIQ_KEY, TIMER_DEL_UNIQKEY, TIMER_OUT_MS (0: none)
_Fields = tuple[str, str | None, str | None, int]


@dataclass(frozen=True, slots=True, eq=False)
class _FieldColumns:
    """What the enqueue round reads of records that are all ordinary timer messages (no cancel among them,
    each ending with the tail the broker appends, one REAL_TOPIC, each deliver time in its ConsumeQueue
    tag): their real topics, as the distinct topics' bytes and each record's index among them, filed
    without a Python step per record (``_enqueue_columns``). Their delete keys are not read: the
    TimerStore hashes one when a cancel for its millisecond comes (``TimerStore.key_hashes``)."""

    topics: list[bytes]
    which: np.ndarray  # int64, per record: its real topic's index in ``topics``

    @staticmethod
    def of(real: list[bytes]) -> _FieldColumns:
        index: dict[bytes, int] = {}
        which = np.fromiter((index.setdefault(t, len(index)) for t in real), dtype=np.int64, count=len(real))
        return _FieldColumns(list(index), which)

    @property
    def real(self) -> list[bytes]:
        """Each record's real topic."""
        return list(map(self.topics.__getitem__, self.which.tolist()))

    def __len__(self) -> int:
        return len(self.which)

    def __eq__(self, other: object) -> bool:  # the same topics for the same records (tests)
        return isinstance(other, _FieldColumns) and self.real == other.real

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, part: slice | np.ndarray) -> _FieldColumns:
        return _FieldColumns(self.topics, self.which[part])


def _field_columns(joined: bytes, n: int) -> _FieldColumns | None:
    """The REAL_TOPIC column of the ``n`` records whose properties ``joined`` holds, each after a
    _RECORD_MARK; None unless they are all ordinary timer messages (see _FieldColumns), or when the
    properties are not UTF-8. A record with two REAL_TOPICs and another with none would pair the wrong
    values: n marks (no properties of a record hold one), n REAL_TOPIC names and n tails, each ending a
    record, leave one each."""
    if _CANCEL_FOUND in joined or joined.count(_MARK_BYTES) != n or joined.count(_REAL_TOPIC_NAMED) != n:
        return None
    try:
        joined.decode("utf-8")  # one check for all (an ASCII mark cannot complete a sequence)
    except UnicodeDecodeError:
        return None
    real = _PARKED_TAIL.findall(joined)
    return _FieldColumns.of(real) if len(real) == n else None


# The tail read in place (_tail_columns): what ends every ordinary parked record's properties, right to left:
# TIMER_OUT_MS (its value the deliver time's digits, as the ConsumeQueue tag holds it), REAL_QID (a few
# digits), REAL_TOPIC (a validated topic name).
_OUT_NAMED = b"\x02" + mc.TIMER_OUT_MS.encode() + b"\x01"
_QID_NAMED = b"\x02" + mc.REAL_QID.encode() + b"\x01"
_TOPIC_NAMED = b"\x02" + mc.REAL_TOPIC.encode() + b"\x01"
_POW10 = 10 ** np.arange(1, 19, dtype=np.int64)  # a positive int64's digit count: searchsorted + 1
_QID_DIGITS_MAX = 4
_TAIL_TOPICS_MAX = 8  # more real topics than this in one round: the regex pass
# Anywhere in a round's span (a record's first property has no separator before it): a cancel may be among
# them, and the round takes the regex pass, which tells. A body holding these bytes only costs that pass.
_CANCEL_NAMED = mc.TIMER_DEL_UNIQKEY.encode() + b"\x01"


def _words(text: bytes) -> list[tuple[int, int]]:
    """``text`` (8 bytes or more) as (offset, little-endian 8-byte word) pairs that cover it: compared with
    the words read at those offsets, they tell whether ``text`` stands there."""
    offsets = [*range(0, len(text) - 8, 8), len(text) - 8]
    return [(o, int.from_bytes(text[o : o + 8], "little")) for o in offsets]


_OUT_WORDS, _QID_WORDS = _words(_OUT_NAMED), _words(_QID_NAMED)


def _stands_at(w8: np.ndarray, at: np.ndarray, words: list[tuple[int, int]]) -> np.ndarray:
    """Per position in ``at``, whether the text of ``words`` (``_words``) stands there in ``w8``'s buffer."""
    same = w8[at + words[0][0]] == words[0][1]
    for offset, word in words[1:]:
        same &= w8[at + offset] == word
    return same


_CRC_NAME_U8 = np.frombuffer(CRC_PLACEHOLDER[:9], dtype=np.uint8)  # "__CRC32#" and its \x01


def _before_crc(u8: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Where each record's properties end before the record CRC's trailer, for those that carry one (the
    tails ``_tail_columns`` reads come before it)."""
    at = ends - CRC32_RESERVED_LEN
    has = (at >= starts) & (u8[np.maximum(at, 0)[:, None] + np.arange(len(_CRC_NAME_U8))] == _CRC_NAME_U8).all(axis=1)
    return np.where(has, at, ends)


def _tail_columns(span: memoryview, u8: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  deliver: np.ndarray) -> _FieldColumns | None:
    """The real topics of the records at ``starts`` .. ``ends`` of ``span`` read from the tails their
    properties end with, checked column-wise with numpy (no regex over their properties; one search of the
    span, copied, for a cancel's name): None unless every record ends with TIMER_OUT_MS = its deliver time
    (``deliver``, all positive), after REAL_QID, after REAL_TOPIC, the round holds no cancel, and it names
    few real topics.

    The names are compared as unaligned 8-byte words, gathered one a record through a view of the span that
    steps one byte at a time (a gather of n words, not of n rows of bytes)."""
    if len(span) < 8 or _CANCEL_NAMED in bytes(span):  # a copy searches faster than re over the view
        return None
    ends = _before_crc(u8, starts, ends)  # the tails come before the record CRC's trailer, where there is one
    w8 = np.ndarray((len(span) - 7,), dtype="<u8", buffer=span, strides=(1,))
    digits = np.searchsorted(_POW10, deliver, side="right") + 1
    out_at = ends - 1 - digits - len(_OUT_NAMED)  # where "\x02TIMER_OUT_MS\x01" begins
    if (out_at - len(_QID_NAMED) - 2 < starts).any() or (u8[ends - 1] != 2).any():
        return None
    if not _stands_at(w8, out_at, _OUT_WORDS).all():
        return None
    # REAL_QID's value: its digits run back from TIMER_OUT_MS to the name's \x01 (one byte a width to look at)
    width = np.zeros_like(out_at)
    for w in range(1, _QID_DIGITS_MAX + 1):
        width[(width == 0) & (u8[np.maximum(out_at - 1 - w, 0)] == 1)] = w
    qid_at = out_at - width - len(_QID_NAMED)  # where "\x02REAL_QID\x01" begins
    if (width == 0).any() or (qid_at - 2 < starts).any() or not _stands_at(w8, qid_at, _QID_WORDS).all():
        return None
    # The real topics: the first record's read in place, every record checked against it; those that differ
    # read and checked next, a few topics at most.
    which = np.full(len(starts), -1, dtype=np.int64)
    topics: list[bytes] = []
    while (left := np.flatnonzero(which < 0)).size:
        if len(topics) == _TAIL_TOPICS_MAX:
            return None
        i = int(left[0])
        a, q = int(starts[i]), int(qid_at[i])
        record = bytes(span[a:q])
        named = record.rfind(_TOPIC_NAMED)
        if named < 0:
            return None
        topic = record[named + len(_TOPIC_NAMED):]
        if b"\x01" in topic or b"\x02" in topic:
            return None  # not a topic name: the name was found in something else (a length byte, say)
        tail = record[named:]
        at = qid_at[left] - len(tail)
        inside = at >= starts[left]
        same = _stands_at(w8, np.maximum(at, 0), _words(tail)) & inside
        if not same[0]:
            return None
        which[left[same]] = len(topics)
        topics.append(topic)
    try:
        for t in topics:
            t.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return _FieldColumns(topics, which)


@dataclass(frozen=True, slots=True)
class _SyncPoint:
    """A durable commit under way: the timer store's point and the per-topic counts taken with it."""

    store: FlushPoint
    metrics: bytes
    metrics_mark: int


_JOURNAL = struct.Struct("<qqqq")  # intent (deliver_ms, offset), done (deliver_ms, offset)
_NONE_KEY = (-(1 << 62), -1)


class TimerStoreAccess(Protocol):
    """What the service reads and writes of the store: DefaultMessageStore in the broker's process, a
    StoreFollower (store/follower.py) in the schedule process."""

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def has_index(self) -> bool: ...

    def has_queue(self, topic: str, queue_id: int) -> bool: ...

    def queue_range(self, topic: str, queue_id: int) -> QueueRange: ...

    def queue_offset_at_or_after(self, topic: str, queue_id: int, commit_log_offset: int) -> int: ...

    def read_queue(self, topic: str, queue_id: int, offset: int, max_n: int) -> QueueEntries: ...

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None: ...

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None: ...

    def put_messages(self, requests: Sequence[PutRequest]) -> list[AppendResult]: ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]: ...

    def wait_reput(self, offset: int, timeout: float) -> bool: ...


class PipelinedPuts(Protocol):
    """Puts whose answers come later, in the order they were made (schedule/timer_host.BrokerChannel)."""

    def submit_put(self, requests: Sequence[PutRequest]) -> Callable[[], list[AppendResult]]:
        """Send the put now; the returned function waits for its answer."""
        ...

    def resume(self) -> None:
        """After a failed put the broker refuses the following ones (nothing stored) until this."""
        ...


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


@dataclass
class CancelTarget:
    """What the broker knows of the message a cancel names (see find_cancel_target)."""

    state: str  # "pending", "delivered", "cancelled", "unknown"; "unchecked" when there is no index
    deliver_ms: int = 0
    real_qid: int = 0


@dataclass(frozen=True, slots=True)
class TimerView:
    """What the timer thread last published, for readers on other threads (runtime info, metrics): they
    read this instead of taking the thread's lock, which it holds through a put, an fsync and a wait.
    Replaced whole (one attribute store), never changed after publication."""

    published_ms: int
    pending: int
    histogram: dict[str, int]
    next_due_ms: int | None
    enqueue_offset: int
    topics: dict[str, Counter[int]]  # pending per real topic by deliver minute


def check_precision(precision_ms: int) -> int:
    if precision_ms < 10 or SLOT_MS % precision_ms:
        raise ValueError(f"timerPrecisionMs must be >= 10 and divide {SLOT_MS}, got {precision_ms}")
    return precision_ms


class RateMeter:
    """Events per second over the last ``window_s`` seconds, from a counter sampled on read."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def rate(self, total: int) -> float:
        now = time.monotonic()
        s = self._samples
        s.append((now, total))
        while len(s) > 2 and now - s[1][0] >= self.window_s:
            s.popleft()
        t0, c0 = s[0]
        return 0.0 if now - t0 <= 0 else (total - c0) / (now - t0)


class TopicCounts:
    """Pending timer messages per real topic, bucketed by deliver minute (RocketMQ's TimerMetrics, with times).

    Kept in memory, persisted at each durable commit with the enqueue watermark it matches. Exact across clean
    restarts; after a crash it can over-count the few messages committed between two snapshots (as RocketMQ's)."""

    def __init__(self) -> None:
        self.by_topic: dict[str, Counter[int]] = {}

    def add(self, topic: str, deliver_ms: int, n: int) -> None:
        c = self.by_topic.get(topic)
        if c is None:
            c = self.by_topic[topic] = Counter()
        m = deliver_ms // 60_000
        c[m] += n
        if c[m] <= 0:
            del c[m]
            if not c:
                del self.by_topic[topic]

    def pending(self) -> dict[str, int]:
        return {t: sum(c.values()) for t, c in self.by_topic.items()}

    def histogram(self, topic: str, now_ms: int) -> dict[str, int]:
        return histogram_of(self.by_topic.get(topic, Counter()), now_ms)

    def to_json(self) -> dict[str, dict[str, int]]:
        return {t: {str(k): v for k, v in c.items()} for t, c in self.by_topic.items()}

    @classmethod
    def from_json(cls, data: dict[str, dict[str, int]]) -> TopicCounts:
        out = cls()
        for t, c in data.items():
            out.by_topic[t] = Counter({int(k): int(v) for k, v in c.items() if int(v) > 0})
        return out


HISTOGRAM_BUCKETS = ("due", "minute", "hour", "day", "beyond")


def histogram_of(minutes: Counter[int] | dict[int, int], now_ms: int) -> dict[str, int]:
    """Counts by deliver minute -> due / next minute / hour / day / beyond."""
    out = dict.fromkeys(HISTOGRAM_BUCKETS, 0)
    for m, n in minutes.items():
        # Minute granularity: "due" only when the whole minute has passed (never call a future message due);
        # the other classes by the minute's start.
        ahead = m * 60_000 - now_ms
        if ahead + 59_999 < 0:
            out["due"] += n
        elif ahead <= 60_000:
            out["minute"] += n
        elif ahead <= 3_600_000:
            out["hour"] += n
        elif ahead <= DAY_MS:
            out["day"] += n
        else:
            out["beyond"] += n
    return out


class TimerMessageService:
    def __init__(self, store: TimerStoreAccess, root_dir: str | Path, *, precision_ms: int = 1000,
                 max_delay_ms: int = 400 * DAY_MS, stats: ScheduleStats | None = None,
                 clock: Callable[[], int] = ms_now, wheel_slots: int | None = None,
                 pipeline: PipelinedPuts | None = None, pipeline_depth: int = 1) -> None:
        self.store = store
        # Puts that answer later (the schedule process's channel to the broker): up to pipeline_depth
        # delivery batches in flight, so the next one is prepared while the broker appends this one.
        self.pipeline = pipeline
        self.pipeline_depth = max(1, pipeline_depth) if pipeline is not None else 0  # 0: answered at once
        self._inflight: deque[_Batch] = deque()
        self.root = Path(root_dir)
        self.precision_ms = check_precision(precision_ms)
        self.timer = TimerStore(str(self.root), precision_ms=precision_ms, slot_ms=SLOT_MS, wheel_slots=wheel_slots,
                                max_delay_ms=max_delay_ms, clock=clock, key_hashes=self._key_hashes)
        self.stats = stats or ScheduleStats()
        self.clock = clock
        self.topics = TopicCounts()
        self._metrics_path = self.root / "timermetrics"
        self._metrics_mark = 0  # enqueue watermark the persisted TopicCounts matches
        self._journal_fd = -1
        self._journal_done = _NONE_KEY
        self._journal_intent = _NONE_KEY
        self._verify_upto = _NONE_KEY  # after a crash: entries up to here may already be in their real topic
        # A replica promoted (schedule/timer_takeover.py): entries up to here may have been delivered by the
        # old master, whatever their CommitLog offset.
        self._takeover_upto = _NONE_KEY
        self._retry = np.empty(0, ENTRY_DTYPE)  # popped, the store refused them: re-stored first next round
        self._cq_offset = -1
        self._gather_since: float | None = None  # when a round first left entries for a fuller one (monotonic)
        self._gather_seen = 0  # the queue offset up to which those entries' deliver times were looked at
        self._load_watermark = 0  # everything delivered before a crash lies below this CommitLog offset
        self._lock = threading.Lock()  # the TimerStore is single-owner: the thread, load and shutdown
        self.view: TimerView | None = None  # published by the thread; readers never take the lock
        self._view_at = 0.0
        self._view_wanted = False
        self._changed = False
        self._view_cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The TimerFlush thread (RocketMQ's TimerFlushService): makes the commit durable, off the loop.
        self._flusher: threading.Thread | None = None
        self._flush_wanted = threading.Event()
        self._commit_failing: OSError | None = None  # the error of the last commit, until one succeeds
        # (real topic, deliver minute) -> new pending, of the current enqueue round's column chunks
        self._column_counts: Counter[tuple[bytes, int]] = Counter()
        self._last_sync = 0  # when the last flush point was taken (the service's clock)
        self._dirty = False
        self.counters = Counter[str]()
        self._enq_rate = RateMeter()
        self._del_rate = RateMeter()
        self.last_lateness_ms = 0

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        takeover = timer_takeover.begin(self.root, self.clock())
        if takeover is not None:
            self._takeover_upto = (takeover.verify_upto_ms, 1 << 62)
            log.warning("timer: taking over from a replica's store: wheel rebuilt from the CommitLog; messages "
                        "due up to %d are checked against the index for the old master's copies",
                        takeover.verify_upto_ms)
        self.timer.load()
        self._load_watermark = self.timer.enqueue_offset
        try:
            data = json.loads(self._metrics_path.read_text())
            self.topics = TopicCounts.from_json(data.get("topics", {}))
            self._metrics_mark = int(data.get("enqueueOffset", 0))
        except (OSError, ValueError):
            self._metrics_mark = 0  # no snapshot: recount whatever the replay re-reads
        self._metrics_mark = min(self._metrics_mark, self.timer.enqueue_offset)
        path = self.root / "timerdeliver"
        self._journal_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        raw = os.pread(self._journal_fd, _JOURNAL.size, 0)
        if len(raw) == _JOURNAL.size:
            i0, i1, d0, d1 = _JOURNAL.unpack(raw)
            self._journal_intent, self._journal_done = (i0, i1), (d0, d1)
            if self._journal_intent > self._journal_done:
                self._verify_upto = self._journal_intent
        else:
            self._write_journal(_NONE_KEY, _NONE_KEY)
        self._publish_view(self.timer.next_due_ms())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="TimerMessageService", daemon=True)
        self._flusher = threading.Thread(target=self._flush_loop, name="TimerFlush", daemon=True)
        self._thread.start()
        self._flusher.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        self._flush_wanted.set()
        if self._thread is not None:
            self._thread.join(15)
        if self._flusher is not None:
            self._flusher.join(15)
        if self._journal_fd < 0:
            return  # never loaded (a slave's), or already shut down
        with self._lock:
            try:
                try:
                    self._sync()
                finally:
                    self.timer.close()  # its files released even when its flush fails
            except OSError as e:  # a full disk: what is not committed is recovered as after a kill
                log.error("timer store final commit failed: %s; the next start recovers from the journal", e)
            except Exception:
                log.exception("timer store final commit failed")
            finally:
                if self._journal_fd >= 0:
                    os.close(self._journal_fd)
                    self._journal_fd = -1

    def on_arrival(self, arrivals: dict[tuple[str, int], int]) -> None:
        """Store arrival listener (reput thread): a timer message or cancel was dispatched."""
        if any(topic == TIMER_TOPIC for topic, _ in arrivals):
            self._wake.set()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        # Dispatch what the CommitLog holds first: the replay reads the ConsumeQueue and the post-crash check
        # reads the index, both built by reput.
        self.store.wait_reput(self.store.max_phy_offset, 30.0)
        while not self._stop.is_set():
            self._wake.clear()
            try:
                with self._lock:
                    busy = self._enqueue_round()
                    for _ in range(MAX_DELIVER_ROUNDS):
                        if not self._deliver_round():
                            break
                        busy = True
                    self._drain()
                    if self._dirty and self.clock() - self._last_sync >= SYNC_INTERVAL_MS:
                        self._last_sync = self.clock()
                        self._flush_wanted.set()
                    nxt = self.timer.next_due_ms()
                    self._changed |= busy
                    if self._view_wanted or (self._changed and time.monotonic() - self._view_at >= VIEW_INTERVAL_S):
                        self._publish_view(nxt)
            except Exception:
                log.exception("timer round failed")
                busy, nxt = False, self.clock() + 1000
            if busy:
                continue
            wait = IDLE_WAIT_S if nxt is None else (nxt - self.clock()) / 1000.0
            since = self._gather_since
            if since is not None:  # entries wait for a fuller round: until then at most
                wait = min(wait, since + ENQUEUE_GATHER_MS / 1000.0 - time.monotonic())
            if wait > 0:
                self._wake.wait(min(wait, IDLE_WAIT_S))

    # ------------------------------------------------------------------ durable commit
    # Once a second the commit is made durable: the TimerLog and wheel synced, then the checkpoint and the
    # per-topic counts written. The disk's part runs on the TimerFlush thread without the service's lock,
    # so a slow write-back (a busy disk) never holds up a delivery; the points are taken and settled under
    # the lock, and TimerStore keeps their order (docs/scheduled-delivery.md, "The durable commit runs
    # beside the deliveries").

    def _flush_loop(self) -> None:
        while True:
            self._flush_wanted.wait()
            if self._stop.is_set():
                return  # shutdown() makes the last one, the thread stopped
            self._flush_wanted.clear()
            try:
                with self._lock:
                    if not self._dirty or self._journal_fd < 0:
                        continue
                    point = self._sync_point()
                self._sync_files(point)
                with self._lock:
                    self._synced(point)
            except OSError as e:  # a full or failing disk: one line, not one a second
                if self._commit_failing is None:
                    log.error("timer store commit failed: %s; tried again every second while deliveries go on "
                              "(a crash meanwhile redelivers what was delivered since the last commit)", e)
                self._commit_failing = e
                with self._lock:
                    self._dirty = True
            except Exception:
                log.exception("timer store commit failed; tried again in a second")
                with self._lock:
                    self._dirty = True
            else:
                if self._commit_failing is not None:
                    log.warning("timer store commit made again (it had failed: %s)", self._commit_failing)
                    self._commit_failing = None

    def _sync(self) -> None:
        """The three steps at once (shutdown, holding the lock)."""
        point = self._sync_point()
        self._sync_files(point)
        self._synced(point)

    def _sync_point(self) -> _SyncPoint:
        self.timer.commit_delivered(self.timer.committed_cursor, sync=False)
        self._dirty = False
        metrics = json.dumps({"enqueueOffset": self.timer.enqueue_offset, "topics": self.topics.to_json()}).encode()
        return _SyncPoint(self.timer.flush_point(), metrics, self.timer.enqueue_offset)

    def _sync_files(self, point: _SyncPoint) -> None:
        self.timer.sync_point(point.store)
        atomic_write(self._metrics_path, point.metrics)

    def _synced(self, point: _SyncPoint) -> None:
        self.timer.flushed(point.store)
        self._metrics_mark = max(self._metrics_mark, point.metrics_mark)
        if self._takeover_upto != _NONE_KEY and point.store.commit > self._takeover_upto:
            timer_takeover.finish(self.root)  # durably past all the old master could have delivered
            self._takeover_upto = _NONE_KEY

    # ------------------------------------------------------------------ enqueue
    def _enqueue_round(self) -> bool:
        store = self.store
        if not store.has_queue(TIMER_TOPIC, 0):
            return False
        if self._cq_offset < 0:
            # The first entry not yet counted: CommitLog offset at or past the marks.
            mark = min(self.timer.enqueue_offset, self._metrics_mark)
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
        over = phys + sizes - phys[0] > _SPAN_MAX
        if over.any():  # large records: fewer of them, so that the round is read in one view (_chunk_fields)
            fit = max(1, int(np.argmax(over)))
            phys, sizes, deliver = phys[:fit], sizes[:fit], deliver[:fit]
        watermark = self.timer.enqueue_offset
        low = min(watermark, self._metrics_mark)
        # Deliveries come first: once something falls due, the round stops (after ENQUEUE_MIN entries, so a
        # backlog of due messages slows enqueueing down without stopping it) and the deliver rounds run.
        due_at = self.timer.next_due_ms()
        n = len(phys)
        filed: list[np.ndarray] = []  # ENTRY_DTYPE, a chunk each
        enqueued = 0
        taken = 0
        # The whole round's fields in one pass (cheaper a record than chunk by chunk); None: read per chunk
        fields = self._chunk_fields(phys, sizes, deliver)
        # With them read and nothing due within ENQUEUE_WHOLE_MS, the round is filed as one chunk (a chunk's
        # numpy calls cost about the same for 128 entries as for 1,024).
        whole = fields is not None and (due_at is None or due_at - self.clock() > ENQUEUE_WHOLE_MS)
        step = n if whole else ENQUEUE_MIN
        self._column_counts.clear()  # what a round that failed half-way had gathered: it is read again
        while taken < n:
            if taken and due_at is not None and self.clock() >= due_at:
                break
            chunk = slice(taken, min(n, taken + step))
            enqueued += self._enqueue_chunk(phys[chunk], sizes[chunk], deliver[chunk],
                                            None if fields is None else fields[chunk], low, watermark, filed)
            taken = chunk.stop
        self._add_column_counts()
        self._cq_offset = got.start + taken
        entries = filed[0] if len(filed) == 1 else np.concatenate(filed) if filed else np.empty(0, ENTRY_DTYPE)
        end = int(phys[taken - 1]) + int(sizes[taken - 1])
        res = self.timer.enqueue(entries, max(end, watermark))
        self._dirty = True
        self.stats.enqueued_n(enqueued)
        if res.cancels_too_late:
            self.counters["cancelsTooLate"] += res.cancels_too_late
            log.warning("%d cancel(s) arrived after their target was released", res.cancels_too_late)
        self._wake.set()  # an enqueued message may be due before the current wait ends
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

    def _enqueue_chunk(self, phys: np.ndarray, sizes: np.ndarray, deliver: np.ndarray,
                       fields: list[_Fields | None] | _FieldColumns | None, low: int, watermark: int,
                       filed: list[np.ndarray]) -> int:
        """Files up to ENQUEUE_MIN parked records as timer entries (ENTRY_DTYPE, appended to ``filed``) and
        the per-topic counts; returns how many new timer messages (not cancels) they hold. ``fields``: what
        ``_chunk_fields`` read of them; None: read here, from one view of the chunk's CommitLog span when
        the records check out, else record by record."""
        if low > int(phys[0]):  # some were counted and filed before a restart
            keep = phys >= low
            if isinstance(fields, _FieldColumns):
                fields = fields[keep]
            elif fields is not None:
                fields = [f for f, k in zip(fields, keep.tolist(), strict=True) if k]
            phys, sizes, deliver = phys[keep], sizes[keep], deliver[keep]
            if not len(phys):
                return 0
        if fields is None:
            fields = self._chunk_fields(phys, sizes, deliver)
        if isinstance(fields, _FieldColumns):
            return self._enqueue_columns(phys, sizes, deliver, fields, watermark, filed)
        p_l, s_l = phys.tolist(), sizes.tolist()
        cols: tuple[list[int], list[int], list[int], list[int], list[int]] = ([], [], [], [], [])
        if fields is None:
            fields = [self._fields_of(self._properties(p, s)) for p, s in zip(p_l, s_l, strict=True)]
        metrics_mark = self._metrics_mark
        counts: Counter[tuple[str, int]] = Counter()  # (real topic, deliver minute) -> new pending
        enqueued = 0
        keys: list[str | None] = []  # hashed together after the loop (uniq_hashes)
        for p, s, d, f in zip(p_l, s_l, deliver.tolist(), fields, strict=True):
            if f is None:
                self.counters["unreadable"] += 1
                continue
            real, uniq, del_key, out_ms = f
            if d <= 0:
                d = out_ms
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
                self.topics.add(real, minute * 60_000, c)
        return enqueued

    def _enqueue_columns(self, phys: np.ndarray, sizes: np.ndarray, deliver: np.ndarray, fields: _FieldColumns,
                         watermark: int, filed: list[np.ndarray]) -> int:
        """``_enqueue_chunk`` for records read as columns: the same entries and counts, with no Python
        step per record. The delete keys' hashes are left 0: found when a cancel needs them (_key_hashes)."""
        filed.append(make_entries(deliver_ms=deliver, offset=phys, size=sizes))
        new = phys >= self._metrics_mark  # not in the persisted per-topic counts yet
        topics = fields.topics
        if len(topics) == 1 and len(phys) >= _COUNT_UNIQUE_MIN and new.all():
            # One topic, all new (a round of a burst): counted a minute at a time, not a record at a time
            minutes, counts = np.unique(deliver // 60_000, return_counts=True)
            pairs = zip(repeat(topics[0]), minutes.tolist(), strict=False)  # as many as minutes
            self._column_counts.update(dict(zip(pairs, counts.tolist(), strict=True)))
            return int(np.count_nonzero(phys >= watermark))
        minutes = (deliver // 60_000).tolist()
        # one topic (the usual round): no list of it a record
        real = repeat(topics[0]) if len(topics) == 1 else map(topics.__getitem__, fields.which.tolist())
        pairs = zip(real, minutes, strict=False)  # as many as minutes: ``real`` repeats, or has one a record
        # Added to the per-topic counts once a round (_add_column_counts): a chunk's deliver times spread over
        # dozens of minutes, so adding chunk by chunk made a TopicCounts.add call every two or three messages.
        self._column_counts.update(pairs if new.all() else compress(pairs, new.tolist()))
        return int(np.count_nonzero(phys >= watermark))

    def _add_column_counts(self) -> None:
        for (real, minute), c in self._column_counts.items():
            self.topics.add(real.decode("utf-8"), minute * 60_000, c)
        self._column_counts.clear()

    def _key_hashes(self, phys: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """``uniq_hash`` of the delete key (``realTopic + "+" + uniqKey``) of each parked record, 0 for one
        without a UNIQ_KEY or unreadable: what the enqueue round leaves to a cancel (TimerStore.key_hashes)."""
        keys: list[str | None] = []
        for p, s in zip(phys.tolist(), sizes.tolist(), strict=True):
            f = self._fields_of(self._properties(p, s))
            keys.append(f"{f[0]}+{f[1]}" if f is not None and f[1] else None)
        return np.array(uniq_hashes(keys), dtype=np.int64)

    @staticmethod
    def _fields_of(props: dict[str, str] | None) -> _Fields | None:
        if props is None:
            return None
        return (props.get(mc.REAL_TOPIC, ""), props.get(mc.UNIQ_KEY), props.get(mc.TIMER_DEL_UNIQKEY),
                _deliver_of(props, 0))

    def _chunk_fields(self, phys: np.ndarray, sizes: np.ndarray,
                      deliver: np.ndarray) -> list[_Fields | None] | _FieldColumns | None:
        """The enqueue fields of each record (REAL_TOPIC, UNIQ_KEY, TIMER_DEL_UNIQKEY, TIMER_OUT_MS), read
        from one view of the CommitLog span that holds them: their layout checked column-wise with
        numpy, then their joined properties searched in one regex pass. Ordinary timer messages
        (``_FieldColumns``: no cancel, each ending with the broker's REAL_TOPIC tail, a deliver time in
        every tag) come out as a column of real topics; anything else as a tuple a record. None when
        the span is not one view (records across a file boundary, or far apart) or a record does not
        check out: the caller reads them one by one then, with the single-record checks and their log
        lines."""
        first = int(phys[0])
        span_len = int(phys[-1]) + int(sizes[-1]) - first
        if span_len > _SPAN_MAX or (len(phys) > 1 and not (np.diff(phys) > 0).all()) or int(sizes.min()) < MIN_RECORD_SIZE:
            return None
        span = self.store.select_one_message_by_offset(first, span_len)
        if span is None or len(span) < span_len:
            return None
        u8 = np.frombuffer(span, dtype=np.uint8)
        starts = phys - first
        ends = starts + sizes
        if (ends > span_len).any() or (gather_be(u8, starts, 4) != sizes).any():
            return None
        if (deliver > 0).all() and (columns := _tail_columns(span, u8, starts, ends, deliver)) is not None:
            return columns
        rc = record_columns(u8, starts)
        props_end = rc.props_at + rc.props_len
        if not rc.ok.all() or (props_end != ends).any():
            return None
        at_l, end_l = rc.props_at.tolist(), props_end.tolist()
        # One findall over the properties joined with a mark before each record's: the marks (no groups)
        # come out between the records' properties, so no positions are needed to tell whose each is.
        joined = _RECORD_MARK + _RECORD_MARK.join([span[a:b] for a, b in zip(at_l, end_l, strict=True)])
        columns = _field_columns(joined, len(phys)) if (deliver > 0).all() else None
        if columns is not None:
            return columns
        fields: list[_Fields | None] = []
        real: str | None = None
        uniq = dele = None
        out = 0
        try:
            for name, value in _ENQUEUE_PROPERTIES_MARKED.findall(joined):
                if not name:  # the next record's mark
                    fields.append((real or "", uniq, dele, out))
                    real = uniq = dele = None
                    out = 0
                elif name == _REAL_TOPIC_B:
                    real = value.decode("utf-8")
                elif name == _UNIQ_KEY_B:
                    uniq = value.decode("utf-8")
                elif name == _TIMER_DEL_UNIQKEY_B:
                    dele = value.decode("utf-8")
                else:  # TIMER_OUT_MS, read as _deliver_of reads it
                    out = int(value) if value.isdigit() and len(value) < 19 else _int_or(value, 0)
        except UnicodeDecodeError:
            return None
        fields.append((real or "", uniq, dele, out))
        # The first mark closed no record: drop it. A count off means properties that hold a mark of their
        # own (an empty name with an empty value): read record by record then.
        del fields[0]
        return fields if len(fields) == len(phys) else None

    def _properties(self, phys: int, size: int) -> dict[str, str] | None:
        """What enqueueing needs of a parked record's properties (``_ENQUEUE_PROPERTIES``), found in
        place: no hosts, no body, no other property decoded. The records are the broker's own, made
        whole by reput before it published them (so their layout is trusted, as the pull path trusts
        it); None, logged, when one cannot be read."""
        raw = self.store.select_one_message_by_offset(phys, size)
        if raw is None or len(raw) < size:
            log.error("timer message at %d (size %d) cannot be read; skipped", phys, size)
            return None
        try:
            at, n = properties_span(raw)
            if at + n != size:
                raise RecordError("properties do not end the record")
            return {k.decode(): v.decode("utf-8") for k, v in _ENQUEUE_PROPERTIES.findall(raw[at : at + n])}
        except (RecordError, IndexError, UnicodeDecodeError, struct.error) as e:
            log.error("timer message at %d cannot be decoded (%s); skipped", phys, e)
            return None

    # ------------------------------------------------------------------ deliver
    def _deliver_round(self) -> bool:
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
            if key <= self._journal_done and off < self._load_watermark:
                # Delivered before a crash; the TimerStore's durable commit had not caught up. (Only entries
                # indexed before the crash can have been delivered: one replayed after it may be filed at a
                # time before the journal's key, and must go out.)
                self.counters["duplicatesSkipped"] += 1
                props = self._properties(off, size)
                if props is not None:
                    skipped_keys.append((props.get(mc.REAL_TOPIC, ""), _deliver_of(props, d)))
                continue
            got = self._read_parked(off, size)
            if got is None:
                self.counters["unreadable"] += 1
                continue
            view, parked = got
            real_deliver = _deliver_of(parked, d)
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
            self.topics.add(t, d, -1)
        batch = _Batch(due, requests, owners, lateness, topics, (int(due["deliver_ms"][-1]), int(due["offset"][-1])))
        if requests:
            # The journal's intent covers every batch in flight (the broker acknowledges them in order).
            self._inflight.append(batch)
            self._write_journal(max(b.last for b in self._inflight), self._journal_done)
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

    def _drain(self) -> None:
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
                self.topics.add(t, d, -1)
            if lateness:
                self.last_lateness_ms = max(lateness)
            if done_upto is not None:
                intent = max((b.last for b in self._inflight), default=done_upto)
                self._write_journal(max(intent, done_upto), done_upto)
        if done_upto is not None and done_upto <= self.timer.read_cursor:
            if done_upto > self.timer.committed_cursor:
                self.timer.commit_delivered(done_upto, sync=False)
        self._dirty = True
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

    def _write_journal(self, intent: tuple[int, int], done: tuple[int, int]) -> None:
        self._journal_intent, self._journal_done = intent, done
        os.pwrite(self._journal_fd, _JOURNAL.pack(intent[0], intent[1], done[0], done[1]), 0)

    # ------------------------------------------------------------------ observability
    def _publish_view(self, nxt: int | None) -> None:
        """Timer thread (or load): publish a new TimerView in one attribute store."""
        now = self.clock()
        hist = self.timer.histogram(now)  # its buckets add up to pending_count(): one walk of the wheel
        view = TimerView(now, max(0, sum(hist.values())), hist, nxt,
                         self.timer.enqueue_offset, {t: Counter(c) for t, c in self.topics.by_topic.items()})
        with self._view_cond:
            self.view = view
            self._view_at = time.monotonic()
            self._view_wanted = self._changed = False
            self._view_cond.notify_all()

    def request_view(self) -> None:
        """Ask the thread for a fresh view at its next round (readers call this; it never waits)."""
        self._view_wanted = True
        self._wake.set()

    def fresh_view(self, timeout: float) -> TimerView | None:
        """Block (off the event loop only) until the thread published a view after this call; after
        ``timeout`` seconds (the thread is busy in a put or an fsync) the last one published."""
        with self._view_cond:
            old = self.view
            self.request_view()
            if self._thread is not None and self._thread.is_alive():
                self._view_cond.wait_for(lambda: self.view is not old, timeout)
            return self.view

    def topic_minutes(self) -> dict[str, Counter[int]]:
        """Pending timer messages per real topic by deliver minute, as last published (a copy)."""
        view = self.view
        return {} if view is None else {t: Counter(c) for t, c in view.topics.items()}

    def snapshot(self, *, ask_fresh: bool = True) -> dict[str, Any]:
        """Counters, rates, lateness and the pending histogram (callable from any thread, never waits on
        the timer thread). Pending counts are from the last TimerView (``viewAgeMs`` old); counters and
        rates are current. Asks for a fresh view for the next reader unless ``ask_fresh`` is False."""
        now = self.clock()
        view = self.view
        if ask_fresh:
            self.request_view()
        if view is None:  # not loaded
            view = TimerView(now, 0, dict.fromkeys(("due", "minute", "hour", "day", "later", "rolled"), 0), None, 0, {})
        pending, hist, nxt = view.pending, view.histogram, view.next_due_ms
        s = self.stats.snapshot()
        out: dict[str, Any] = {
            "pending": pending,
            "enqueued": s["enqueued"],
            "delivered": s["delivered"],
            "early": s["early"],
            "enqueueTps": round(self._enq_rate.rate(s["enqueued"]), 1),
            "deliverTps": round(self._del_rate.rate(s["delivered"]), 1),
            "latenessP50Ms": s["latenessP50Ms"],
            "latenessP99Ms": s["latenessP99Ms"],
            "latenessMaxMs": s["latenessMaxMs"],
            "latenessLastBatchMs": self.last_lateness_ms,
            # How far behind the service is now: the oldest due entry not yet delivered.
            "latenessNowMs": max(0, now - nxt) if nxt is not None and nxt <= now else 0,
            "nextDueMs": nxt if nxt is not None else -1,
            "precisionMs": self.precision_ms,
            "enqueueOffset": view.enqueue_offset,
            "viewAgeMs": max(0, now - view.published_ms),
        }
        for k in ("duplicatesSkipped", "redelivered", "cancels", "cancelsTooLate", "unreadable"):
            out[k] = self.counters[k]
        out["histogram"] = {"due": hist["due"], "minute": hist["minute"], "hour": hist["hour"],
                            "day": hist["day"], "beyond": hist["later"] + hist["rolled"]}
        out["latenessHistogram"] = self.stats.lateness_histogram()
        return out


def _int_or(value: bytes, default: int) -> int:
    try:
        return int(value)
    except ValueError:
        return default


def _deliver_of(props: dict[str, str], default: int) -> int:
    try:
        return int(props.get(mc.TIMER_OUT_MS, default))
    except ValueError:
        return default


def find_cancel_target(store: DefaultMessageStore, topic: str, uniq: str, now_ms: int) -> CancelTarget:
    """Look the target of a cancel up in the store's index: parked in rmq_sys_wheel_timer (pending), a cancel
    marker for it there (cancelled), or its copy in the real topic (delivered). "unchecked" without an index.
    Reads the index (it may block on files): the broker calls it off its event loop, once reput has indexed
    what was appended before the cancel."""
    if not store.has_index:
        return CancelTarget("unchecked")
    found: CancelTarget | None = None
    for view in store.query_message(TIMER_TOPIC, uniq, 64, 0, 1 << 62):
        try:
            props = decode_record(view, read_body=False).properties
        except RecordError:
            continue
        if props.get(mc.REAL_TOPIC) != topic:
            continue
        if mc.TIMER_DEL_UNIQKEY in props:
            if props[mc.TIMER_DEL_UNIQKEY] == f"{topic}+{uniq}":
                return CancelTarget("cancelled")
            continue
        if props.get(mc.UNIQ_KEY) == uniq:
            try:
                found = CancelTarget("pending", int(props.get(mc.TIMER_OUT_MS, "0")),
                                     int(props.get(mc.REAL_QID, "0")))
            except ValueError:
                continue
    if found is not None:
        return CancelTarget("delivered") if found.deliver_ms <= now_ms else found
    if store.query_message(topic, uniq, 1, 0, 1 << 62):
        return CancelTarget("delivered")
    return CancelTarget("unknown")
