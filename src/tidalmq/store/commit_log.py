"""The CommitLog: every message of every topic, appended to fixed-size mapped files.

Writes: ``put`` patches the broker-encoded records (queue offset, physical offset, store timestamp) and
copies them into the mapped file under the put lock, one slice assignment per contiguous run. A record
(or a batch request) never spans files: when it does not fit, the rest of the file is marked with a
BLANK record and the next file begins.

Crash consistency of a run: its bytes are copied *except* the first 8 (TOTALSIZE, MAGICCODE), which are
stored last. Until then the region reads as zeros, which no scan accepts, so a process killed in the
middle of a copy leaves nothing that looks like a record. (Beyond the write position files are always
zero: new files are preallocated, and recovery zeroes what follows the last valid record.)

Two collaborators, each owning its state: ``scan`` (``CommitLogScan``, store/commit_log_scan.py) reads runs
of records back, for reput's dispatch and recovery's checks; ``recovery`` (``CommitLogRecovery``,
store/commit_log_recovery.py) finds where valid data ends at start, and the CommitLog truncates there.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import is_disk_full
from tidalmq.common.msgid import host_bytes, joined_offset_msg_ids
from tidalmq.common.record import (
    CRC32_RESERVED_LEN,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    POS_BORNHOST,
    POS_SYSFLAG,
    RecordError,
    encode_blank,
    has_record_crc,
    patch_for_append,
    record_crc_ok,
    records_crc_sound,
    reserve_record_crc,
    seal_record_crc,
    store_timestamp_pos,
    view_record,
)
from tidalmq.common.record_batch import RecordBatch
from tidalmq.common.record_batch_crc import reserve_crc as reserve_batch_crc
from tidalmq.common.record_batch_crc import seal_crc as seal_batch_crc
from tidalmq.store.commit_log_recovery import CommitLogRecovery
from tidalmq.store.commit_log_scan import CommitLogScan
from tidalmq.store.config import RECORD_OVERHEAD_ALLOWANCE, MessageStoreConfig, parse_delay_levels
from tidalmq.store.mapped_file import MappedFile, MappedFileQueue, pwrite_all
from tidalmq.store.results import AppendResult, DispatchBatch, PutRequest, PutStatus

log = logging.getLogger("tidalmq.store")


_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_SMALLEST_CHECKED = MIN_RECORD_SIZE + CRC32_RESERVED_LEN  # get_messages leaves records this small to get_message

_NOT_TX = (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE)
# A run whose pieces average fewer bytes than this is joined and written as one buffer: what pwritev and
# Python's buffer export cost a piece is more than copying small pieces once more, and a batch's records
# are five pieces each, four of them small. Single sends (a piece a record) of 1 KiB and more stay pwritev,
# which copies large pieces as fast without the extra copy under the interpreter lock (the figures:
# docs/benchmarks.md, "Runs joined before their write").
_JOIN_BELOW = 1024



class CommitLog:
    def __init__(self, config: MessageStoreConfig, clock: Callable[[], int],
                 store_host: tuple[str, int] = ("127.0.0.1", 10911)) -> None:
        self.config = config
        self.clock = clock
        self.file_size = config.mapped_file_size_commit_log
        self.mfq = MappedFileQueue(config.commit_log_path, self.file_size, preallocate=True)
        self.put_lock = threading.Lock()
        self._lock_began = 0.0  # monotonic time the put lock was taken; 0.0 while free
        # (topic, queue_id) -> next queue offset; rebuilt from the ConsumeQueues after recovery.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # (end of written data, store timestamp of its last record), replaced as one object so a flusher
        # reads a consistent pair without the put lock.
        self.written: tuple[int, int] = (0, 0)
        self.flushed_store_timestamp = 0
        self.confirm_offset = 0
        raw = host_bytes(store_host[0])
        self._msg_id_prefix = (raw + _I.pack(store_host[1])).hex().upper()
        self.scan = CommitLogScan(self.mfq, self.file_size, parse_delay_levels(config.message_delay_level),
                                  force_prop_crc=config.force_verify_prop_crc)
        self.recovery = CommitLogRecovery(self.mfq, self.file_size, self.scan, check_crc=config.check_crc_on_recover,
                                          mark_corrupt=self.mark_corrupt)
        self.on_written: Callable[[], None] = lambda: None
        self.on_no_space: Callable[[OSError], None] = lambda e: None
        # checkCRCOnRead: verify every record before it is served (off by default: it costs a CRC pass
        # over every body read, where the read path otherwise copies nothing).
        self.check_on_read = config.check_crc_on_read
        # checkPropCRCOnRead: the record CRC (``__CRC32#``) of a record that carries one, checked on every
        # read: the structure and body checks above do not see a changed byte of a property value.
        self.check_prop_crc = config.check_prop_crc_on_read
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
    def put(self, requests: Sequence[PutRequest], *, wake_reput: bool = True,
            blocking: bool = True) -> list[AppendResult] | None:
        """Append every request; one AppendResult each. Never raises for a bad request. With
        ``blocking=False``, None when another writer holds the put lock (nothing was appended)."""
        results: list[AppendResult] = []
        # The body limit is the broker's to check; a record may add up to 64 KiB of header, topic
        # and properties to a body of the maximum size (RocketMQ 5's messageSizeLimit rule).
        max_size = self.config.max_message_size + RECORD_OVERHEAD_ALLOWANCE
        file_size = self.file_size
        table = self.topic_queue_table
        seal = self.config.enabled_append_prop_crc
        # The trailers are reserved before the lock (only the CRCs need the final offsets); a request
        # whose properties leave no room for one is refused, whatever else it holds.
        too_long = self._reserve_crcs(requests) if seal else ()
        if not self.put_lock.acquire(blocking):
            return None
        with self._holding_put_lock():
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
            for i_req, req in enumerate(requests):
                recs = req.records
                if too_long and i_req in too_long:
                    results.append(AppendResult(PutStatus.MESSAGE_ILLEGAL, store_timestamp=ts, msg_num=len(recs)))
                    continue
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
                    if seal:
                        seal_batch_crc(recs)
                    run.extend(recs.pieces)
                    self.scan.keep_preread(req.topic, req.queue_id, recs, first_phys, total, ts)
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
                        if seal:
                            seal_record_crc(rec, 0, len(rec))
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

    @staticmethod
    def _reserve_crcs(requests: Sequence[PutRequest]) -> frozenset[int]:
        """Give every record of ``requests`` its record CRC trailer (idempotent: a put refused for a busy
        lock is retried with the same records). Returns the indices of the requests whose properties
        leave no room for it."""
        refused: set[int] = set()
        for i, req in enumerate(requests):
            recs = req.records
            try:
                if type(recs) is RecordBatch:
                    reserve_batch_crc(recs)
                else:
                    for rec in recs:
                        if len(rec) >= MIN_RECORD_SIZE and not has_record_crc(rec, 0, len(rec)):
                            reserve_record_crc(rec)
            except (RecordError, IndexError):
                refused.add(i)
        return frozenset(refused)

    @contextlib.contextmanager
    def _holding_put_lock(self) -> Iterator[None]:
        """Releases the put lock at the end; meanwhile ``lock_held_ms`` says for how long it was held."""
        self._lock_began = time.monotonic()
        try:
            yield
        finally:
            self._lock_began = 0.0
            self.put_lock.release()

    def lock_held_ms(self) -> float:
        """For how long the current writer has held the put lock; 0 when nobody holds it (RocketMQ's
        beginTimeInLock, which isOSPageCacheBusy compares with osPageCacheBusyTimeOutMills)."""
        began = self._lock_began
        return (time.monotonic() - began) * 1000 if began else 0.0

    def append_data(self, phys: int, data: bytes | bytearray | memoryview, store_timestamp: int = 0) -> bool:
        """A slave's append of the master's CommitLog bytes (RocketMQ's appendData): ``data`` holds whole
        records (a file's closing BLANK included) and goes at exactly ``phys``, which must be where this
        CommitLog ends (an empty CommitLog starts at any file boundary: the master streams a new slave
        from its last file). ``store_timestamp`` is that of the last record (for the checkpoint).
        Returns False, writing nothing, for any other offset or for data that would cross a file's end
        (the master never sends either). Records become visible as the master's do: their first 8
        bytes last. Raises OSError when the next file cannot be made."""
        n = len(data)
        with self.put_lock:
            empty = self.mfq.last is None
            if n == 0 or (phys % self.file_size != 0 if empty else phys != self.written[0]):
                return False
            mf = self.mfq.get_last_mapped_file(phys)
            pos = phys - mf.file_from_offset
            if pos != mf.wrote_position or pos + n > self.file_size:
                return False
            self._write_run(mf, pos, [memoryview(data)], n)
            self.written = (self.mfq.max_offset(), store_timestamp or self.written[1])
        self.on_written()
        return True

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
        batch.patch_shared(store_timestamp_pos(batch.sysflag) - POS_BORNHOST, _Q.pack(ts))
        return qoff, joined_offset_msg_ids(self._msg_id_prefix, phys)

    @staticmethod
    def _write_run(mf: MappedFile, start: int, run: list[bytes | bytearray | memoryview], n: int) -> None:
        """Write a run of records at ``start`` with pwrite (the copy into the page cache, and the page
        allocation that comes with it, happen outside the GIL; the mapping sees the same pages). A run of
        small pieces (a batch's records are five each: head, shared fields, body, topic, properties) is
        joined first and written in one buffer (see _JOIN_BELOW)."""
        if not run:
            return
        fd = mf.fd
        if len(run) > 1 and n < _JOIN_BELOW * len(run):
            first = memoryview(b"".join(run))
            pwrite_all(fd, [first[8:]], start + 8, n - 8)
        else:
            first = memoryview(run[0]).cast("B")
            run[0] = first[8:]
            pwrite_all(fd, run, start + 8, n - 8)
        pwrite_all(fd, [first[:8]], start, 8)  # last: makes the run visible to scans (see module doc)
        mf.wrote_position = start + n

    # ------------------------------------------------------------------ recovery
    def recover_normally(self) -> int:
        """After a clean shutdown (RocketMQ's recoverNormally); returns the end of valid data."""
        return self._recover(lambda: (self.recovery.recover_normally(), 0))[0]

    def recover_abnormally(self, min_timestamp: int) -> tuple[int, int]:
        """After a crash (``CommitLogRecovery.recover_abnormally``): (end of valid data, where re-dispatch
        must start)."""
        return self._recover(lambda: self.recovery.recover_abnormally(min_timestamp))

    def recover_after_process_crash(self, min_timestamp: int, check: Callable[[DispatchBatch, int], int | None],
                                    indexed_to: int | None = None,
                                    dispatched: tuple[int, int] = (0, 0)) -> tuple[int, int]:
        """After a crash of the process alone (``CommitLogRecovery.recover_after_process_crash``)."""
        return self._recover(lambda: self.recovery.recover_after_process_crash(min_timestamp, check, indexed_to,
                                                                                dispatched))

    def _recover(self, find: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        """``find()`` the end of valid data (and where re-dispatch starts) and truncate there; (0, 0)
        without a file."""
        if not self.mfq.files:
            self._set_recovered(0)
            return 0, 0
        process_offset, rebuild_from = find()
        self._truncate(process_offset)
        return process_offset, rebuild_from

    def truncate_tail(self, offset: int) -> None:
        """Drop everything from ``offset`` (a record boundary) on: a replica's divergent tail."""
        self._truncate(offset)

    def _truncate(self, process_offset: int) -> None:
        self.mfq.truncate_dirty_files(process_offset)
        for f in self.mfq.files:
            f.flushed_position = f.wrote_position
        self._set_recovered(process_offset)
        self.mfq.make_next_ahead()

    def _set_recovered(self, process_offset: int) -> None:
        self.mfq.flushed_where = process_offset
        self.confirm_offset = process_offset
        ts = self.recovery.store_timestamp if process_offset > 0 else 0
        self.written = (process_offset, ts)
        self.flushed_store_timestamp = ts

    def mark_corrupt(self, phys: int, reason: str) -> None:
        """Never serve the record at ``phys`` again (until restart; recovery and checked reads find it
        again). Logged once per record; counted in ``corrupt_records``."""
        with self._corrupt_lock:
            if phys in self.corrupt:
                return
            self.corrupt = self.corrupt | {phys}  # replaced, not mutated: readers take no lock
            self.corrupt_records += 1
        log.error("corrupt record at CommitLog offset %d, not served: %s", phys, reason)

    # ------------------------------------------------------------------ flush
    def flush(self, least_pages: int = 0) -> bool:
        """Flush written data; afterwards ``flushed_where`` covers everything written before the call."""
        end, ts = self.written
        flushed = self.mfq.flush(least_pages)
        if self.mfq.flushed_where >= end and ts:
            self.flushed_store_timestamp = ts
        return flushed

    # ------------------------------------------------------------------ read
    def read_dispatch_requests(self, start: int, max_bytes: int) -> tuple[DispatchBatch, int, bool]:
        """What reput dispatches: the records from ``start`` up to what is written (about ``max_bytes``),
        the offset after them and whether an undecodable record stopped the read."""
        return self.scan.read_dispatch_requests(start, max_bytes, self.written[0])

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
        # A view of one record (a span of several, as the timer service reads, is left to its reader).
        if self.check_prop_crc and _I.unpack_from(view)[0] == size and record_crc_ok(view, 0, size) is False:
            self.mark_corrupt(phys, "record CRC mismatch found by a read")
            return None
        return view

    @property
    def reads_in_batches(self) -> bool:
        """Whether ``get_messages`` may serve a pull's records at once: nothing found corrupt, and no
        checkCRCOnRead (whose checks, and the marking of what fails them, stay one record at a time)."""
        return not self.corrupt and not self.check_on_read

    def get_messages(self, phys: np.ndarray, sizes: np.ndarray) -> list[memoryview] | None:
        """Views of the records at ``phys`` (``sizes`` from their ConsumeQueue entries), checked as
        ``get_message`` checks each; None unless every one is a whole written record of one file whose
        TOTALSIZE is its entry's size and whose record CRC holds: the caller then reads them one by one,
        which skips (and marks) whatever fails."""
        if not len(phys):
            return []
        mf = self.mfq.find_mapped_file_by_offset(int(phys[0]))
        if mf is None:
            return None
        pos = phys - mf.file_from_offset
        ends = pos + sizes
        pos_l, ends_l = pos.tolist(), ends.tolist()
        if min(pos_l) < 0 or max(ends_l) > mf.wrote_position or min(sizes.tolist()) <= _SMALLEST_CHECKED:
            return None
        view = mf.view
        if (np.ndarray((len(view) - 3,), ">i4", buffer=view, strides=(1,))[pos] != sizes).any():  # TOTALSIZE
            return None
        if self.check_prop_crc and not records_crc_sound(view, pos, ends):
            return None
        return [view[a:b] for a, b in zip(pos_l, ends_l, strict=True)]

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

    def get_data(self, offset: int, max_size: int) -> memoryview | None:
        """Up to ``max_size`` written bytes from ``offset``, never past the end of its file (RocketMQ's
        getData, what the master streams to slaves); None when nothing is written there yet."""
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = min(mf.wrote_position, self.written[0] - mf.file_from_offset, pos + max_size)
        if end <= pos:
            return None
        return mf.view[pos:end]

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

    # ------------------------------------------------------------------ retention
    def delete_expired_file(self, expired_ms: int, interval_ms: int, clean_immediately: bool,
                            batch_max: int, clean_below: int | None = None) -> int:
        return self.mfq.delete_expired_file_by_time(expired_ms, interval_ms, clean_immediately, batch_max,
                                                    self.clock, clean_below)

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        self.mfq.destroy()
