"""The CommitLog: every message of every topic, appended to fixed-size mapped files.

Writes: ``put`` patches the broker-encoded records (queue offset, physical offset, store timestamp) and
copies them into the mapped file under the put lock, one slice assignment per contiguous run. A record
(or a batch request) never spans files: when it does not fit, the rest of the file is marked with a
BLANK record and the next file begins.

Crash consistency of a run: its bytes are copied *except* the first 8 (TOTALSIZE, MAGICCODE), which are
stored last. Until then the region reads as zeros, which no scan accepts, so a process killed in the
middle of a copy leaves nothing that looks like a record. (Beyond the write position files are always
zero: new files are preallocated, and recovery zeroes what follows the last valid record.)
"""

from __future__ import annotations

import collections
import logging
import struct
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import is_disk_full
from tidalmq.common.msgid import host_bytes, joined_offset_msg_ids
from tidalmq.common.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from tidalmq.common.record import (
    BLANK_MAGIC_CODE,
    DISPATCH_PROPERTIES,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    POS_BORNHOST,
    POS_MAGIC,
    POS_SYSFLAG,
    DispatchProperties,
    RecordBatch,
    RecordError,
    RecordView,
    body_crc,
    encode_blank,
    patch_for_append,
    record_columns,
    store_timestamp_pos,
    view_record,
)
from tidalmq.common.taghash import tags_hash_code
from tidalmq.store.config import MessageStoreConfig, parse_delay_levels
from tidalmq.store.mapped_file import MappedFile, MappedFileQueue, pwrite_all
from tidalmq.store.results import AppendResult, DispatchBatch, PutRequest, PutStatus

log = logging.getLogger("tidalmq.store")


_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")

_NOT_TX = (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE)

# How a scan of records ended: at its limit or budget, at a BLANK record (end of file), at a bad record.
END = 1
BLANK = 0
INVALID = -1
# Records per scan_records call (bounds the numpy index arrays of one call).
SCAN_MAX_RECORDS = 1 << 16
# Up to this many records a scan reads them one by one: numpy's fixed cost per call (tens of
# operations, ~100 us in all) would outweigh what it saves.
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


RECORD_OVERHEAD_ALLOWANCE = 64 * 1024


