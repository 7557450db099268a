"""Send-path rewrites for scheduled messages: delay levels park a message in SCHEDULE_TOPIC_XXXX
(RocketMQ 4), timer properties in rmq_sys_wheel_timer (RocketMQ 5)."""

from __future__ import annotations

import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from itertools import repeat
from typing import NamedTuple

import numpy as np

from tidalmq.broker.message import InnerMessage, SendError
from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from tidalmq.common.record_batch import PROPERTIES_MARK, PropertyLayout, RecordBatch
from tidalmq.remoting.codes import ResponseCode
from tidalmq.schedule.timer_service import CancelTarget


def parse_delay_level(text: str) -> int:
    try:
        level = int(text.strip())
    except ValueError:
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"the DELAY property must be an integer level, got {text!r}") from None
    if level < 0:
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"the DELAY property must not be negative, got {level}")
    return level


class DelayLevelRewrite:
    """A message with ``DELAY`` = level > 0 goes to SCHEDULE_TOPIC_XXXX, queue level − 1, its real
    topic and queue kept in REAL_TOPIC / REAL_QID; a level above the maximum counts as the maximum.

    The deliver time the level gives it now is written beside (TIMER_OUT_MS, the timer's name for the
    broker's deliver time; dropped on delivery): the ConsumeQueue's tag is read from it, so a table changed
    at run time (broker/schedule/delay_table.py) leaves a pending message's time as it was given."""

    # Properties-text markers that make this hook relevant (see BrokerController.rewrite_before_store).
    markers = (mc.property_key(mc.DELAY),)

    def __init__(self, levels: dict[int, int], clock: Callable[[], int] | None = None) -> None:
        self.clock = clock or _now_ms
        # Per level, the latest deliver time given this run: what a table change must not overtake, known
        # here before the message reaches the ConsumeQueue.
        self.latest: dict[int, int] = {}
        self.set_levels(levels)

    def set_levels(self, levels: dict[int, int]) -> None:
        self.levels = dict(levels)
        self.max_level = max(levels) if levels else 0

    def __call__(self, msg: InnerMessage) -> None:
        text = msg.get_property(mc.DELAY)
        if text is None:
            return
        ttype = sf.transaction_type(msg.sysflag)
        if ttype not in (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE):
            return  # half messages never get here: transactions drop schedule properties (docs/transactions.md)
        level = parse_delay_level(text)
        if level == 0 or self.max_level == 0:
            return
        level = min(level, self.max_level)
        deliver = self.clock() + self.levels.get(level, 1000)
        if deliver > self.latest.get(level, 0):
            self.latest[level] = deliver
        props = msg.properties
        props[mc.REAL_TOPIC] = msg.topic
        props[mc.REAL_QID] = str(msg.queue_id)
        props[mc.DELAY] = str(level)
        props[mc.TIMER_OUT_MS] = str(deliver)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1


# ---------------------------------------------------------------------------------------------------------
# RocketMQ 5: arbitrary delivery time and cancel (HookUtils.transformTimerMessage)

TIMER_REQUEST_PROPERTIES = (mc.TIMER_DELAY_SEC, mc.TIMER_DELAY_MS, mc.TIMER_DELIVER_MS)
# Properties only the broker writes; a client's copy is dropped so it cannot steer the timer.
TIMER_BROKER_PROPERTIES = (mc.TIMER_OUT_MS, mc.TIMER_ENQUEUE_MS, mc.TIMER_DEQUEUE_MS, mc.TIMER_ROLL_TIMES)
_INT64_MAX = (1 << 63) - 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _decimal_digits(t: str) -> bool:
    # Java's Long.parseLong takes any decimal digit (Character.digit: Unicode Nd, as str.isdecimal and int()
    # take them); str.isdigit is also true of '²' and other digits that neither takes.
    return t.isdecimal()


def _parse_ms(name: str, text: str) -> int:
    t = text.strip()
    if t.startswith("-") and _decimal_digits(t[1:]):
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"timer message illegal: {name} must not be negative, got {text[:32]!r}")
    if not _decimal_digits(t):
        raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                        f"timer message illegal: {name} must be a whole number of {'seconds' if name == mc.TIMER_DELAY_SEC else 'milliseconds'}, got {text[:32]!r}")
    digits = t.lstrip("0")
    # past 19 digits it is beyond a long anyway (and int() of thousands of digits raises)
    return _INT64_MAX if len(digits) > 19 else min(int(t), _INT64_MAX)


