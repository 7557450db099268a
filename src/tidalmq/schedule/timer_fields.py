"""What the timer's enqueue round reads of the messages parked in ``rmq_sys_wheel_timer``: for each, its
real topic, UNIQ_KEY, TIMER_DEL_UNIQKEY (a cancel) and TIMER_OUT_MS, found in the stored properties without
decoding the rest of the record.

``EnqueueFields`` reads them from one view of the CommitLog span the round's records lie in: for ordinary
timer messages as columns (``FieldColumns``: the tail the broker appends to every parked message's
properties, checked with numpy, or one regex pass over the joined properties); for anything else a tuple
a record; and, where the span does not check out, record by record. The properties' encoding is the codec's
(common/message.py).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

import numpy as np

from tidalmq.common import message as mc
from tidalmq.common.columns import gather_be
from tidalmq.common.record import (
    CRC32_RESERVED_LEN,
    CRC_PLACEHOLDER,
    MIN_RECORD_SIZE,
    RecordError,
    properties_span,
)
from tidalmq.common.record_batch import PROPERTIES_MARK
from tidalmq.common.record_columns import record_columns
from tidalmq.schedule.entries import uniq_hashes
from tidalmq.schedule.reschedule import timer_moved_from
from tidalmq.schedule.timer_access import TimerStoreAccess

log = logging.getLogger(__name__)

# The properties the enqueue round and the duplicate skip read (the cancel hash, a delete marker, the
# real topic's counts, the deliver time when the tag lacks it).
_ENQUEUE_NAMES = (mc.REAL_TOPIC, mc.UNIQ_KEY, mc.TIMER_DEL_UNIQKEY, mc.TIMER_OUT_MS, mc.RESCHEDULED_FROM)
_ENQUEUE_PROPERTIES = mc.property_finder_bytes(_ENQUEUE_NAMES)
# The same in a round's properties joined with a mark before each record's (chunk_fields): the mark no valid
# properties hold (an empty name with an empty value), found with no groups.
_RECORD_MARK = PROPERTIES_MARK
_ENQUEUE_PROPERTIES_MARKED = mc.property_finder_bytes(_ENQUEUE_NAMES, empty_pair=True)
_REAL_TOPIC_B, _UNIQ_KEY_B, _TIMER_DEL_UNIQKEY_B, _RESCHEDULED_FROM_B = (
    n.encode() for n in (mc.REAL_TOPIC, mc.UNIQ_KEY, mc.TIMER_DEL_UNIQKEY, mc.RESCHEDULED_FROM))
# The columnar reading of a round (FieldColumns): the parked properties end with what the broker appends,
# REAL_TOPIC, REAL_QID and TIMER_OUT_MS (TimerRewrite.timer_properties and park_batch), so one pass finds each
# record's real topic as that tail, right before the next record's mark or the end. As many tails as
# records and as many REAL_TOPIC names: one each, in record order. A cancel marker anywhere sends the round
# to the per-property loop.
_MARK_BYTES = _RECORD_MARK[:3]
_REAL_TOPIC_NAMED = mc.inner_property_key_bytes(mc.REAL_TOPIC)
_PARKED_TAIL = mc.property_tail_finder_bytes((mc.REAL_TOPIC, mc.REAL_QID, mc.TIMER_OUT_MS), _RECORD_MARK)
_CANCEL_FOUND = mc.inner_property_key_bytes(mc.TIMER_DEL_UNIQKEY)
_RESCHEDULE_FOUND = mc.inner_property_key_bytes(mc.RESCHEDULED_FROM)  # a reschedule files a marker too
# The most of the CommitLog the enqueue round reads as one view (records farther apart are read one by one).
SPAN_MAX = 8 << 20
# What the enqueue round reads of a parked record: REAL_TOPIC, UNIQ_KEY, TIMER_DEL_UNIQKEY, TIMER_OUT_MS (0: none),
# and of a reschedule's copy of a timer message the old deliver time it replaces (RESCHEDULED_FROM; 0: none)
Fields = tuple[str, str | None, str | None, int, int]


@dataclass(frozen=True, slots=True, eq=False)
class FieldColumns:
    """What the enqueue round reads of records that are all ordinary timer messages (no cancel among them,
    each ending with the tail the broker appends, one REAL_TOPIC, each deliver time in its ConsumeQueue
    tag): their real topics, as the distinct topics' bytes and each record's index among them, filed
    without a Python step per record (``TimerEnqueue.enqueue_columns``). Their delete keys are not read: the
    TimerStore hashes one when a cancel for its millisecond comes (``TimerStore.key_hashes``)."""

    topics: list[bytes]
    which: np.ndarray  # int64, per record: its real topic's index in ``topics``

    @staticmethod
    def of(real: list[bytes]) -> FieldColumns:
        index: dict[bytes, int] = {}
        which = np.fromiter((index.setdefault(t, len(index)) for t in real), dtype=np.int64, count=len(real))
        return FieldColumns(list(index), which)

    @property
    def real(self) -> list[bytes]:
        """Each record's real topic."""
        return list(map(self.topics.__getitem__, self.which.tolist()))

    def __len__(self) -> int:
        return len(self.which)

    def __eq__(self, other: object) -> bool:  # the same topics for the same records (tests)
        return isinstance(other, FieldColumns) and self.real == other.real

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, part: slice | np.ndarray) -> FieldColumns:
        return FieldColumns(self.topics, self.which[part])


