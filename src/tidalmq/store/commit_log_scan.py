"""The record scan of the CommitLog: RocketMQ's checkMessageAndReturnSize over runs of records, for the
reput (``read_dispatch_requests``: the DispatchBatch columns the ConsumeQueues and the index are built from)
and for recovery (where valid data ends, CRC checks).

``CommitLogScan`` is a collaborator of ``CommitLog`` (store/commit_log.py): the append writes records, the
scan reads them back. It owns what reading needs: the table of topics seen (``DispatchBatch`` carries ids
into it), the tag-code cache, and the dispatch columns the append built for the dispatcher (``keep_preread``).
"""

from __future__ import annotations

import collections
import logging
import struct
import threading
from itertools import repeat
from typing import NamedTuple

import numpy as np

from tidalmq.common.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from tidalmq.common.record import (
    BLANK_MAGIC_CODE,
    MIN_RECORD_SIZE,
    POS_MAGIC,
    DispatchProperties,
    RecordError,
    RecordView,
    body_crc,
    dispatch_properties,
    record_crc_ok,
    view_record,
)
from tidalmq.common.record_batch import PropertyLayout, RecordBatch
from tidalmq.common.record_columns import record_columns
from tidalmq.common.taghash import tags_hash_code
from tidalmq.store.mapped_file import MappedFile, MappedFileQueue
from tidalmq.store.results import DispatchBatch

log = logging.getLogger("tidalmq.store")

_I = struct.Struct(">i")
_SPECIAL_TAG_NAMES = frozenset((b"DELAY", b"TIMER_OUT_MS"))  # tag codes that depend on the topic


def _decoded(column: tuple[bytes, ...] | None, n: int) -> list[str | None]:
    """A layout column's values as text (as ``_dispatch_properties`` decodes them); None a record without."""
    if column is None:
        return [None] * n
    return list(map(str, column, repeat("utf-8", n), repeat("replace", n)))

# How a scan of records ended: at its limit or budget, at a BLANK record (end of file), at a bad record.
END = 1
BLANK = 0
INVALID = -1
# Records per scan_records call (bounds the numpy index arrays of one call).
SCAN_MAX_RECORDS = 1 << 16
# Up to this many records a scan reads them one by one: numpy's fixed cost per call (tens of
# operations) would outweigh what it saves.
SCAN_FEW = 8

# Batches whose dispatch columns the append already built, kept for the dispatcher (bounded: past it the
# oldest are dropped and simply read back from the CommitLog).
PREREAD_MAX = 4096


class Preread(NamedTuple):
    """Dispatch columns the append built for the records at [start, end) of the CommitLog."""

    start: int
    end: int
    batch: DispatchBatch


class Scan(NamedTuple):
    """The result of ``scan_records``."""

    batch: DispatchBatch  # the records that checked out
    end: int  # file position after the last of them
    verdict: int  # END, BLANK or INVALID: what stopped the scan
    last_store_timestamp: int  # of the last record (0 if none)
    # CommitLog offsets of records in ``batch`` whose body failed its CRC (checked scans only)
    crc_failed: tuple[int, ...] = ()