def deliver_ms_of(name: str, text: str, now: int) -> int:
    """The deliver time one timer request property asks for (SendError if its value is illegal)."""
    if name == mc.TIMER_DELAY_SEC:
        return min(now + _parse_ms(name, text) * 1000, _INT64_MAX)
    if name == mc.TIMER_DELAY_MS:
        return min(now + _parse_ms(name, text), _INT64_MAX)
    return _parse_ms(name, text)


def requested_deliver_ms(msg: InnerMessage, now: int) -> tuple[int, str] | None:
    """(deliver time, property it came from) in RocketMQ's order of precedence: TIMER_DELAY_SEC, then
    TIMER_DELAY_MS (both relative to now), then TIMER_DELIVER_MS (absolute). None if it asks for none."""
    for name in (mc.TIMER_DELAY_SEC, mc.TIMER_DELAY_MS, mc.TIMER_DELIVER_MS):
        text = msg.get_property(name)
        if text is not None:
            return deliver_ms_of(name, text, now), name
    return None


# Every property name that makes a timer message more than "one deliver time": the text fast path
# (TimerRewrite.timer_properties) handles a message carrying exactly one of them, a timer request.
_SCHEDULE_NAME_LIST = (*TIMER_REQUEST_PROPERTIES, *TIMER_BROKER_PROPERTIES, mc.TIMER_DEL_UNIQKEY, mc.DELAY,
                       mc.REAL_TOPIC, mc.REAL_QID)
_SCHEDULE_NAMES = mc.property_finder(_SCHEDULE_NAME_LIST)
_SCHEDULE_NAMES_B = mc.property_finder_bytes(_SCHEDULE_NAME_LIST)  # the same over bytes (park_batch)
_TIMER_REQUEST_B = frozenset(n.encode() for n in TIMER_REQUEST_PROPERTIES)
_SCHEDULE_NAMES_SET_B = frozenset(n.encode() for n in _SCHEDULE_NAME_LIST)  # a batch layout's (park_batch)
_DELIVER_B = mc.TIMER_DELIVER_MS.encode()
_DELIVER_ONLY = frozenset((_DELIVER_B,))
_PROPERTIES_LENGTH = struct.Struct(">H")  # a stored record's properties length (park_batch)
# Without a layout, park_batch finds the marks of a batch's joined properties (PROPERTIES_MARK, an empty name
# with an empty value) with the schedule properties in one pass; a mark found has no groups.
_BATCH_SCHEDULE_NAMES_B = mc.property_finder_bytes(_SCHEDULE_NAME_LIST, empty_pair=True)
_MARK_FOUND = (b"", b"")
# What the parked copy's properties gain (TimerRewrite.timer_properties, park_batch): REAL_TOPIC, REAL_QID and
# TIMER_OUT_MS after the client's; the pieces between their values.
_SEP = mc.PROPERTY_SEPARATOR
_REAL_TOPIC = mc.property_key(mc.REAL_TOPIC)
_REAL_QID = _SEP + mc.property_key(mc.REAL_QID)
_OUT_MS = _SEP + mc.property_key(mc.TIMER_OUT_MS)
_SEP_B = mc.PROPERTY_SEPARATOR_BYTES
_ENDED_MARK = _SEP_B + PROPERTIES_MARK  # a message's properties that end with a separator, then the next's


def _canonical_deliver_times(names: set[bytes], values: tuple[bytes, ...]) -> bool:
    """Whether every message asks for TIMER_DELIVER_MS (``names``: the names asked for) with 1 to 18 digits
    and none starting with 0: the value is then its deliver time exactly as TIMER_OUT_MS writes it. (A
    lone "0" is left to the checks too, which read it the same.) C calls only: no per-message bytecode."""
    return (names == _DELIVER_ONLY and all(map(bytes.isdigit, values)) and max(map(len, values)) < 19
            and min(values)[0] != 48)  # the digit strings' least starts with "0" if any does