class CommitLog:
    def __init__(self, config: MessageStoreConfig, clock: Callable[[], int],
                 store_host: tuple[str, int] = ("127.0.0.1", 10911)) -> None:
        self.config = config
        self.clock = clock
        self.file_size = config.mapped_file_size_commit_log
        self.mfq = MappedFileQueue(config.commit_log_path, self.file_size, preallocate=True)
        self.put_lock = threading.Lock()
        # (topic, queue_id) -> next queue offset; rebuilt from the ConsumeQueues after recovery.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # (end of written data, store timestamp of its last record), replaced as one object so a flusher
        # reads a consistent pair without the put lock.
        self.written: tuple[int, int] = (0, 0)
        self.flushed_store_timestamp = 0
        self.confirm_offset = 0
        raw = host_bytes(store_host[0])
        self._msg_id_prefix = (raw + _I.pack(store_host[1])).hex().upper()
        self._delay_levels = parse_delay_levels(config.message_delay_level)
        self._max_delay_level = max(self._delay_levels) if self._delay_levels else 0
        self._tag_codes: dict[bytes, int] = {}
        # Topics seen by scans, by their stored bytes: DispatchBatch carries ids into _topic_names.
        self._topic_ids: dict[bytes, int] = {}
        self._topic_names: list[str] = []
        self._topic_lock = threading.Lock()
        self._preread: collections.deque[Preread] = collections.deque()
        self.on_written: Callable[[], None] = lambda: None
        self.on_no_space: Callable[[OSError], None] = lambda e: None
        self._recovered_store_ts = 0
        # checkCRCOnRead: verify every record before it is served (off by default: it costs a CRC pass
        # over every body read, where the read path otherwise copies nothing).
        self.check_on_read = config.check_crc_on_read
        # CommitLog offsets of records found corrupt (by recovery or a checked read): never served.
        self.corrupt: frozenset[int] = frozenset()
        self.corrupt_records = 0
        self._corrupt_lock = threading.Lock()

    # ------------------------------------------------------------------ offsets
    @property
    def max_offset(self) -> int:
        return self.written[0]

    @property
    def min_offset(self) -> int:
        first = self.mfq.first
        if first is None:
            return -1
        # A first file that is not readable any more would be skipped by RocketMQ; ours always is.
        return first.file_from_offset

    @property
    def flushed_where(self) -> int:
        return self.mfq.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def msg_id(self, phys: int) -> str:
        return f"{self._msg_id_prefix}{phys:016X}"

    # ------------------------------------------------------------------ append
    def put(self, requests: Sequence[PutRequest], *, wake_reput: bool = True) -> list[AppendResult]:
        """Append every request; one AppendResult each. Never raises for a bad request."""
        results: list[AppendResult] = []
        # The body limit is the broker's to check; a record may add up to 64 KiB of header, topic
        # and properties to a body of the maximum size (RocketMQ 5's messageSizeLimit rule).
        max_size = self.config.max_message_size + RECORD_OVERHEAD_ALLOWANCE
        file_size = self.file_size
        table = self.topic_queue_table
        with self.put_lock:
            ts = self.clock()
            mf: MappedFile | None  # None once making the next file failed in this call
            try:
                mf = self.mfq.get_last_mapped_file(0)
            except OSError as e:
                return [AppendResult(self._create_failed(e), msg_num=len(r.records)) for r in requests]
            wpos = mf.wrote_position
            failed = PutStatus.CREATE_MAPPED_FILE_FAILED
            run: list[bytes | bytearray | memoryview] = []
            run_start = wpos
            for req in requests:
                recs = req.records
                if mf is None:  # creating the next file failed earlier in this call
                    results.append(AppendResult(failed, msg_num=len(recs)))
                    continue
                # ``type(x) is`` (not a stored flag, nor isinstance) so the type checker narrows both
                # branches; it costs what the ``__class__`` test did.
                if type(recs) is RecordBatch:
                    status = self._validate_batch(recs, max_size)
                    total = recs.nbytes
                else:
                    status = self._validate(recs, max_size)
                    total = 0
                    for rec in recs:
                        total += len(rec)
                if status is not None:
                    results.append(AppendResult(status, store_timestamp=ts, msg_num=len(recs)))
                    continue
                if total + END_FILE_MIN_BLANK_LENGTH > file_size:
                    results.append(AppendResult(PutStatus.MESSAGE_ILLEGAL, store_timestamp=ts, msg_num=len(recs)))
                    continue
                if total + END_FILE_MIN_BLANK_LENGTH > file_size - wpos:
                    # End of file: publish what we have, mark the rest BLANK, continue in a new file.
                    self._write_run(mf, run_start, run, wpos - run_start)
                    run = []
                    mf.mm[wpos : wpos + 8] = encode_blank(file_size - wpos)
                    mf.wrote_position = file_size
                    try:
                        mf = self.mfq.get_last_mapped_file(0)
                    except OSError as e:
                        results.append(AppendResult(self._create_failed(e), msg_num=len(recs)))
                        failed = results[-1].status
                        mf = None
                        continue
                    wpos = run_start = 0
                key = (req.topic, req.queue_id)
                qoff = first_qoff = table.get(key, 0)
                first_phys = mf.file_from_offset + wpos
                if type(recs) is RecordBatch:
                    table[key], msg_id = self._patch_batch(recs, qoff, first_phys, ts)
                    run.extend(recs.pieces)
                    self._keep_preread(req.topic, req.queue_id, recs, first_phys, total, ts)
                else:
                    phys = first_phys
                    ids = []
                    for rec in recs:
                        if (_I.unpack_from(rec, POS_SYSFLAG)[0] & sf.TRANSACTION_TYPE_MASK) in _NOT_TX:
                            patch_for_append(rec, 0, qoff, phys, ts)
                            qoff += 1
                        else:
                            # Prepared / rolled-back half messages take no queue offset (RocketMQ stores 0).
                            patch_for_append(rec, 0, 0, phys, ts)
                        ids.append(self.msg_id(phys))
                        phys += len(rec)
                    table[key] = qoff
                    msg_id = ",".join(ids)
                    run.extend(recs)
                wpos += total
                results.append(AppendResult(PutStatus.PUT_OK, first_phys, total, msg_id, first_qoff, ts, len(recs)))
            if mf is not None:
                self._write_run(mf, run_start, run, wpos - run_start)
            self.written = (self.mfq.max_offset(), ts)
        if wake_reput:
            self.on_written()
        return results

    def _create_failed(self, e: OSError) -> PutStatus:
        """The answer to a put whose CommitLog file could not be made: a full disk is RocketMQ's
        SERVICE_NOT_AVAILABLE (and the store refuses writes for a while), anything else a failure."""
        if is_disk_full(e):
            self.on_no_space(e)
            return PutStatus.SERVICE_NOT_AVAILABLE
        log.error("create mapped file failed: %s", e)
        return PutStatus.CREATE_MAPPED_FILE_FAILED

    @staticmethod
    def _validate(recs: list[bytearray], max_size: int) -> PutStatus | None:
        if not recs:
            return PutStatus.MESSAGE_ILLEGAL
        for rec in recs:
            n = len(rec)
            if n < MIN_RECORD_SIZE or n > max_size:
                return PutStatus.MESSAGE_ILLEGAL
            total, magic = _II.unpack_from(rec, 0)
            if total != n or magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
                return PutStatus.MESSAGE_ILLEGAL
        return None

    @staticmethod
    def _validate_batch(batch: RecordBatch, max_size: int) -> PutStatus | None:
        sizes = batch.sizes
        heads = batch.heads
        if len(sizes) == 0 or len(heads) != len(sizes):
            return PutStatus.MESSAGE_ILLEGAL
        if int(sizes.min()) < MIN_RECORD_SIZE or int(sizes.max()) > max_size:
            return PutStatus.MESSAGE_ILLEGAL
        if not (np.array_equal(heads["total"], sizes) and (heads["magic"] == MESSAGE_MAGIC_CODE).all()):
            return PutStatus.MESSAGE_ILLEGAL
        return None

    def _patch_batch(self, batch: RecordBatch, qoff: int, first_phys: int, ts: int) -> tuple[int, str]:
        """``patch_for_append`` for every record of the batch: QUEUEOFFSET and PHYSICALOFFSET with one
        numpy store each, STORETIMESTAMP once in the part the records share. Returns the next queue
        offset and the batch's msgIds joined by commas."""
        n = len(batch.sizes)
        heads = batch.heads
        phys = batch.starts + first_phys
        if (batch.sysflag & sf.TRANSACTION_TYPE_MASK) in _NOT_TX:
            heads["queue_offset"] = np.arange(qoff, qoff + n, dtype=np.int64)
            qoff += n
        else:  # prepared / rolled-back half messages take no queue offset (RocketMQ stores 0)
            heads["queue_offset"] = 0
        heads["phys"] = phys
        _Q.pack_into(batch.shared, store_timestamp_pos(batch.sysflag) - POS_BORNHOST, ts)
        return qoff, joined_offset_msg_ids(self._msg_id_prefix, phys)

    def _keep_preread(self, topic: str, queue_id: int, batch: RecordBatch, first_phys: int, nbytes: int,
                      ts: int) -> None:
        """The DispatchBatch a scan of the just-appended batch would produce, from what the append knows."""
        if topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
            return  # their tag codes are deliver times: left to the scan
        tid = self._topic_id(topic.encode("utf-8"))
        n = len(batch.sizes)
        tags_codes, keys, uniq = self._dispatch_properties(batch.dispatch_properties, [tid] * n, [ts] * n)
        heads = batch.heads
        dispatch = DispatchBatch(
            self._topic_names, np.full(n, tid, dtype=np.int64), np.full(n, queue_id, dtype=np.int64),
            heads["phys"].astype(np.int64), batch.sizes, np.array(tags_codes, dtype=np.int64),
            np.full(n, ts, dtype=np.int64), heads["queue_offset"].astype(np.int64),
            np.full(n, batch.sysflag, dtype=np.int64), np.zeros(n, dtype=np.int64), keys, uniq)
        preread = self._preread
        preread.append(Preread(first_phys, first_phys + nbytes, dispatch))
        if len(preread) > PREREAD_MAX:
            preread.popleft()

    def _take_preread(self, offset: int) -> Preread | None:
        """The pre-read batch starting at ``offset`` (dropping those the dispatch is already past)."""
        preread = self._preread
        while preread and preread[0].start < offset:
            preread.popleft()
        if preread and preread[0].start == offset:
            return preread.popleft()
        return None

    @staticmethod
    def _write_run(mf: MappedFile, start: int, run: list[bytes | bytearray | memoryview], n: int) -> None:
        """Write a run of records at ``start`` with pwrite (the copy into the page cache, and the page
        allocation that comes with it, happen outside the GIL; the mapping sees the same pages)."""
        if not run:
            return
        fd = mf.fd
        first = memoryview(run[0]).cast("B")
        run[0] = first[8:]
        pwrite_all(fd, run, start + 8, n - 8)
        pwrite_all(fd, [first[:8]], start, 8)  # last: makes the run visible to scans (see module doc)
        mf.wrote_position = start + n

    # ------------------------------------------------------------------ flush
    def flush(self, least_pages: int = 0) -> bool:
        """Flush written data; afterwards ``flushed_where`` covers everything written before the call."""
        end, ts = self.written
        flushed = self.mfq.flush(least_pages)
        if self.mfq.flushed_where >= end and ts:
            self.flushed_store_timestamp = ts
        return flushed

    # ------------------------------------------------------------------ read
    def get_message(self, phys: int, size: int) -> memoryview | None:
        mf = self.mfq.find_mapped_file_by_offset(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from_offset
        if pos + size > mf.wrote_position or size <= 0:
            return None
        view = mf.view[pos : pos + size]
        if self.corrupt or self.check_on_read:  # both almost always false: the zero-copy path stays as it was
            return view if self._servable(view, phys) else None
        return view

    def _servable(self, view: memoryview, phys: int) -> bool:
        """Whether the record at ``phys`` may be served: not found corrupt before and, with
        checkCRCOnRead, sound now (structure, property text, body CRC, its own offset)."""
        if phys in self.corrupt:
            return False
        if not self.check_on_read:
            return True
        try:
            v = view_record(view)
            v.check(crc=True)
            if v.physical_offset != phys or v.total != len(view):
                raise RecordError(f"record at {phys} claims offset {v.physical_offset}, size {v.total}")
        except RecordError as e:
            self.mark_corrupt(phys, str(e))
            return False
        return True

    def mark_corrupt(self, phys: int, reason: str) -> None:
        """Never serve the record at ``phys`` again (until restart; recovery and checked reads find it
        again). Logged once per record; counted in ``corrupt_records``."""
        with self._corrupt_lock:
            if phys in self.corrupt:
                return
            self.corrupt = self.corrupt | {phys}  # replaced, not mutated: readers take no lock
            self.corrupt_records += 1
        log.error("corrupt record at CommitLog offset %d, not served: %s", phys, reason)

    def record_size_at(self, phys: int) -> int:
        mf = self.mfq.find_mapped_file_by_offset(phys)
        if mf is None:
            return -1
        pos = phys - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return -1
        total, magic = _II.unpack_from(mf.mm, pos)
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            return -1
        return total

    def store_timestamp_at(self, phys: int) -> int:
        """Store time of the record at ``phys``; -1 if it is not there."""
        mf = self.mfq.find_mapped_file_by_offset(phys)
        if mf is None:
            return -1
        pos = phys - mf.file_from_offset
        if pos + 60 > mf.wrote_position:
            return -1
        sysflag = _I.unpack_from(mf.mm, pos + POS_SYSFLAG)[0]
        return _Q.unpack_from(mf.mm, pos + store_timestamp_pos(sysflag))[0]

    # ------------------------------------------------------------------ record check (reput/recovery)
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
                     dispatch_fields: bool = True) -> Scan:
        """RocketMQ's checkMessageAndReturnSize over a run of records of one file, from ``pos``: walk the
        TOTALSIZE chain (records starting before ``pos + max_bytes``, at most ``max_records``), then
        read and check every record's fields with numpy, then look up the properties dispatch needs.

        The run stops at ``limit``, at a BLANK record (end of file) or at the first record that does not
        check out (torn, corrupt, CRC mismatch, or lying about its own PHYSICALOFFSET).

        Without ``dispatch_fields`` (recovery, which wants where valid data ends and when it was stored)
        the batch's topics, tag codes and keys are left empty: finding them in the properties is most of
        a scan's cost, and reput reads them again when it dispatches."""
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
                                                      verdict)
        if n == 0:
            return Scan(DispatchBatch.empty(self._topic_names), pos, verdict, 0)
        head = cols.head[:n]
        store_ts = cols.store_ts[:n]
        if not dispatch_fields:
            none: list[str | None] = [None] * n
            zeros = np.zeros(n, dtype=np.int64)
            batch = DispatchBatch(
                self._topic_names, zeros, head["queue_id"].astype(np.int64), s[:n] + file_from,
                head["total"].astype(np.int64), zeros, store_ts, head["queue_offset"].astype(np.int64),
                head["sysflag"].astype(np.int64), cols.prepared[:n], none, none)
            return Scan(batch, int(cols.end[n - 1]), verdict, int(store_ts[-1]), crc_failed)
        topic_ids = self._read_topics(u8, cols.topic_at[:n], cols.topic_len[:n])
        find = DISPATCH_PROPERTIES.findall
        found = [find(mm[p0 - 1 : p0 + pn]) if pn else []
                 for p0, pn in zip(cols.props_at[:n].tolist(), cols.props_len[:n].tolist(), strict=True)]
        tags_codes, keys, uniq = self._dispatch_properties(found, topic_ids.tolist(), store_ts.tolist())
        batch = DispatchBatch(
            self._topic_names, topic_ids, head["queue_id"].astype(np.int64), s[:n] + file_from,
            head["total"].astype(np.int64), np.array(tags_codes, dtype=np.int64), store_ts,
            head["queue_offset"].astype(np.int64), head["sysflag"].astype(np.int64), cols.prepared[:n], keys, uniq)
        return Scan(batch, int(cols.end[n - 1]), verdict, int(store_ts[-1]), crc_failed)

    def _scan_few(self, mf: MappedFile, starts: list[int], pos: int, verdict: int, check_crc: bool) -> Scan:
        """``scan_records`` for a few records: the same checks and columns, through ``view_record``."""
        mm = mf.mm
        file_from = mf.file_from_offset
        cols: list[tuple[int, int, int, int, int, int, int, int]] = []  # queue id .. prepared offset, topic id
        found: list[DispatchProperties] = []
        find = DISPATCH_PROPERTIES.findall
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
            found.append(find(mm[props_at - 1 : props_at + props_len]) if props_len else [])
            end = p + total
        if verdict == INVALID and len(cols) < len(starts):  # (a BLANK at the end is not a fault)
            log.warning("undecodable record at %d", file_from + starts[len(cols)])
        crc_failed: tuple[int, ...] = ()
        if check_crc and views:
            n, verdict, crc_failed = self._check_crcs(mf, [v.pos for v in views], [v.body_at for v in views],
                                                      [v.body_len for v in views], [v.body_crc for v in views],
                                                      verdict)
            del cols[n:], found[n:]
            if n < len(views):
                end = views[n].pos
        if not cols:
            return Scan(DispatchBatch.empty(self._topic_names), pos, verdict, 0)
        queue_ids, queue_offsets, phys_l, sizes, store_ts_l, sysflags, prepared_l, topic_ids = (
            np.array(c, dtype=np.int64) for c in zip(*cols, strict=True))
        tags_codes, keys, uniq = self._dispatch_properties(found, topic_ids.tolist(), store_ts_l.tolist())
        batch = DispatchBatch(self._topic_names, topic_ids, queue_ids, phys_l, sizes,
                              np.array(tags_codes, dtype=np.int64), store_ts_l, queue_offsets, sysflags,
                              prepared_l, keys, uniq)
        return Scan(batch, end, verdict, int(store_ts_l[-1]), crc_failed)

    @staticmethod
    def _check_crcs(mf: MappedFile, starts: list[int], body_at: list[int], body_len: list[int], crcs: list[int],
                    verdict: int) -> tuple[int, int, tuple[int, ...]]:
        """The body CRC of each record a scan found. A record that fails it and is the last before an
        unreadable one is a torn write (RocketMQ's recovery truncates there): the scan ends before it,
        INVALID. Any other is damage in the middle of the log: the records after it are intact and
        must not be lost, so the scan keeps going and reports it. Returns (records kept, verdict,
        CommitLog offsets of the records that failed)."""
        view = mf.view
        n = len(starts)
        failed: list[int] = []
        for i, (b0, bl, crc) in enumerate(zip(body_at, body_len, crcs, strict=True)):
            if body_crc(view[b0 : b0 + bl]) == crc:
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
                             ) -> tuple[list[int], list[str | None], list[str | None]]:
        """Per record, from what DISPATCH_PROPERTIES found in its properties: the tag hash code (for
        SCHEDULE_TOPIC_XXXX and the timer topic, the deliver time), KEYS and UNIQ_KEY."""
        tags_codes: list[int] = []
        keys_l: list[str | None] = []
        uniq_l: list[str | None] = []
        schedule_id = self._topic_id(SCHEDULE_TOPIC.encode())
        timer_id = self._topic_id(TIMER_TOPIC.encode())
        tag_codes = self._tag_codes
        for i, (tid, pairs) in enumerate(zip(topic_ids, found, strict=True)):
            tags = keys = uniq = special = None
            for name, value in pairs:  # the last of a repeated name wins, as in Java
                if name == b"UNIQ_KEY":
                    uniq = value
                elif name == b"TAGS":
                    tags = value
                elif name == b"KEYS":
                    keys = value
                elif (name == b"DELAY" and tid == schedule_id) or (name == b"TIMER_OUT_MS" and tid == timer_id):
                    special = value
            code = 0
            if tags:
                cached = tag_codes.get(tags)
                code = self.tags_code_of(tags) if cached is None else cached
            if special is not None:
                if tid == schedule_id:
                    code = self._deliver_timestamp(special, store_ts[i], code)
                elif special.lstrip(b"-").isdigit():
                    # The timer service enqueues straight from these entries: the tag is the deliver time.
                    code = int(special)
            tags_codes.append(code)
            keys_l.append(keys.decode("utf-8", "replace") if keys is not None else None)
            uniq_l.append(uniq.decode("utf-8", "replace") if uniq is not None else None)
        return tags_codes, keys_l, uniq_l

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

    def read_dispatch_requests(self, start: int, max_bytes: int) -> tuple[DispatchBatch, int, bool]:
        """Records from ``start`` up to what is written (about ``max_bytes``). Returns them, the offset
        after them and whether an undecodable record stopped the read."""
        parts: list[DispatchBatch] = []
        end_all = self.written[0]
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
                min_off = self.min_offset
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

    # ------------------------------------------------------------------ recovery
    def _scan_file(self, mf: MappedFile, check_crc: bool, since_ts: int | None = None) -> tuple[int, bool, int | None]:
        """Walk the records of one file. Returns (end position of the last valid record, reached BLANK, the
        CommitLog offset of the first record stored at or after ``since_ts``, None if none or not asked).

        With ``since_ts``, bodies are CRC-checked from that first record on only: the records before it were
        flushed (the checkpoint's timestamps say so), so a crash cannot have torn them; the CRC pass is
        most of a scan's cost."""
        pos = 0
        first_since: int | None = None
        crc_now = check_crc and (since_ts is None or since_ts <= 0)  # 0: nothing known flushed
        while True:
            scan = self.scan_records(mf, pos, self.file_size, check_crc=crc_now, dispatch_fields=False)
            if since_ts is not None and first_since is None and len(scan.batch):
                hits = np.flatnonzero(scan.batch.store_timestamps >= since_ts)
                if len(hits):
                    first_since = int(scan.batch.commit_log_offsets[hits[0]])
                    if check_crc and not crc_now:
                        # Scan again from that record, checking bodies from here on.
                        crc_now = True
                        pos = first_since - mf.file_from_offset
                        continue
            if scan.last_store_timestamp:
                self._recovered_store_ts = scan.last_store_timestamp
            for phys in scan.crc_failed:
                self.mark_corrupt(phys, "body CRC mismatch found by recovery")
            pos = scan.end
            if scan.verdict != END:
                return pos, scan.verdict == BLANK, first_since
            if pos >= self.file_size:
                return pos, True, first_since

    def _recover_from(self, index: int, check_crc: bool, since_ts: int | None = None) -> tuple[int, int | None]:
        """Scan from file ``index`` to the end of valid data. Returns (that end, the offset of the first record
        stored at or after ``since_ts``)."""
        files = self.mfq.files
        process_offset = files[index].file_from_offset
        first_since: int | None = None
        while index < len(files):
            mf = files[index]
            pos, at_blank, found = self._scan_file(mf, check_crc, since_ts if first_since is None else None)
            first_since = first_since if found is None else found
            process_offset = mf.file_from_offset + pos
            if at_blank and index + 1 < len(files):
                index += 1
                continue
            break
        return process_offset, first_since

    def recover_normally(self) -> int:
        """After a clean shutdown: verify the last 3 files (RocketMQ's recoverNormally)."""
        files = self.mfq.files
        if not files:
            self._set_recovered(0)
            return 0
        start = max(0, len(files) - 3)
        process_offset, _ = self._recover_from(start, self.config.check_crc_on_recover)
        self._truncate(process_offset)
        return process_offset

    def recover_abnormally(self, min_timestamp: int) -> tuple[int, int]:
        """After a crash: start at the newest file whose first record was stored no later than the
        checkpoint's minimum timestamp; verify every record (CRC) from there and truncate the torn tail.
        Returns (end of valid data, where re-dispatch must start).

        Re-dispatch starts at the first record stored at or after ``min_timestamp``, not at the file's start
        (RocketMQ's file granularity would re-dispatch up to a whole 1 GiB file): the checkpoint's
        timestamps are those of a record that was dispatched (or flushed) with every record before it, and
        that record is stored at or after ``min_timestamp``, so it cannot come before the first such record
        even when the clock stepped back."""
        files = self.mfq.files
        if not files:
            self._set_recovered(0)
            return 0, 0
        index = 0
        for i in range(len(files) - 1, -1, -1):
            first = self.scan_records(files[i], 0, self.file_size, check_crc=self.config.check_crc_on_recover,
                                      max_records=1)
            ts = first.last_store_timestamp
            if len(first.batch) and ts != 0 and ts <= min_timestamp:
                index = i
                break
        process_offset, first_since = self._recover_from(index, self.config.check_crc_on_recover, min_timestamp)
        self._truncate(process_offset)
        # No record at or after the minimum timestamp survived: everything valid is already dispatched.
        rebuild_from = process_offset if first_since is None else min(first_since, process_offset)
        return process_offset, rebuild_from

    def _truncate(self, process_offset: int) -> None:
        self.mfq.truncate_dirty_files(process_offset)
        for f in self.mfq.files:
            f.flushed_position = f.wrote_position
        self._set_recovered(process_offset)
        self.mfq.make_next_ahead()

    def _set_recovered(self, process_offset: int) -> None:
        self.mfq.flushed_where = process_offset
        self.confirm_offset = process_offset
        ts = self._recovered_store_ts if process_offset > 0 else 0
        self.written = (process_offset, ts)
        self.flushed_store_timestamp = ts

    # ------------------------------------------------------------------ retention
    def delete_expired_file(self, expired_ms: int, interval_ms: int, clean_immediately: bool,
                            batch_max: int, clean_below: int | None = None) -> int:
        return self.mfq.delete_expired_file_by_time(expired_ms, interval_ms, clean_immediately, batch_max,
                                                    self.clock, clean_below)

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        self.mfq.destroy()