def field_columns(joined: bytes, n: int) -> FieldColumns | None:
    """The REAL_TOPIC column of the ``n`` records whose properties ``joined`` holds, each after a
    _RECORD_MARK; None unless they are all ordinary timer messages (see FieldColumns), or when the
    properties are not UTF-8. A record with two REAL_TOPICs and another with none would pair the wrong
    values: n marks (no properties of a record hold one), n REAL_TOPIC names and n tails, each ending a
    record, leave one each."""
    if _CANCEL_FOUND in joined or _RESCHEDULE_FOUND in joined or joined.count(_MARK_BYTES) != n or joined.count(_REAL_TOPIC_NAMED) != n:
        return None
    try:
        joined.decode("utf-8")  # one check for all (an ASCII mark cannot complete a sequence)
    except UnicodeDecodeError:
        return None
    real = _PARKED_TAIL.findall(joined)
    return FieldColumns.of(real) if len(real) == n else None


# The tail read in place (tail_columns): what ends every ordinary parked record's properties, right to left:
# TIMER_OUT_MS (its value the deliver time's digits, as the ConsumeQueue tag holds it), REAL_QID (a few
# digits), REAL_TOPIC (a validated topic name).
_OUT_NAMED = mc.inner_property_key_bytes(mc.TIMER_OUT_MS)
_QID_NAMED = mc.inner_property_key_bytes(mc.REAL_QID)
_TOPIC_NAMED = mc.inner_property_key_bytes(mc.REAL_TOPIC)
_POW10 = 10 ** np.arange(1, 19, dtype=np.int64)  # a positive int64's digit count: searchsorted + 1
_QID_DIGITS_MAX = 4
_TAIL_TOPICS_MAX = 8  # more real topics than this in one round: the regex pass
# Anywhere in a round's span (a record's first property has no separator before it): a cancel may be among
# them, and the round takes the regex pass, which tells. A body holding these bytes only costs that pass.
_CANCEL_NAMED = mc.TIMER_DEL_UNIQKEY.encode() + mc.NAME_VALUE_SEPARATOR_BYTES
_RESCHEDULE_NAMED = mc.RESCHEDULED_FROM.encode() + mc.NAME_VALUE_SEPARATOR_BYTES


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


_CRC_NAME_U8 = np.frombuffer(CRC_PLACEHOLDER[:9], dtype=np.uint8)  # "__CRC32#" and its name/value separator