def _parked_rows(layout: PropertyLayout, suffix: bytes) -> np.ndarray:
    """``_parked_matrix`` for a batch whose layout was read as a byte matrix and whose every message asks
    for TIMER_DELIVER_MS in canonical digits: the client's properties and the deliver times as written are
    both columns of the layout's rows."""
    rows, spans = layout.rows, layout.spans
    assert rows is not None and spans is not None
    a, b = spans[layout.names.index(_DELIVER_B)]
    return _parked_matrix(rows[:, len(PROPERTIES_MARK) :], suffix, rows[:, a:b])


def _parked_matrix(client: np.ndarray, suffix: bytes, times: np.ndarray) -> np.ndarray:
    """``park_batch``'s parked properties (length, the client's properties, ``suffix``, the deliver time as
    written, a separator), from the client's properties (a row a message, all as long, each ending with a
    separator) and the deliver times (a row of digits each, all as long): all as long as each other, so
    built as one matrix, a column block at a time; ``RecordBatch.redirect`` takes it as it is."""
    n, width = client.shape
    size = width + len(suffix) + times.shape[1] + 1
    out = np.empty((n, 2 + size), dtype=np.uint8)
    out[:, :2] = np.frombuffer(_PROPERTIES_LENGTH.pack(size), dtype=np.uint8)
    out[:, 2 : 2 + width] = client
    at = 2 + width
    out[:, at : at + len(suffix)] = np.frombuffer(suffix, dtype=np.uint8)
    at += len(suffix)
    out[:, at : at + times.shape[1]] = times
    out[:, -1] = 2
    return out


def _delay_level_set(msg: InnerMessage) -> bool:
    text = msg.get_property(mc.DELAY)
    if text is None:
        return False
    try:
        return int(text.strip()) > 0
    except ValueError:
        return True  # DelayLevelRewrite refuses it


class ParkedBatch(NamedTuple):
    """A batch of timer messages as ``TimerRewrite.park_batch`` stores it: ``parked`` in the timer topic,
    ``due`` (their deliver time passed) at once in their own topic; ``due_at``: where those were in the
    batch."""

    parked: RecordBatch | None
    due: RecordBatch | None
    due_at: list[int]


