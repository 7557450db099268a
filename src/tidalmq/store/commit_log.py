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

import logging
import struct
import threading
import zlib
from collections.abc import Callable, Sequence

from tidalmq.common import sysflag as sf
from tidalmq.common.message import decode_properties
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_SYSFLAG,
    encode_blank,
    patch_for_append,
    store_timestamp_pos,
)
from tidalmq.common.taghash import tags_hash_code
from tidalmq.store.config import MessageStoreConfig, parse_delay_levels
from tidalmq.store.mapped_file import MappedFile, MappedFileQueue
from tidalmq.store.results import AppendResult, DispatchRequest, PutRequest, PutStatus

log = logging.getLogger("tidalmq.store")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"

_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">H")
_IQ = struct.Struct(">iq")
_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
_MIN_RECORD = 48 + 8 + 8 + 8 + 12 + 4 + 1 + 2

_NOT_TX = (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE)

# check_record verdicts besides a DispatchRequest
BLANK = 0
INVALID = -1


RECORD_OVERHEAD_ALLOWANCE = 64 * 1024


class CommitLog:
    def __init__(self, config: MessageStoreConfig, clock: Callable[[], int],
                 store_host: tuple[str, int] = ("127.0.0.1", 10911)) -> None:
        self.config = config
        self.clock = clock
        self.file_size = config.mapped_file_size_commit_log
        self.mfq = MappedFileQueue(config.commit_log_path, self.file_size)
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
        self._tag_codes: dict[str, int] = {}
        self.on_written: Callable[[], None] = lambda: None
        self._recovered_store_ts = 0

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
    def put(self, requests: Sequence[PutRequest]) -> list[AppendResult]:
        """Append every request; one AppendResult each. Never raises for a bad request."""
        results: list[AppendResult] = []
        # The body limit is the broker's to check; a record may add up to 64 KiB of header, topic
        # and properties to a body of the maximum size (RocketMQ 5's messageSizeLimit rule).
        max_size = self.config.max_message_size + RECORD_OVERHEAD_ALLOWANCE
        file_size = self.file_size
        table = self.topic_queue_table
        with self.put_lock:
            ts = self.clock()
            try:
                mf: MappedFile | None = self.mfq.get_last_mapped_file(0)
            except OSError:
                log.exception("create mapped file failed")
                return [AppendResult(PutStatus.CREATE_MAPPED_FILE_FAILED) for _ in requests]
            wpos = mf.wrote_position
            run: list[bytearray] = []
            run_start = wpos
            for req in requests:
                recs = req.records
                if mf is None:  # creating the next file failed earlier in this call
                    results.append(AppendResult(PutStatus.CREATE_MAPPED_FILE_FAILED, msg_num=len(recs)))
                    continue
                status = self._validate(recs, max_size)
                if status is not None:
                    results.append(AppendResult(status, store_timestamp=ts, msg_num=len(recs)))
                    continue
                total = 0
                for rec in recs:
                    total += len(rec)
                if total + END_FILE_MIN_BLANK_LENGTH > file_size:
                    results.append(AppendResult(PutStatus.MESSAGE_ILLEGAL, store_timestamp=ts, msg_num=len(recs)))
                    continue
                if total + END_FILE_MIN_BLANK_LENGTH > file_size - wpos:
                    # End of file: publish what we have, mark the rest BLANK, continue in a new file.
                    self._write_run(mf, run_start, run)
                    run = []
                    mf.mm[wpos : wpos + 8] = encode_blank(file_size - wpos)
                    mf.wrote_position = file_size
                    try:
                        mf = self.mfq.get_last_mapped_file(0)
                    except OSError:
                        log.exception("create mapped file failed")
                        results.append(AppendResult(PutStatus.CREATE_MAPPED_FILE_FAILED, msg_num=len(recs)))
                        mf = None
                        continue
                    wpos = run_start = 0
                key = (req.topic, req.queue_id)
                qoff = table.get(key, 0)
                first_qoff = qoff
                phys = mf.file_from_offset + wpos
                first_phys = phys
                ids = []
                for rec in recs:
                    if (_I.unpack_from(rec, POS_SYSFLAG)[0] & sf.TRANSACTION_TYPE_MASK) in _NOT_TX:
                        patch_for_append(rec, 0, qoff, phys, ts)
                        qoff += 1
                    else:
                        # Prepared / rolled-back half messages take no queue offset (RocketMQ stores 0).
                        patch_for_append(rec, 0, 0, phys, ts)
                    if len(recs) > 1:
                        ids.append(self.msg_id(phys))
                    phys += len(rec)
                table[key] = qoff
                run.extend(recs)
                wpos += total
                results.append(AppendResult(
                    PutStatus.PUT_OK, first_phys, total,
                    ",".join(ids) if ids else self.msg_id(first_phys), first_qoff, ts, len(recs)))
            if mf is not None:
                self._write_run(mf, run_start, run)
            self.written = (self.mfq.max_offset(), ts)
        self.on_written()
        return results

    @staticmethod
    def _validate(recs: list[bytearray], max_size: int) -> PutStatus | None:
        if not recs:
            return PutStatus.MESSAGE_ILLEGAL
        for rec in recs:
            n = len(rec)
            if n < _MIN_RECORD or n > max_size:
                return PutStatus.MESSAGE_ILLEGAL
            total, magic = _II.unpack_from(rec, 0)
            if total != n or magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
                return PutStatus.MESSAGE_ILLEGAL
        return None

    @staticmethod
    def _write_run(mf: MappedFile, start: int, run: list[bytearray]) -> None:
        if not run:
            return
        data = run[0] if len(run) == 1 else b"".join(run)
        n = len(data)
        mm = mf.mm
        view = memoryview(data)
        mm[start + 8 : start + n] = view[8:]
        mm[start : start + 8] = view[:8]  # last: makes the run visible to scans (see module doc)
        view.release()
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
        return mf.view[pos : pos + size]

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
    def tags_code_of(self, tags: str) -> int:
        code = self._tag_codes.get(tags)
        if code is None:
            if len(self._tag_codes) > 65536:
                self._tag_codes.clear()
            code = self._tag_codes[tags] = tags_hash_code(tags)
        return code

    def check_record(self, buf: memoryview, pos: int, limit: int, check_crc: bool,
                     file_from: int) -> DispatchRequest | int:
        """RocketMQ's checkMessageAndReturnSize: a DispatchRequest, BLANK (end of file) or INVALID."""
        if pos + 8 > limit:
            return INVALID
        total, magic = _II.unpack_from(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            return BLANK
        if (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2) or total < _MIN_RECORD \
                or pos + total > limit:
            return INVALID
        end = pos + total
        try:
            _, _, crc, queue_id, _flag, queue_offset, phys, sysflag, _born = _HEAD.unpack_from(buf, pos)
            p = pos + (68 if sysflag & sf.BORNHOST_V6_FLAG else 56)
            store_ts = _Q.unpack_from(buf, p)[0]
            p += 28 if sysflag & sf.STOREHOSTADDRESS_V6_FLAG else 16
            _reconsume, prepared = _IQ.unpack_from(buf, p)
            body_len = _I.unpack_from(buf, p + 12)[0]
            p += 16
            if body_len < 0 or p + body_len > end:
                return INVALID
            if check_crc and body_len > 0 and (zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF) != crc:
                log.warning("CRC check failed at %d", file_from + pos)
                return INVALID
            p += body_len
            if magic == MESSAGE_MAGIC_CODE_V2:
                tlen = _H.unpack_from(buf, p)[0]
                p += 2
            else:
                tlen = buf[p]
                p += 1
            topic = str(buf[p : p + tlen], "utf-8")
            p += tlen
            plen = _H.unpack_from(buf, p)[0]
            p += 2
            props = decode_properties(str(buf[p : p + plen], "utf-8")) if plen else {}
            p += plen
        except (struct.error, UnicodeDecodeError, IndexError, ValueError):
            return INVALID
        if p != end:
            return INVALID
        # A record's own PHYSICALOFFSET must be where it lies: catches stale bytes that merely parse.
        if phys != file_from + pos:
            return INVALID
        tags_code = 0
        keys = uniq = None
        if props:
            tags = props.get("TAGS")
            if tags:
                tags_code = self.tags_code_of(tags)
            keys = props.get("KEYS")
            uniq = props.get("UNIQ_KEY")
            if topic == SCHEDULE_TOPIC:
                level_text = props.get("DELAY")
                if level_text is not None:
                    tags_code = self._deliver_timestamp(level_text, store_ts, tags_code)
            elif topic == TIMER_TOPIC:
                # The timer service enqueues straight from these entries: the tag is the deliver time.
                out_ms = props.get("TIMER_OUT_MS")
                if out_ms is not None and out_ms.lstrip("-").isdigit():
                    tags_code = int(out_ms)
        return DispatchRequest(topic, queue_id, phys, total, tags_code, store_ts, queue_offset, keys, uniq,
                               sysflag, prepared)

    def _deliver_timestamp(self, level_text: str, store_ts: int, default: int) -> int:
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

    def read_dispatch_requests(self, start: int, max_bytes: int) -> tuple[list[DispatchRequest], int, bool]:
        """Records from ``start`` up to what is written (about ``max_bytes``). Returns the requests, the
        offset after them and whether an undecodable record stopped the read."""
        out: list[DispatchRequest] = []
        end_all = self.written[0]
        offset = start
        budget_end = start + max_bytes
        check = self.check_record
        while offset < end_all and offset < budget_end:
            mf = self.mfq.find_mapped_file_by_offset(offset)
            if mf is None:
                min_off = self.min_offset
                if 0 <= offset < min_off:
                    offset = min_off  # files were deleted under us: skip ahead
                    continue
                return out, offset, True
            base = mf.file_from_offset
            pos = offset - base
            wrote = mf.wrote_position
            view = mf.view
            while pos < wrote and base + pos < budget_end:
                r = check(view, pos, wrote, False, base)
                if r.__class__ is int:
                    if r == BLANK:
                        pos = self.file_size
                        break
                    log.error("reput: undecodable record at %d, stopping dispatch", base + pos)
                    return out, base + pos, True
                out.append(r)
                pos += r.msg_size
            offset = base + pos
            if pos < self.file_size and pos >= wrote:
                break  # caught up with the writer in this file
        return out, offset, False

    # ------------------------------------------------------------------ recovery
    def _scan_file(self, mf: MappedFile, check_crc: bool) -> tuple[int, bool]:
        """Walk the records of one file. Returns (end position of the last valid record, reached BLANK)."""
        pos = 0
        view = mf.view
        size = self.file_size
        base = mf.file_from_offset
        while pos < size:
            r = self.check_record(view, pos, size, check_crc, base)
            if r.__class__ is int:
                return pos, r == BLANK
            pos += r.msg_size
            self._recovered_store_ts = r.store_timestamp
        return pos, True

    def _recover_from(self, index: int, check_crc: bool) -> int:
        files = self.mfq.files
        process_offset = files[index].file_from_offset
        while index < len(files):
            mf = files[index]
            pos, at_blank = self._scan_file(mf, check_crc)
            process_offset = mf.file_from_offset + pos
            if at_blank and index + 1 < len(files):
                index += 1
                continue
            break
        return process_offset

    def recover_normally(self) -> int:
        """After a clean shutdown: verify the last 3 files (RocketMQ's recoverNormally)."""
        files = self.mfq.files
        if not files:
            self._set_recovered(0)
            return 0
        start = max(0, len(files) - 3)
        process_offset = self._recover_from(start, self.config.check_crc_on_recover)
        self._truncate(process_offset)
        return process_offset

    def recover_abnormally(self, min_timestamp: int) -> tuple[int, int]:
        """After a crash: start at the newest file whose first record was stored no later than the
        checkpoint's minimum timestamp; verify every record (CRC) from there and truncate the torn tail.
        Returns (end of valid data, start of the scanned file): everything from the latter on must be
        re-dispatched, because the ConsumeQueues and the index are not known durable past it."""
        files = self.mfq.files
        if not files:
            self._set_recovered(0)
            return 0, 0
        index = 0
        for i in range(len(files) - 1, -1, -1):
            r = self.check_record(files[i].view, 0, self.file_size, self.config.check_crc_on_recover,
                                  files[i].file_from_offset)
            if r.__class__ is not int and r.store_timestamp != 0 and r.store_timestamp <= min_timestamp:
                index = i
                break
        rebuild_from = files[index].file_from_offset
        process_offset = self._recover_from(index, self.config.check_crc_on_recover)
        self._truncate(process_offset)
        return process_offset, rebuild_from

    def _truncate(self, process_offset: int) -> None:
        self.mfq.truncate_dirty_files(process_offset)
        for f in self.mfq.files:
            f.flushed_position = f.wrote_position
        self._set_recovered(process_offset)

    def _set_recovered(self, process_offset: int) -> None:
        self.mfq.flushed_where = process_offset
        self.confirm_offset = process_offset
        ts = self._recovered_store_ts if process_offset > 0 else 0
        self.written = (process_offset, ts)
        self.flushed_store_timestamp = ts

    # ------------------------------------------------------------------ retention
    def delete_expired_file(self, expired_ms: int, interval_ms: int, clean_immediately: bool,
                            batch_max: int) -> int:
        return self.mfq.delete_expired_file_by_time(expired_ms, interval_ms, clean_immediately, batch_max,
                                                    self.clock)

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        self.mfq.destroy()