class CommitLogScan:
    """The reads of runs of records of one CommitLog's files (``mfq``)."""

    def __init__(self, mfq: MappedFileQueue, file_size: int, delay_levels: dict[int, int], *,
                 force_prop_crc: bool) -> None:
        self.mfq = mfq
        self.file_size = file_size
        self._delay_levels = delay_levels
        self._max_delay_level = max(delay_levels) if delay_levels else 0
        self.force_prop_crc = force_prop_crc  # forceVerifyPropCRC
        self._tag_codes: dict[bytes, int] = {}
        # Topics seen by scans, by their stored bytes: DispatchBatch carries ids into _topic_names.
        self._topic_ids: dict[bytes, int] = {}
        self._topic_names: list[str] = []
        self._topic_lock = threading.Lock()
        self._preread: collections.deque[Preread] = collections.deque()

    def keep_preread(self, topic: str, queue_id: int, batch: RecordBatch, first_phys: int, nbytes: int,
                      ts: int) -> None:
        """The DispatchBatch a scan of the just-appended batch would produce, from what the append knows."""
        if topic == SCHEDULE_TOPIC:
            return  # no batch goes there (a batch with DELAY is refused); left to the scan
        # The timer topic's tag code is TIMER_OUT_MS: TimerRewrite.park_batch gives the deliver times it
        # parsed as the batch's tag codes, and the scan of the same records reads the same from TIMER_OUT_MS.
        tid = self._topic_id(topic.encode("utf-8"))
        n = len(batch.sizes)
        columns = self._layout_columns(batch.layout, n) if batch.found is None else None
        if columns is not None:
            tags_codes, keys, uniq, lite = columns
        else:
            tags_codes, keys, uniq, lite = self._dispatch_properties(batch.dispatch_properties, [tid] * n, [ts] * n)
        if batch.tag_codes is not None:  # what the rewrite knew (a parked message's deliver time)
            tags_codes = batch.tag_codes
        heads = batch.heads
        dispatch = DispatchBatch(
            self._topic_names, np.full(n, tid, dtype=np.int64), np.full(n, queue_id, dtype=np.int64),
            heads["phys"].astype(np.int64), batch.sizes, np.array(tags_codes, dtype=np.int64),
            np.full(n, ts, dtype=np.int64), heads["queue_offset"].astype(np.int64),
            np.full(n, batch.sysflag, dtype=np.int64), np.zeros(n, dtype=np.int64), keys, uniq, lite)
        preread = self._preread
        preread.append(Preread(first_phys, first_phys + nbytes, dispatch))
        if len(preread) > PREREAD_MAX:
            preread.popleft()

    def _layout_columns(self, layout: PropertyLayout | None, n: int
                        ) -> tuple[list[int], list[str | None], list[str | None], list[str | None] | None] | None:
        """``_dispatch_properties`` of a batch whose properties share a layout, column by column (no step
        a record in Python); None when the layout holds DELAY or TIMER_OUT_MS, whose tag codes depend on
        the topic: the per-record path then."""
        if layout is None or _SPECIAL_TAG_NAMES.intersection(layout.names):
            return None
        tags = layout.column(b"TAGS")
        if tags is None:
            tags_codes = [0] * n
        else:
            codes = {t: (self.tags_code_of(t) if t else 0) for t in set(tags)}
            tags_codes = list(map(codes.__getitem__, tags))
        return (tags_codes, _decoded(layout.column(b"KEYS"), n), _decoded(layout.column(b"UNIQ_KEY"), n),
                None if (lite := layout.column(b"__LITE_TOPIC")) is None else _decoded(lite, n))

    def _take_preread(self, offset: int) -> Preread | None:
        """The pre-read batch starting at ``offset`` (dropping those the dispatch is already past)."""
        preread = self._preread
        while preread and preread[0].start < offset:
            preread.popleft()
        if preread and preread[0].start == offset:
            return preread.popleft()
        return None

    def tags_code_of(self, tags: bytes) -> int:
        """The ConsumeQueue tag hash code of a stored TAGS value (cached: tags repeat)."""
        code = self._tag_codes.get(tags)
        if code is None:
            if len(self._tag_codes) > 65536:
                self._tag_codes.clear()
            code = self._tag_codes[tags] = tags_hash_code(tags.decode("utf-8", "replace"))
        return code

    def scan_records(self, mf: MappedFile, pos: int, limit: int, *, check_crc: bool = False,
                     max_bytes: int = 1 << 62, max_records: int = SCAN_MAX_RECORDS,
                     dispatch_fields: bool = True, topics: bool = False) -> Scan:
        """RocketMQ's checkMessageAndReturnSize over a run of records of one file, from ``pos``: walk the
        TOTALSIZE chain (records starting before ``pos + max_bytes``, at most ``max_records``), then
        read and check every record's fields with numpy, then look up the properties dispatch needs.

        The run stops at ``limit``, at a BLANK record (end of file) or at the first record that does not
        check out (torn, corrupt, CRC mismatch, or lying about its own PHYSICALOFFSET).

        Without ``dispatch_fields`` (recovery, which wants where valid data ends and when it was stored)
        the batch's topics, tag codes and keys are left empty: finding them in the properties is most of
        a scan's cost, and reput reads them again when it dispatches. ``topics`` reads the topics anyway
        (cheap: no properties), for a check against the ConsumeQueues."""
        mm = mf.mm
        file_from = mf.file_from_offset
        starts: list[int] = []
        add = starts.append
        p = pos
        stop = min(limit, pos + max_bytes)
        last_header = limit - 8
        total_at = _I.unpack_from
        verdict = END
        # The walk only follows TOTALSIZE; MAGICCODE is checked for all records at once below.
        for _ in range(max_records):
            if p >= stop:
                break
            if p > last_header:
                verdict = INVALID
                break
            total = total_at(mm, p)[0]
            if total < MIN_RECORD_SIZE or p + total > limit:
                verdict = BLANK if total_at(mm, p + 4)[0] == BLANK_MAGIC_CODE else INVALID
                break
            add(p)
            p += total
        if not starts:
            return Scan(DispatchBatch.empty(self._topic_names), pos, verdict, 0)
        if len(starts) <= SCAN_FEW:
            return self._scan_few(mf, starts, pos, verdict, check_crc)
        u8 = mf.numpy(np.uint8)
        s = np.array(starts, dtype=np.int64)
        cols = record_columns(u8, s)
        # A record's own offset catches stale bytes that merely parse.
        ok = cols.ok & (cols.head["phys"] == s + file_from)
        n = len(starts)
        if not ok.all():
            n = int(np.argmin(ok))
            if int(cols.head["magic"][n]) == BLANK_MAGIC_CODE:
                verdict = BLANK
            else:
                log.warning("undecodable record at %d", file_from + starts[n])
                verdict = INVALID
            del starts[n:]
        crc_failed: tuple[int, ...] = ()
        if check_crc:
            n, verdict, crc_failed = self._check_crcs(mf, starts[:n], cols.body_at[:n].tolist(),
                                                      cols.body_len[:n].tolist(), cols.head["crc"][:n].tolist(),
                                                      cols.head["total"][:n].tolist(), verdict)
        if n == 0:
            return Scan(DispatchBatch.empty(self._topic_names), pos, verdict, 0)
        head = cols.head[:n]
        store_ts = cols.store_ts[:n]
        if not dispatch_fields:
            none: list[str | None] = [None] * n
            zeros = np.zeros(n, dtype=np.int64)
            tids = self._read_topics(u8, cols.topic_at[:n], cols.topic_len[:n]) if topics else zeros
            batch = DispatchBatch(
                self._topic_names, tids, head["queue_id"].astype(np.int64), s[:n] + file_from,
                head["total"].astype(np.int64), zeros, store_ts, head["queue_offset"].astype(np.int64),
                head["sysflag"].astype(np.int64), cols.prepared[:n], none, none)
            return Scan(batch, int(cols.end[n - 1]), verdict, int(store_ts[-1]), crc_failed)
        topic_ids = self._read_topics(u8, cols.topic_at[:n], cols.topic_len[:n])
        find = dispatch_properties
        found = [find(mm, p0, p0 + pn) if pn else []
                 for p0, pn in zip(cols.props_at[:n].tolist(), cols.props_len[:n].tolist(), strict=True)]
        tags_codes, keys, uniq, lite = self._dispatch_properties(found, topic_ids.tolist(), store_ts.tolist())
        batch = DispatchBatch(
            self._topic_names, topic_ids, head["queue_id"].astype(np.int64), s[:n] + file_from,
            head["total"].astype(np.int64), np.array(tags_codes, dtype=np.int64), store_ts,
            head["queue_offset"].astype(np.int64), head["sysflag"].astype(np.int64), cols.prepared[:n], keys, uniq,
            lite)
        return Scan(batch, int(cols.end[n - 1]), verdict, int(store_ts[-1]), crc_failed)

    def _scan_few(self, mf: MappedFile, starts: list[int], pos: int, verdict: int, check_crc: bool) -> Scan:
        """``scan_records`` for a few records: the same checks and columns, through ``view_record``."""
        mm = mf.mm
        file_from = mf.file_from_offset
        cols: list[tuple[int, int, int, int, int, int, int, int]] = []  # queue id .. prepared offset, topic id
        found: list[DispatchProperties] = []
        find = dispatch_properties
        end = pos
        views: list[RecordView] = []
        for p in starts:
            try:
                v = view_record(mm, p)
            except RecordError:
                verdict = BLANK if _I.unpack_from(mm, p + POS_MAGIC)[0] == BLANK_MAGIC_CODE else INVALID
                break
            # One unpack of the view (a tuple in RecordView.ITEMS order) instead of a property per field.
            (total, _magic, _crc, queue_id, _flag, queue_offset, phys, sysflag, _born, _bh, _bp, store_ts, _sh, _sp,
             _reconsume, prepared, _body_len, _buf, _pos, _body_at, topic_at, topic_len, props_at, props_len) = v
            # A record's own offset catches stale bytes that merely parse.
            if phys != file_from + p:
                verdict = INVALID
                break
            views.append(v)
            topic = mm[topic_at : topic_at + topic_len]
            tid = self._topic_ids.get(topic)
            cols.append((queue_id, queue_offset, phys, total, store_ts, sysflag, prepared,
                         tid if tid is not None else self._topic_id(topic)))
            found.append(find(mm, props_at, props_at + props_len) if props_len else [])
            end = p + total
        if verdict == INVALID and len(cols) < len(starts):  # (a BLANK at the end is not a fault)
            log.warning("undecodable record at %d", file_from + starts[len(cols)])
        crc_failed: tuple[int, ...] = ()
        if check_crc and views:
            n, verdict, crc_failed = self._check_crcs(mf, [v.pos for v in views], [v.body_at for v in views],
                                                      [v.body_len for v in views], [v.body_crc for v in views],
                                                      [v.total for v in views], verdict)
            del cols[n:], found[n:]
            if n < len(views):
                end = views[n].pos
        if not cols:
            return Scan(DispatchBatch.empty(self._topic_names), pos, verdict, 0)
        queue_ids, queue_offsets, phys_l, sizes, store_ts_l, sysflags, prepared_l, topic_ids = (
            np.array(c, dtype=np.int64) for c in zip(*cols, strict=True))
        tags_codes, keys, uniq, lite = self._dispatch_properties(found, topic_ids.tolist(), store_ts_l.tolist())
        batch = DispatchBatch(self._topic_names, topic_ids, queue_ids, phys_l, sizes,
                              np.array(tags_codes, dtype=np.int64), store_ts_l, queue_offsets, sysflags,
                              prepared_l, keys, uniq, lite)
        return Scan(batch, end, verdict, int(store_ts_l[-1]), crc_failed)

    def _check_crcs(self, mf: MappedFile, starts: list[int], body_at: list[int], body_len: list[int],
                    crcs: list[int], totals: list[int], verdict: int) -> tuple[int, int, tuple[int, ...]]:
        """The body CRC of each record a scan found, and its record CRC (``__CRC32#``) when it carries one
        (with forceVerifyPropCRC a record without one fails). A record that fails either and is the last before an
        unreadable one is a torn write (RocketMQ's recovery truncates there): the scan ends before it,
        INVALID. Any other is damage in the middle of the log: the records after it are intact and
        must not be lost, so the scan keeps going and reports it. Returns (records kept, verdict,
        CommitLog offsets of the records that failed)."""
        view = mf.view
        n = len(starts)
        failed: list[int] = []
        force = self.force_prop_crc
        for i, (b0, bl, crc, p0, total) in enumerate(zip(body_at, body_len, crcs, starts, totals, strict=True)):
            if body_crc(view[b0 : b0 + bl]) == crc:
                whole = record_crc_ok(view, p0, total)
                if whole or (whole is None and not force):
                    continue
            if i == n - 1 and verdict == INVALID:
                log.warning("CRC check failed at %d: a torn record, the end of valid data", mf.file_from_offset
                            + starts[i])
                return i, INVALID, tuple(failed)
            failed.append(mf.file_from_offset + starts[i])
        return n, verdict, tuple(failed)

    def _read_topics(self, u8: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray) -> np.ndarray:
        """Each record's topic id, compared as byte rows with numpy (a round rarely holds many topics)."""
        ids = np.empty(len(topic_at), dtype=np.int64)
        lengths = np.unique(topic_len)
        for length in lengths.tolist():
            sel = slice(None) if len(lengths) == 1 else np.flatnonzero(topic_len == length)
            rows = u8[topic_at[sel][:, None] + np.arange(length)]
            if length == 0 or (rows == rows[0]).all():
                ids[sel] = self._topic_id(rows[0].tobytes() if length else b"")
                continue
            distinct, inverse = np.unique(rows.view(np.dtype((np.void, length))).ravel(), return_inverse=True)
            ids[sel] = np.array([self._topic_id(bytes(t)) for t in distinct], dtype=np.int64)[inverse.ravel()]
        return ids

    def _dispatch_properties(self, found: list[DispatchProperties], topic_ids: list[int], store_ts: list[int]
                             ) -> tuple[list[int], list[str | None], list[str | None], list[str | None] | None]:
        """Per record, from what ``dispatch_properties`` found in its properties: the tag hash code (for
        SCHEDULE_TOPIC_XXXX and the timer topic, the deliver time), KEYS, UNIQ_KEY and the lite topic
        (None for the whole column when no record has one)."""
        tags_codes: list[int] = []
        keys_l: list[str | None] = []
        uniq_l: list[str | None] = []
        lite_l: list[str | None] | None = None
        schedule_id = self._topic_id(SCHEDULE_TOPIC.encode())
        timer_id = self._topic_id(TIMER_TOPIC.encode())
        tag_codes = self._tag_codes
        for i, (tid, pairs) in enumerate(zip(topic_ids, found, strict=True)):
            tags = keys = uniq = special = out_ms = None
            for name, value in pairs:  # the last of a repeated name wins, as in Java
                if name == b"UNIQ_KEY":
                    uniq = value
                elif name == b"TAGS":
                    tags = value
                elif name == b"KEYS":
                    keys = value
                elif name == b"DELAY" and tid == schedule_id:
                    special = value
                elif name == b"TIMER_OUT_MS" and (tid == timer_id or tid == schedule_id):
                    out_ms = value
                elif name == b"__LITE_TOPIC":
                    if lite_l is None:
                        lite_l = [None] * len(topic_ids)
                    lite_l[i] = value.decode("utf-8", "replace")
            code = 0
            if tags:
                cached = tag_codes.get(tags)
                code = self.tags_code_of(tags) if cached is None else cached
            if out_ms is not None and out_ms.lstrip(b"-").isdigit():
                # The timer service enqueues straight from these entries: the tag is the deliver time. A
                # delay-level message carries the one its level gave it when it was stored
                # (DelayLevelRewrite), so a table changed since (a live messageDelayLevel) does not move it.
                code = int(out_ms)
            elif special is not None:
                code = self._deliver_timestamp(special, store_ts[i], code)  # stored before the stamp
            tags_codes.append(code)
            keys_l.append(keys.decode("utf-8", "replace") if keys is not None else None)
            uniq_l.append(uniq.decode("utf-8", "replace") if uniq is not None else None)
        return tags_codes, keys_l, uniq_l, lite_l

    def _topic_id(self, raw: bytes) -> int:
        tid = self._topic_ids.get(raw)
        if tid is None:
            with self._topic_lock:  # the appender and the reput thread may meet a new topic at once
                tid = self._topic_ids.get(raw)
                if tid is None:
                    self._topic_names.append(raw.decode("utf-8", "replace"))
                    tid = self._topic_ids[raw] = len(self._topic_names) - 1
        return tid

    def _deliver_timestamp(self, level_text: bytes, store_ts: int, default: int) -> int:
        """For SCHEDULE_TOPIC_XXXX the ConsumeQueue tag field holds the deliver time
        (DefaultMessageStore.computeDeliverTimestamp)."""
        try:
            level = int(level_text)
        except ValueError:
            return default
        level = min(level, self._max_delay_level)
        if level <= 0:
            return default
        delay = self._delay_levels.get(level)
        return store_ts + delay if delay is not None else store_ts + 1000

    def read_dispatch_requests(self, start: int, max_bytes: int, end_all: int) -> tuple[DispatchBatch, int, bool]:
        """Records from ``start`` up to ``end_all`` (the end of what is written; about ``max_bytes``).
        Returns them, the offset after them and whether an undecodable record stopped the read."""
        parts: list[DispatchBatch] = []
        offset = start
        budget_end = start + max_bytes
        while offset < end_all and offset < budget_end:
            pre = self._take_preread(offset)
            if pre is not None:
                parts.append(pre.batch)
                offset = pre.end
                continue
            mf = self.mfq.find_mapped_file_by_offset(offset)
            if mf is None:
                min_off = self.mfq.min_offset()
                if 0 <= offset < min_off:
                    offset = min_off  # files were deleted under us: skip ahead
                    continue
                return DispatchBatch.concat(parts), offset, True
            base = mf.file_from_offset
            wrote = mf.wrote_position
            scan_bytes = budget_end - offset
            if self._preread and self._preread[0].start > offset:
                scan_bytes = min(scan_bytes, self._preread[0].start - offset)  # stop where one begins
            scan = self.scan_records(mf, offset - base, wrote, max_bytes=scan_bytes)
            if len(scan.batch):
                parts.append(scan.batch)
            if scan.verdict == INVALID:
                log.error("reput: undecodable record at %d, stopping dispatch", base + scan.end)
                return DispatchBatch.concat(parts), base + scan.end, True
            if scan.verdict == BLANK:
                offset = base + self.file_size
                continue
            offset = base + scan.end
            if scan.end >= wrote and wrote < self.file_size:
                break  # caught up with the writer in this file
        return DispatchBatch.concat(parts), offset, False