class TimerRewrite:
    markers = ("TIMER_",)  # TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DEL_UNIQKEY ...
    """TIMER_DELAY_SEC / TIMER_DELAY_MS / TIMER_DELIVER_MS park a message in rmq_sys_wheel_timer queue 0 with
    REAL_TOPIC / REAL_QID and TIMER_OUT_MS = its exact deliver time; TIMER_DEL_UNIQKEY files a cancel.

    Rules (RocketMQ 5's unless noted):
    - DELAY > 0 wins: the timer properties are dropped and the delay level applies.
    - a deliver time at or before now: stored at once in the real topic; a TIMER_DELIVER_MS that set it stays,
      the other timer properties are dropped.
    - more than ``max_delay_ms`` ahead, negative or non-numeric values: MESSAGE_ILLEGAL, nothing stored.
    - TIMER_OUT_MS is the exact deliver time (RocketMQ floors it to the precision, which can deliver up to
      one precision early; the timer store releases at ceil(deliver / precision) instead: never early).
    - a cancel is checked against the store (``lookup``): unknown, delivered or already cancelled targets
      are answered QUERY_NOT_FOUND and nothing is stored (RocketMQ stores the marker blindly). The lookup
      may wait for the index and reads it, so it is awaited before the rewrites run, never inside them:
      the send path asks ``cancel_of``, awaits ``lookup`` and leaves the answer in ``msg.cancel_target``.
    """

    def __init__(self, max_delay_ms: int, precision_ms: int,
                 lookup: Callable[[str, str], Awaitable[CancelTarget]] | None = None,
                 clock: Callable[[], int] = _now_ms, enabled: bool = True) -> None:
        self.max_delay_ms = max_delay_ms
        self.precision_ms = precision_ms
        self.lookup = lookup
        self.clock = clock
        self.enabled = enabled
        # A cancel must reach the timer service before its target is released: refuse it when the target
        # is due sooner than this (the service enqueues within milliseconds; this leaves a wide margin).
        self.cancel_guard_ms = max(precision_ms, 200)

    def cancel_of(self, msg: InnerMessage) -> tuple[str, str] | None:
        """(topic, uniq key) whose target the send path must look up (``lookup``) before this rewrite
        runs on ``msg``; None when ``msg`` is no cancel this hook would look up. Raises SendError for a
        malformed cancel, as the rewrite would."""
        if not msg.is_parsed and mc.TIMER_DEL_UNIQKEY not in msg.properties_text:
            return None  # nearly every send: one substring test
        if self.lookup is None or msg.cancel_target is not None or not self._concerns(msg, cancel=True):
            return None
        if not self.enabled or _delay_level_set(msg):
            return None  # refused by the rewrite itself, with no lookup
        return msg.topic, self._cancel_key(msg)

    @staticmethod
    def _concerns(msg: InnerMessage, cancel: bool) -> bool:
        if msg.topic == TIMER_TOPIC:
            return False
        is_cancel = msg.has_property(mc.TIMER_DEL_UNIQKEY)
        if cancel and not is_cancel:
            return False
        if not is_cancel and not any(msg.has_property(k) for k in TIMER_REQUEST_PROPERTIES):
            return False
        # A half message is scheduled when it is committed.
        return sf.transaction_type(msg.sysflag) in (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE)

    def _check_horizon(self, deliver: int, now: int, source: str) -> None:
        if deliver - now > self.max_delay_ms:
            raise SendError(
                ResponseCode.MESSAGE_ILLEGAL,
                f"timer message illegal: deliver time {deliver} ({source}) is {deliver - now} ms ahead, beyond the max delay "
                f"of {self.max_delay_ms} ms (timerMaxDelaySec={self.max_delay_ms // 1000})",
            )

    def timer_properties(self, text: str, topic: str, queue_id: int, now: int) -> tuple[str, int, str] | None:
        """The common case edited as text, without parsing the properties into a dict and encoding them
        again: ``text`` carries exactly one timer request property and no other schedule property. Returns
        the properties of its copy parked in the timer topic (``text`` + REAL_TOPIC, REAL_QID, TIMER_OUT_MS),
        the deliver time and its TIMER_OUT_MS text; None for anything else, which ``__call__``'s general
        path decides. Raises SendError for an illegal value or a time beyond the max delay, as the general
        path would."""
        found = _SCHEDULE_NAMES.findall(mc.PROPERTY_SEPARATOR + text)
        if len(found) != 1:
            return None
        name, value = found[0]
        if name == mc.TIMER_DELIVER_MS and value.isascii() and value.isdigit() and len(value) < 19 and value[0] != "0":
            deliver, out_ms = int(value), value  # what a client sends: TIMER_OUT_MS is its text as it is
        elif name in TIMER_REQUEST_PROPERTIES:
            deliver = deliver_ms_of(name, value, now)
            out_ms = str(deliver)
        else:
            return None
        if deliver - now > self.max_delay_ms:
            self._check_horizon(deliver, now, name)
        sep = "" if not text or text.endswith(mc.PROPERTY_SEPARATOR) else mc.PROPERTY_SEPARATOR
        return f"{text}{sep}{_REAL_TOPIC}{topic}{_REAL_QID}{queue_id}{_OUT_MS}{out_ms}{_SEP}", deliver, out_ms

    def park_batch(self, records: RecordBatch, topic: str, queue_id: int) -> ParkedBatch:
        """A batch of timer messages (RocketMQ schedules no batched message; TidalMQ does): each message
        parked in the timer topic at its own deliver time, the batch one append (two with some due). Every message must
        ask for exactly one deliver time (the batch path refuses DELAY and cancels before this). A message
        whose TIMER_DELIVER_MS has passed is not parked: it is stored at once in ``topic`` as it was sent,
        RocketMQ's rule for a single message (one due by a relative delay of 0 is parked, and the timer
        service delivers it at once). Returns the parked messages (redirected to the timer topic, queue 0)
        and those due (unchanged), either None when it holds none. Raises SendError, nothing stored.

        One regex pass over the batch's joined properties finds every schedule property and where each
        message begins, which shows that each message holds exactly one (a timer request), and the parked
        properties are the client's bytes with a constant suffix and the deliver time appended: no
        per-message decode, search or re-encode.
        A batch that fails a check is walked message by message (``_asked_one_by_one``) to name the culprit."""
        if not self.enabled:
            raise SendError(ResponseCode.SYSTEM_ERROR, "accurate timer message is not enabled, timerWheelEnable is false")
        now = self.clock()
        n = len(records)  # each message's properties (``records.item_properties()``) taken only where needed
        joined = records.joined_properties()  # each message's properties after a mark (PROPERTIES_MARK)
        layout = records.layout if records.layout_is_all else None
        try:
            joined.decode("utf-8")  # one check for all (an ASCII separator cannot complete a sequence)
            utf8 = True
        except UnicodeDecodeError:
            utf8 = one_each = False
        if utf8 and layout is not None:
            # The messages share one layout (RecordBatch.layout): its names say it for all of them, and the
            # deliver times are its column; every pair ends with a separator.
            scheduled = [name for name in layout.names if name in _SCHEDULE_NAMES_SET_B]
            one_each = len(scheduled) == 1 and scheduled[0] in _TIMER_REQUEST_B
            if one_each:
                values = layout.column(scheduled[0]) or ()
                asked = list(zip(repeat(scheduled[0], n), values, strict=True))
                names = {scheduled[0]}
            all_ended = one_each
        elif utf8:
            # The marks and the schedule properties, in order: exactly one schedule property per message,
            # each a timer request, when they alternate (mark, property, mark, property ...).
            found = _BATCH_SCHEDULE_NAMES_B.findall(joined)
            asked = found[1::2]
            one_each = len(found) == 2 * n and found[0::2].count(_MARK_FOUND) == n
            if one_each:
                names_asked, values = zip(*asked, strict=True)  # two tuples, in one C call
                names = set(names_asked)
                one_each = names <= _TIMER_REQUEST_B
            # each ends with a separator (counted so only where no properties hold a mark of their own)
            all_ended = one_each and joined.count(_ENDED_MARK) == n - 1 and joined.endswith(_SEP_B)
        if not one_each:  # refused, naming the culprit; or properties that hold a mark of their own
            asked = self._asked_one_by_one(records.item_properties())
            names_asked, values = zip(*asked, strict=True)
            names = set(names_asked)
            all_ended = False
        mss: Sequence[bytes]
        parked: list[bytes] | np.ndarray
        canonical = _canonical_deliver_times(names, values)
        if canonical:
            # a layout read as a byte matrix has its digits as a column (``digit_column``); else one int() each
            by_rows = layout.digit_column(_DELIVER_B) if layout is not None and one_each else None
            delivers = by_rows if by_rows is not None else list(map(int, values))
            mss = values  # TIMER_OUT_MS: the deliver time as the client wrote it
        else:  # relative or unusual: the checks
            delivers = [int(value) if name == _DELIVER_B and value.isdigit() and len(value) < 19
                        else deliver_ms_of(name.decode(), value.decode("utf-8", "replace"), now) for name, value in asked]
            mss = [b"%d" % d for d in delivers]
        if max(delivers) - now > self.max_delay_ms:
            i = max(range(n), key=delivers.__getitem__)
            self._check_horizon(delivers[i], now, asked[i][0].decode())
        due: RecordBatch | None = None
        due_at: list[int] = []
        if min(delivers) <= now:
            due_at = [i for i, d in enumerate(delivers) if d <= now and asked[i][0] == _DELIVER_B]
            if len(due_at) == n:
                return ParkedBatch(None, records, due_at)
            if due_at:
                due = records.select(due_at)
                gone = set(due_at)
                keep = [i for i in range(n) if i not in gone]
                records = records.select(keep)
                mss = [mss[i] for i in keep]
                delivers = [delivers[i] for i in keep]
        # The parked properties: the client's (they hold no TIMER_OUT_MS or DELAY, the batch path refuses
        # those), a separator if their last lacks one, the real topic and queue, and TIMER_OUT_MS. What the
        # reput reads in them is what it read in the client's (found when the batch was encoded), and the
        # deliver times as their tag codes (what it would make of TIMER_OUT_MS): given to redirect, so
        # neither it nor the reput reads them again.
        suffix = f"{_REAL_TOPIC}{topic}{_REAL_QID}{queue_id}{_OUT_MS}".encode()
        grown = len(suffix) + 1  # and the deliver time's digits
        pack = _PROPERTIES_LENGTH.pack
        if canonical and due is None and layout is not None and layout.rows is not None and one_each:
            parked = _parked_rows(layout, suffix)  # the same bytes, built a column at a time
        elif all_ended and (client := records.packed_properties()) is not None and len(set(map(len, mss))) == 1:
            # a packed batch (its properties a matrix) whose deliver times are as long: the same, by columns
            times = np.frombuffer(b"".join(mss), dtype=np.uint8).reshape(len(mss), len(mss[0]))
            parked = _parked_matrix(client, suffix, times)
        elif all_ended:
            props = records.item_properties()
            parked = [b"".join((pack(len(pm) + grown + len(ms)), pm, suffix, ms, _SEP_B))
                      for pm, ms in zip(props, mss, strict=True)]
        else:
            props = records.item_properties()
            seps = [b"" if not pm or pm[-1] == mc.PROPERTY_SEPARATOR_BYTE else _SEP_B for pm in props]
            parked = [b"".join((pack(len(pm) + len(sep) + grown + len(ms)), pm, sep, suffix, ms, _SEP_B))
                      for pm, sep, ms in zip(props, seps, mss, strict=True)]
        # The dispatch reads the client's properties (a layout's columns, or the per-record lists as they are)
        records.redirect(TIMER_TOPIC, 0, parked, records.found, delivers)
        return ParkedBatch(records, due, due_at)

    def _asked_one_by_one(self, props: list[memoryview]) -> list[tuple[bytes, bytes]]:
        """Each message's deliver time property, found message by message, for a batch the one pass of
        ``park_batch`` did not show to ask for exactly one each. Raises the SendError naming the first
        message that does not, as the single-message path would refuse it."""
        asked = []
        for i, pm in enumerate(props):
            try:
                str(pm, "utf-8")
            except UnicodeDecodeError:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"timer batch illegal: message {i}'s properties are not UTF-8") from None
            found = _SCHEDULE_NAMES_B.findall(_SEP_B + pm)
            if len(found) != 1 or found[0][0] not in _TIMER_REQUEST_B:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                                f"timer batch illegal: message {i} asks for no deliver time or for more than one "
                                f"({', '.join(TIMER_REQUEST_PROPERTIES)}); timer and plain messages cannot share a batch")
            asked.append(found[0])
        return asked

    def __call__(self, msg: InnerMessage) -> None:
        if (not msg.is_parsed and self.enabled and msg.topic != TIMER_TOPIC
                and sf.transaction_type(msg.sysflag) in (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE)):
            now = self.clock()
            fast = self.timer_properties(msg.properties_text, msg.topic, msg.queue_id, now)
            if fast is not None and fast[1] > now:  # one due already is stored as it is: the general path
                msg.timer_parked = (fast[0], msg.topic, fast[2])
                msg.properties_text = fast[0]
                msg.topic = TIMER_TOPIC
                msg.queue_id = 0
                return
        if not self._concerns(msg, cancel=False):
            return
        is_cancel = msg.has_property(mc.TIMER_DEL_UNIQKEY)
        if not self.enabled:
            raise SendError(ResponseCode.SYSTEM_ERROR, "accurate timer message is not enabled, timerWheelEnable is false")
        if is_cancel:
            self._cancel(msg)
            return
        props = msg.properties
        if _delay_level_set(msg):
            for k in TIMER_REQUEST_PROPERTIES:
                props.pop(k, None)
            return
        if mc.TIMER_OUT_MS in props:
            # RocketMQ's HookUtils.checkIfTimerMessage: a message timed already (a delivered timer message the
            # broker stores again: a pop retry, a dead letter) is no timer request. A client's TIMER_OUT_MS
            # never gets here: the send path drops it (BROKER_WRITTEN_PROPERTIES).
            return
        now = self.clock()
        asked = requested_deliver_ms(msg, now)
        assert asked is not None
        deliver, source = asked
        for k in TIMER_BROKER_PROPERTIES:
            props.pop(k, None)
        if deliver <= now:
            # Due already: stored at once. RocketMQ leaves the message as it is; a TIMER_DELIVER_MS that
            # decided the time stays (the 5.x endpoint shows it as the delivery timestamp), the relative
            # requests go (they would delay a re-send of the message anew).
            for k in TIMER_REQUEST_PROPERTIES:
                if k != mc.TIMER_DELIVER_MS or source != mc.TIMER_DELIVER_MS:
                    props.pop(k, None)
            return
        self._check_horizon(deliver, now, source)
        props[mc.TIMER_OUT_MS] = str(deliver)
        props[mc.REAL_TOPIC] = msg.topic
        props[mc.REAL_QID] = str(msg.queue_id)
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0

    @staticmethod
    def _cancel_key(msg: InnerMessage) -> str:
        """The target's uniq key from TIMER_DEL_UNIQKEY."""
        raw = (msg.get_property(mc.TIMER_DEL_UNIQKEY) or "").strip()
        topic = msg.topic
        # RocketMQ's value is buildDeleteKey(realTopic, uniqKey) = "topic+uniqKey"; a bare uniq key is
        # accepted too (topics cannot contain '+', uniq keys are hex).
        if "+" in raw:
            key_topic, uniq = raw.split("+", 1)
            if key_topic != topic:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                                f"cancel illegal: {mc.TIMER_DEL_UNIQKEY} names topic {key_topic!r}, the message is sent to {topic!r}")
        else:
            uniq = raw
        if not uniq:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"cancel illegal: {mc.TIMER_DEL_UNIQKEY} is empty")
        return uniq

    def _cancel(self, msg: InnerMessage) -> None:
        topic = msg.topic
        uniq = self._cancel_key(msg)
        props = msg.properties
        if _delay_level_set(msg):
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, "cancel illegal: a TIMER_DEL_UNIQKEY message cannot carry DELAY")
        now = self.clock()
        asked = requested_deliver_ms(msg, now)
        given = asked[0] if asked is not None else None
        target = msg.cancel_target
        if target is None:
            if self.lookup is not None:  # the send path skipped cancel_of: refuse rather than guess
                raise SendError(ResponseCode.SYSTEM_ERROR, "cancel: the target was not looked up")
            target = CancelTarget("unchecked")
        where = f"message {uniq} of topic {topic}"
        if target.state == "unknown":
            raise SendError(ResponseCode.QUERY_NOT_FOUND, f"cancel: no scheduled {where}")
        if target.state == "cancelled":
            raise SendError(ResponseCode.QUERY_NOT_FOUND, f"cancel: {where} is already cancelled")
        if target.state == "delivered":
            raise SendError(ResponseCode.QUERY_NOT_FOUND, f"cancel: {where} was already delivered")
        if target.state == "pending":
            if given is not None and abs(given - target.deliver_ms) >= self.precision_ms:
                raise SendError(ResponseCode.QUERY_NOT_FOUND,
                                f"cancel: {where} is scheduled at {target.deliver_ms}, not at {given}")
            deliver = target.deliver_ms
        else:  # no index to look in: trust the given time (RocketMQ's semantics)
            if given is None:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                                f"cancel illegal: give the target's {mc.TIMER_DELIVER_MS} (the broker has no message index)")
            deliver = given
        if deliver - now < self.cancel_guard_ms:
            raise SendError(ResponseCode.QUERY_NOT_FOUND,
                            f"cancel: {where} is due at {deliver}, too late to cancel (already delivered or being delivered)")
        for k in (*TIMER_REQUEST_PROPERTIES, *TIMER_BROKER_PROPERTIES, mc.DELAY):
            props.pop(k, None)
        props[mc.TIMER_DEL_UNIQKEY] = f"{topic}+{uniq}"
        props[mc.TIMER_DELIVER_MS] = str(deliver)
        props[mc.TIMER_OUT_MS] = str(deliver)
        props[mc.REAL_TOPIC] = topic
        props[mc.REAL_QID] = str(target.real_qid)
        # Indexed under the target's uniq key too, so a second cancel finds this one.
        keys = props.get(mc.KEYS)
        props[mc.KEYS] = f"{keys} {uniq}" if keys else uniq
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0
