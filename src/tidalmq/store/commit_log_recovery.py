"""Recovery of the CommitLog at start: RocketMQ's recoverNormally (after a clean shutdown) and
recoverAbnormally (after a crash), which find where valid data ends.

``CommitLogRecovery`` is a collaborator of ``CommitLog`` (store/commit_log.py), which truncates what follows
the end it finds; the scans it runs are ``CommitLogScan.scan_records`` (store/commit_log_scan.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from tidalmq.store.commit_log_scan import BLANK, END, INVALID, CommitLogScan
from tidalmq.store.mapped_file import MappedFile, MappedFileQueue
from tidalmq.store.results import DispatchBatch

log = logging.getLogger("tidalmq.store")


class CommitLogRecovery:
    """Where the valid data of a CommitLog's files (``mfq``, which has files) ends. Bodies are CRC-checked
    with ``check_crc`` (checkCRCOnRecover); a record whose body fails in the middle of the log is handed to
    ``mark_corrupt`` (never served). ``store_timestamp``: that of the last valid record the walk met."""

    def __init__(self, mfq: MappedFileQueue, file_size: int, scan: CommitLogScan, *, check_crc: bool,
                 mark_corrupt: Callable[[int, str], None]) -> None:
        self.mfq = mfq
        self.file_size = file_size
        self.scan_records = scan.scan_records
        self.check_crc = check_crc
        self.mark_corrupt = mark_corrupt
        self.store_timestamp = 0

    def _scan_file(self, mf: MappedFile, check_crc: bool, since_ts: int | None = None,
                   pos: int = 0) -> tuple[int, bool, int | None]:
        """Walk the records of one file from ``pos``. Returns (end position of the last valid record, reached BLANK, the
        CommitLog offset of the first record stored at or after ``since_ts``, None if none or not asked).

        With ``since_ts``, bodies are CRC-checked from that first record on only: the records before it were
        flushed (the checkpoint's timestamps say so), so a crash cannot have torn them; the CRC pass is
        most of a scan's cost."""
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
                self.store_timestamp = scan.last_store_timestamp
            for phys in scan.crc_failed:
                self.mark_corrupt(phys, "body CRC mismatch found by recovery")
            pos = scan.end
            if scan.verdict != END:
                return pos, scan.verdict == BLANK, first_since
            if pos >= self.file_size:
                return pos, True, first_since

    def _recover_from(self, index: int, check_crc: bool, since_ts: int | None = None,
                      pos: int = 0) -> tuple[int, int | None]:
        """Scan from file ``index`` (position ``pos`` in it) to the end of valid data. Returns (that end, the
        offset of the first record stored at or after ``since_ts``)."""
        files = self.mfq.files
        process_offset = files[index].file_from_offset + pos
        first_since: int | None = None
        while index < len(files):
            mf = files[index]
            pos, at_blank, found = self._scan_file(mf, check_crc, since_ts if first_since is None else None, pos)
            first_since = first_since if found is None else found
            process_offset = mf.file_from_offset + pos
            if at_blank and index + 1 < len(files):
                index += 1
                pos = 0
                continue
            break
        return process_offset, first_since

    def recover_normally(self) -> int:
        """After a clean shutdown: verify the last 3 files (RocketMQ's recoverNormally)."""
        process_offset, _ = self._recover_from(max(0, len(self.mfq.files) - 3), self.check_crc)
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
        index = self._checkpoint_file(min_timestamp)
        process_offset, first_since = self._recover_from(index, self.check_crc, min_timestamp)
        # No record at or after the minimum timestamp survived: everything valid is already dispatched.
        rebuild_from = process_offset if first_since is None else min(first_since, process_offset)
        return process_offset, rebuild_from

    def _checkpoint_file(self, min_timestamp: int) -> int:
        """The newest file whose first record was stored no later than ``min_timestamp`` (0: the first)."""
        files = self.mfq.files
        for i in range(len(files) - 1, -1, -1):
            first = self.scan_records(files[i], 0, self.file_size, check_crc=self.check_crc,
                                      max_records=1)
            ts = first.last_store_timestamp
            if len(first.batch) and ts != 0 and ts <= min_timestamp:
                return i
        return 0

    def _dispatched_start(self, offset: int) -> int | None:
        """``offset`` (the checkpoint's dispatchedPhyOffset) if it is where a walk can start: a record that
        checks out (its own PHYSICALOFFSET says it starts there), a file's BLANK end, or nothing written
        yet. None otherwise (unknown, outside the files, or a record torn right there): walk from the
        checkpoint's file instead."""
        if offset <= 0:
            return None
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + 8 <= self.file_size and not any(mf.view[pos:pos + 8]):
            return offset
        first = self.scan_records(mf, pos, self.file_size, max_records=1, dispatch_fields=False)
        return offset if len(first.batch) or first.verdict == BLANK else None

    def recover_after_process_crash(self, min_timestamp: int, check: Callable[[DispatchBatch, int], int | None],
                                    indexed_to: int | None = None,
                                    dispatched: tuple[int, int] = (0, 0)) -> tuple[int, int]:
        """``recover_abnormally`` when only the process died (same boot: the page cache kept every write it
        made). From the checkpoint's file, records are walked while they are in their ConsumeQueues
        (``check``, as in ``first_unqueued``; bodies CRC-checked as in any recovery): reput wrote those
        entries, so they need no re-dispatch. From the first record that is not, every record is verified as
        after a power loss, and the torn tail truncated. Returns (end of valid data, where re-dispatch must
        start). ``indexed_to``: the newest indexed record, if there is an index (a round writes its queue
        entries before its index entries, so re-dispatch starts there if it comes first, and at the latest
        where the checkpoint says; indexing a record twice is harmless).

        ``dispatched``: (offset, store time) where the reput's last finished round ended, from the
        checkpoint. Every record before it was written and read back by the reput in this boot, so the walk
        starts there instead: what it costs no longer grows with what was stored since the checkpoint's
        timestamps (up to flushConsumeQueueThoroughInterval of writes, gigabytes at full speed)."""
        files = self.mfq.files
        start = self._dispatched_start(dispatched[0])
        since_ts = 0
        if start is None:
            start = files[self._checkpoint_file(min_timestamp)].file_from_offset
            since_ts = min_timestamp
            log.info("recovery after a process crash: walking from %d, the checkpoint's file", start)
        else:
            self.store_timestamp = dispatched[1]
            log.info("recovery after a process crash: walking from %d, where the last reput round ended", start)
        frontier, since_at = self.first_unqueued(start, files[-1].file_from_offset + self.file_size, check,
                                                 since_ts, self.check_crc)
        if indexed_to is not None:
            frontier = min(frontier, max(indexed_to, since_at))
        mf = self.mfq.find_mapped_file_by_offset(frontier)
        if mf is None:  # the walk ended exactly at the end of the last file
            mf = files[-1]
            frontier = mf.file_from_offset + self.file_size
        process_offset, _ = self._recover_from(files.index(mf), self.check_crc,
                                               pos=frontier - mf.file_from_offset)
        return process_offset, min(frontier, process_offset)

    def first_unqueued(self, start: int, end: int, check: Callable[[DispatchBatch, int], int | None],
                       since_ts: int = 0, check_crc: bool = False) -> tuple[int, int]:
        """Walk the records in [start, end) a run at a time, reading only what locates them in their queue
        (topic, queue id, queue offset, sysflag; no properties): ``check(run, i)`` returns the offset of the
        first record of the run from row ``i`` on that is not in its ConsumeQueue, or None. Records before
        the first one stored at or after ``since_ts`` are not checked (the checkpoint vouches for them).
        Returns (that offset, or ``end`` when every record is queued, or where the walk had to stop, so
        nothing is skipped; the offset of the first record checked). With ``check_crc`` a damaged body from
        that record on is marked corrupt (never served), as recovery does."""
        offset = start
        since_at = start if since_ts <= 0 else -1
        while offset < end:
            mf = self.mfq.find_mapped_file_by_offset(offset)
            if mf is None:
                return offset, offset if since_at < 0 else since_at
            base = mf.file_from_offset
            # Topics are read and bodies CRC-checked from the first record at or after since_ts on (before it
            # only the structure, as in _scan_file).
            checked = since_at >= 0
            scan = self.scan_records(mf, offset - base, min(mf.wrote_position, end - base), dispatch_fields=False,
                                     topics=checked, check_crc=check_crc and checked)
            for phys in scan.crc_failed:
                self.mark_corrupt(phys, "body CRC mismatch found by recovery")
            if len(scan.batch):
                stamps = scan.batch.store_timestamps
                first = 0
                if since_at < 0:
                    later = np.flatnonzero(stamps >= since_ts)
                    first = int(later[0]) if len(later) else len(stamps)
                    if len(later):
                        since_at = offset = int(scan.batch.commit_log_offsets[first])
                        continue  # walk again from there, reading topics and checking bodies
                hit = check(scan.batch, first) if first < len(stamps) else None
                if hit is not None:
                    before = stamps[scan.batch.commit_log_offsets < hit]
                    if len(before):
                        self.store_timestamp = int(before[-1])
                    return hit, since_at
                self.store_timestamp = int(stamps[-1])
            if scan.verdict == BLANK:
                offset = base + self.file_size
            elif scan.verdict == INVALID or base + scan.end <= offset:
                offset = base + scan.end
                break
            else:
                offset = base + scan.end
        end = min(offset, end)
        return end, end if since_at < 0 else since_at