def _before_crc(u8: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Where each record's properties end before the record CRC's trailer, for those that carry one (the
    tails ``tail_columns`` reads come before it)."""
    at = ends - CRC32_RESERVED_LEN
    has = (at >= starts) & (u8[np.maximum(at, 0)[:, None] + np.arange(len(_CRC_NAME_U8))] == _CRC_NAME_U8).all(axis=1)
    return np.where(has, at, ends)


def tail_columns(span: memoryview, u8: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  deliver: np.ndarray) -> FieldColumns | None:
    """The real topics of the records at ``starts`` .. ``ends`` of ``span`` read from the tails their
    properties end with, checked column-wise with numpy (no regex over their properties; one search of the
    span, copied, for a cancel's name): None unless every record ends with TIMER_OUT_MS = its deliver time
    (``deliver``, all positive), after REAL_QID, after REAL_TOPIC, the round holds no cancel, and it names
    few real topics.

    The names are compared as unaligned 8-byte words, gathered one a record through a view of the span that
    steps one byte at a time (a gather of n words, not of n rows of bytes)."""
    if len(span) < 8:
        return None
    copied = bytes(span)  # a copy searches faster than re over the view
    if _CANCEL_NAMED in copied or _RESCHEDULE_NAMED in copied:
        return None
    ends = _before_crc(u8, starts, ends)  # the tails come before the record CRC's trailer, where there is one
    w8 = np.ndarray((len(span) - 7,), dtype="<u8", buffer=span, strides=(1,))
    digits = np.searchsorted(_POW10, deliver, side="right") + 1
    out_at = ends - 1 - digits - len(_OUT_NAMED)  # where _OUT_NAMED begins
    if (out_at - len(_QID_NAMED) - 2 < starts).any() or (u8[ends - 1] != mc.PROPERTY_SEPARATOR_BYTE).any():
        return None
    if not _stands_at(w8, out_at, _OUT_WORDS).all():
        return None
    # REAL_QID's value: its digits run back from TIMER_OUT_MS to the name's separator (a byte a width to look at)
    width = np.zeros_like(out_at)
    for w in range(1, _QID_DIGITS_MAX + 1):
        width[(width == 0) & (u8[np.maximum(out_at - 1 - w, 0)] == mc.NAME_VALUE_SEPARATOR_BYTE)] = w
    qid_at = out_at - width - len(_QID_NAMED)  # where _QID_NAMED begins
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
        if mc.NAME_VALUE_SEPARATOR_BYTES in topic or mc.PROPERTY_SEPARATOR_BYTES in topic:
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
    return FieldColumns(topics, which)


class EnqueueFields:
    """Reads the enqueue fields of parked records from ``store`` (the broker's MessageStore, or the schedule
    process's follower of it)."""

    def __init__(self, store: TimerStoreAccess) -> None:
        self.store = store

    def key_hashes(self, phys: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """``uniq_hash`` of the delete key (``realTopic + "+" + uniqKey``) of each parked record, 0 for one
        without a UNIQ_KEY or unreadable: what the enqueue round leaves to a cancel (TimerStore.key_hashes)."""
        keys: list[str | None] = []
        for p, s in zip(phys.tolist(), sizes.tolist(), strict=True):
            f = self.fields_of(self.properties(p, s))
            keys.append(f"{f[0]}+{f[1]}" if f is not None and f[1] else None)
        return np.array(uniq_hashes(keys), dtype=np.int64)

    @staticmethod
    def fields_of(props: dict[str, str] | None) -> Fields | None:
        if props is None:
            return None
        return (props.get(mc.REAL_TOPIC, ""), props.get(mc.UNIQ_KEY), props.get(mc.TIMER_DEL_UNIQKEY),
                deliver_of(props, 0), timer_moved_from(props.get(mc.RESCHEDULED_FROM)))

    def chunk_fields(self, phys: np.ndarray, sizes: np.ndarray,
                      deliver: np.ndarray) -> list[Fields | None] | FieldColumns | None:
        """The enqueue fields of each record (REAL_TOPIC, UNIQ_KEY, TIMER_DEL_UNIQKEY, TIMER_OUT_MS), read
        from one view of the CommitLog span that holds them: their layout checked column-wise with
        numpy, then their joined properties searched in one regex pass. Ordinary timer messages
        (``FieldColumns``: no cancel, each ending with the broker's REAL_TOPIC tail, a deliver time in
        every tag) come out as a column of real topics; anything else as a tuple a record. None when
        the span is not one view (records across a file boundary, or far apart) or a record does not
        check out: the caller reads them one by one then, with the single-record checks and their log
        lines."""
        first = int(phys[0])
        span_len = int(phys[-1]) + int(sizes[-1]) - first
        if span_len > SPAN_MAX or (len(phys) > 1 and not (np.diff(phys) > 0).all()) or int(sizes.min()) < MIN_RECORD_SIZE:
            return None
        span = self.store.select_one_message_by_offset(first, span_len)
        if span is None or len(span) < span_len:
            return None
        u8 = np.frombuffer(span, dtype=np.uint8)
        starts = phys - first
        ends = starts + sizes
        if (ends > span_len).any() or (gather_be(u8, starts, 4) != sizes).any():
            return None
        if (deliver > 0).all() and (columns := tail_columns(span, u8, starts, ends, deliver)) is not None:
            return columns
        rc = record_columns(u8, starts)
        props_end = rc.props_at + rc.props_len
        if not rc.ok.all() or (props_end != ends).any():
            return None
        at_l, end_l = rc.props_at.tolist(), props_end.tolist()
        # One findall over the properties joined with a mark before each record's: the marks (no groups)
        # come out between the records' properties, so no positions are needed to tell whose each is.
        joined = _RECORD_MARK + _RECORD_MARK.join([span[a:b] for a, b in zip(at_l, end_l, strict=True)])
        columns = field_columns(joined, len(phys)) if (deliver > 0).all() else None
        if columns is not None:
            return columns
        fields: list[Fields | None] = []
        real: str | None = None
        uniq = dele = None
        out = moved = 0
        try:
            for name, value in _ENQUEUE_PROPERTIES_MARKED.findall(joined):
                if not name:  # the next record's mark
                    fields.append((real or "", uniq, dele, out, moved))
                    real = uniq = dele = None
                    out = moved = 0
                elif name == _REAL_TOPIC_B:
                    real = value.decode("utf-8")
                elif name == _UNIQ_KEY_B:
                    uniq = value.decode("utf-8")
                elif name == _TIMER_DEL_UNIQKEY_B:
                    dele = value.decode("utf-8")
                elif name == _RESCHEDULED_FROM_B:
                    moved = timer_moved_from(value.decode("utf-8"))
                else:  # TIMER_OUT_MS, read as deliver_of reads it
                    out = int(value) if value.isdigit() and len(value) < 19 else int_or(value, 0)
        except UnicodeDecodeError:
            return None
        fields.append((real or "", uniq, dele, out, moved))
        # The first mark closed no record: drop it. A count off means properties that hold a mark of their
        # own (an empty name with an empty value): read record by record then.
        del fields[0]
        return fields if len(fields) == len(phys) else None

    def properties(self, phys: int, size: int) -> dict[str, str] | None:
        """What enqueueing needs of a parked record's properties (``_ENQUEUE_NAMES``), found in
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
            found = _ENQUEUE_PROPERTIES.findall(mc.PROPERTY_SEPARATOR_BYTES + raw[at : at + n])
            return {k.decode(): v.decode("utf-8") for k, v in found}
        except (RecordError, IndexError, UnicodeDecodeError, struct.error) as e:
            log.error("timer message at %d cannot be decoded (%s); skipped", phys, e)
            return None


def int_or(value: bytes, default: int) -> int:
    try:
        return int(value)
    except ValueError:
        return default


def deliver_of(props: dict[str, str], default: int) -> int:
    try:
        return int(props.get(mc.TIMER_OUT_MS, default))
    except ValueError:
        return default
