"""MappedFile and MappedFileQueue: fixed-size, preallocated, memory-mapped files named by start offset.

A MappedFileQueue is a directory of files ``<20-digit start offset>``, each ``mapped_file_size`` bytes,
holding one logical byte stream (the CommitLog, or one ConsumeQueue). Only the last file is written.

Lifetime of mappings: readers receive ``memoryview`` slices of a file's mmap (zero copy). When a file is
deleted while such slices are alive, ``mmap.close()`` refuses (BufferError); the file is unlinked anyway
and the mapping is left to the garbage collector, which unmaps it once the last slice is gone. That is
our stand-in for RocketMQ's reference counting, and it never leaves a dangling pointer.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, overload

from tidalmq.common.fileutil import reserve_file_space

if TYPE_CHECKING:
    import numpy.typing as npt

log = logging.getLogger("tidalmq.store")

OS_PAGE_SIZE = 4096
_ZERO_CHUNK = bytes(1024 * 1024)


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


# Buffers per pwritev call (Linux's IOV_MAX).
_IOV_MAX = 1024


def pwrite_all(fd: int, buffers: list[bytes | bytearray | memoryview], offset: int, nbytes: int) -> None:
    """Write ``buffers`` (``nbytes`` in all) back to back at ``offset``: pwritev, IOV_MAX buffers a call,
    looping over short writes (which regular files only do on errors such as a full disk).

    The calls are made one after the other without counting each call's bytes (a len a buffer, a cost a
    record); when what they wrote adds up to ``nbytes`` none was short. Else the run is written again from
    the start, call by call, resuming short writes: the same bytes at the same offsets, and any a short call
    displaced lie inside the run, which the second pass writes whole."""
    if len(buffers) > _IOV_MAX:
        at = offset
        for i in range(0, len(buffers), _IOV_MAX):
            n = os.pwritev(fd, buffers[i : i + _IOV_MAX], at)
            if n <= 0:
                break
            at += n
        if at - offset == nbytes:
            return
    _pwrite_checked(fd, buffers, offset, nbytes)


def _pwrite_checked(fd: int, buffers: list[bytes | bytearray | memoryview], offset: int, nbytes: int) -> None:
    i = 0
    while i < len(buffers):
        chunk = buffers[i : i + _IOV_MAX]
        want = nbytes if len(chunk) == len(buffers) else sum(map(len, chunk))
        n = os.pwritev(fd, chunk, offset)
        if n == want:
            offset += n
            nbytes -= n
            i += len(chunk)
            continue
        if n <= 0:
            raise OSError(f"pwritev wrote {n} bytes")
        # A short write: resume within the buffer it stopped in.
        offset += n
        nbytes -= n
        rest = [memoryview(b).cast("B") for b in chunk]
        while n >= len(rest[0]):
            n -= len(rest[0])
            rest.pop(0)
        rest[0] = rest[0][n:]
        buffers = rest + buffers[i + len(chunk) :]
        i = 0


def fsync_dir(path: str) -> None:
    """Make a created/removed directory entry durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class MappedFile:
    """One fixed-size file mapped read-write.

    ``wrote_position`` is how many bytes of the file hold data (set by the owner, under its lock);
    ``flushed_position`` how many are known durable.
    """

    __slots__ = ("path", "file_size", "file_from_offset", "fd", "mm", "view", "wrote_position",
                 "flushed_position", "_np", "first_create_in_queue")

    def __init__(self, path: str, file_size: int, *, create: bool) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(path))
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self.fd = os.open(path, flags, 0o644)
        actual = file_size
        try:
            actual = os.fstat(self.fd).st_size
            if actual > file_size:
                raise ValueError(f"{path}: size {actual} != configured mapped file size {file_size}")
            # New file, one whose creation a crash interrupted, or one left sparse: reserve its blocks, so
            # a full disk fails here (DiskFullError) and never as SIGBUS on a later store into the mmap.
            reserve_file_space(self.fd, file_size)
            if create and actual < file_size:
                os.fsync(self.fd)
            self.mm = mmap.mmap(self.fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            if create and actual < file_size:
                # Do not leave a half-reserved file behind: it would hold space and read as a short file.
                _unlink_quietly(path)
            raise
        self.view = memoryview(self.mm)
        self.wrote_position = 0
        self.flushed_position = 0
        self._np: npt.NDArray[Any] | None = None
        self.first_create_in_queue = False

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path)

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def numpy(self, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """A cached numpy view of the whole file (ConsumeQueue reads); dropped before unmapping."""
        arr = self._np
        if arr is None or arr.dtype != dtype:
            import numpy as np

            arr = np.frombuffer(self.mm, dtype=dtype)
            self._np = arr
        return arr

    def slice(self, pos: int, size: int) -> memoryview:
        return self.view[pos : pos + size]

    def flush(self) -> int:
        """fdatasync the file (on Linux this also writes back pages dirtied through the shared mapping;
        unlike mmap.flush it releases the GIL). Returns the new flushed position."""
        wrote = self.wrote_position
        if wrote > self.flushed_position:
            os.fdatasync(self.fd)
            self.flushed_position = wrote
        return self.flushed_position

    def last_modified(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return 0.0

    def touch(self) -> None:
        # Stores through mmap do not reliably update mtime; retention goes by mtime, so set it on flush.
        try:
            os.utime(self.path)
        except OSError:
            pass

    def zero_from(self, pos: int) -> None:
        """Zero bytes [pos, file_size) that hold data, so stale bytes past a truncation point can never
        be mistaken for records. Never-written (sparse) ranges are skipped via SEEK_DATA/SEEK_HOLE, and
        chunks already zero are not rewritten (that would only dirty the page cache)."""
        mm = self.mm
        for a, b in self._data_ranges(pos, self.file_size):
            p = a
            while p < b:
                n = min(len(_ZERO_CHUNK), b - p)
                if _has_nonzero(mm, p, n):
                    mm[p : p + n] = _ZERO_CHUNK[:n]
                p += n

    def _data_ranges(self, pos: int, end: int) -> list[tuple[int, int]]:
        seek_data = getattr(os, "SEEK_DATA", None)
        seek_hole = getattr(os, "SEEK_HOLE", None)
        if seek_data is None or seek_hole is None:
            return [(pos, end)]
        ranges: list[tuple[int, int]] = []
        cur = pos
        try:
            while cur < end:
                data = os.lseek(self.fd, cur, seek_data)
                if data >= end:
                    break
                hole = min(os.lseek(self.fd, data, seek_hole), end)
                ranges.append((data, hole))
                cur = hole
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data after ``cur``
                return ranges
            return [(pos, end)]
        return ranges

    def close(self) -> None:
        self._np = None
        try:
            self.view.release()
        except Exception:  # pragma: no cover - already released
            pass
        try:
            self.mm.close()
        except BufferError:
            pass  # slices handed to readers keep it mapped; the GC unmaps it after them
        try:
            os.close(self.fd)
        except OSError:
            pass

    def destroy(self) -> bool:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError:
            log.exception("delete %s failed", self.path)
            return False
        return True

    def __repr__(self) -> str:
        return f"MappedFile({self.path}, wrote={self.wrote_position}, flushed={self.flushed_position})"


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _has_nonzero(mm: mmap.mmap, p: int, n: int) -> bool:
    import numpy as np

    return bool(np.frombuffer(mm, dtype=np.uint8, count=n, offset=p).any())


class MappedFileQueue:
    """The files of one logical stream, oldest first. ``files`` is replaced, never mutated, so readers
    can take a snapshot without a lock (copy-on-write)."""

    def __init__(self, store_path: str, mapped_file_size: int, *, preallocate: bool = False) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.files: tuple[MappedFile, ...] = ()
        self.flushed_where = 0
        self._lock = threading.Lock()  # serialises changes to ``files``
        # RocketMQ's AllocateMappedFileService: the file after the one being written is created (fallocate,
        # fsync, mmap) by a background thread, so a put that rolls over finds it ready instead of
        # reserving a whole file under the put lock. ``None`` when the queue creates files inline.
        self._allocator = _NextFileAllocator(self) if preallocate else None

    # ------------------------------------------------------------------ load
    def load(self) -> bool:
        """Map every file in the directory. All are first marked full; recovery sets the real write
        position of the last ones."""
        try:
            names = sorted(n for n in os.listdir(self.store_path) if n.isdigit() and len(n) == 20)
        except FileNotFoundError:
            return True
        files: list[MappedFile] = []
        for i, name in enumerate(names):
            path = os.path.join(self.store_path, name)
            size = os.path.getsize(path)
            if size != self.mapped_file_size and i != len(names) - 1:
                log.error("%s length %d does not match configured size %d", path, size, self.mapped_file_size)
                for f in files:
                    f.close()
                return False
            try:
                f = MappedFile(path, self.mapped_file_size, create=False)
            except (OSError, ValueError):
                log.exception("cannot map %s", path)
                for g in files:
                    g.close()
                return False
            f.wrote_position = f.flushed_position = self.mapped_file_size
            files.append(f)
        self.files = tuple(files)
        return True

    # ------------------------------------------------------------------ lookups
    @property
    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    @property
    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else -1

    def max_offset(self) -> int:
        """End of the data (where the next byte goes)."""
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    def find_mapped_file_by_offset(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        idx = (offset - files[0].file_from_offset) // self.mapped_file_size
        if 0 <= idx < len(files):
            f = files[idx]
            if f.file_from_offset <= offset < f.file_from_offset + self.mapped_file_size:
                return f
        # Holes in the sequence (should not happen): fall back to a scan.
        for f in files:
            if f.file_from_offset <= offset < f.file_from_offset + self.mapped_file_size:
                return f
        return None

    @overload
    def get_last_mapped_file(self, start_offset: int = 0, need_create: Literal[True] = True) -> MappedFile: ...
    @overload
    def get_last_mapped_file(self, start_offset: int, need_create: bool) -> MappedFile | None: ...

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The file being written; a new one when there is none or the last is full."""
        last = self.last
        if last is not None and not last.is_full():
            return last
        if not need_create:
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        return self._create(create_offset, first=last is None)

    def _create(self, offset: int, *, first: bool) -> MappedFile:
        f = self._allocator.take(offset) if self._allocator is not None else None
        if f is None:
            f = self.create_file(offset)
        f.first_create_in_queue = first
        with self._lock:
            self.files = self.files + (f,)
        if self._allocator is not None:
            self._allocator.request(offset + self.mapped_file_size)
        return f

    def make_next_ahead(self) -> None:
        """Start making the file after the last one (after recovery, so the first roll-over finds it)."""
        last = self.last
        if self._allocator is not None and last is not None:
            self._allocator.request(last.file_from_offset + self.mapped_file_size)

    def create_file(self, offset: int) -> MappedFile:
        """Create, reserve and map the file starting at ``offset``; its directory entry made durable."""
        os.makedirs(self.store_path, exist_ok=True)
        f = MappedFile(os.path.join(self.store_path, offset_to_file_name(offset)), self.mapped_file_size,
                       create=True)
        fsync_dir(self.store_path)
        return f

    # ------------------------------------------------------------------ flush
    def flush(self, least_pages: int = 0) -> bool:
        """Flush every file holding unflushed data when at least ``least_pages`` pages are dirty.
        Returns True if something was flushed."""
        files = self.files
        if not files:
            return False
        dirty = self.max_offset() - self.flushed_where
        if dirty <= 0 or (least_pages > 0 and dirty < least_pages * OS_PAGE_SIZE):
            return False
        flushed_where = self.flushed_where
        for f in files:
            if f.file_from_offset + f.wrote_position <= flushed_where or f.wrote_position <= f.flushed_position:
                continue
            f.flush()
            f.touch()
            flushed_where = max(flushed_where, f.file_from_offset + f.flushed_position)
        self.flushed_where = flushed_where
        return True

    # ------------------------------------------------------------------ truncation / deletion
    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at or after ``offset``: later files are deleted, the file holding it is zeroed
        from there."""
        keep = []
        doomed = []
        for f in self.files:
            end = f.file_from_offset + self.mapped_file_size
            if end > offset:
                if offset >= f.file_from_offset:
                    pos = offset - f.file_from_offset
                    f.zero_from(pos)
                    f.wrote_position = f.flushed_position = pos
                    keep.append(f)
                else:
                    doomed.append(f)
            else:
                keep.append(f)
        with self._lock:
            self.files = tuple(keep)
        if self._allocator is not None:
            self._allocator.discard()  # it was made for an offset that no longer follows the data
        for f in doomed:
            log.info("truncate: deleting dirty file %s", f.path)
            f.destroy()
        if doomed:
            fsync_dir(self.store_path)
        self.flushed_where = min(self.flushed_where, offset) if self.flushed_where else offset

    def remove_files(self, doomed: list[MappedFile]) -> None:
        if not doomed:
            return
        ids = {id(f) for f in doomed}
        with self._lock:
            self.files = tuple(f for f in self.files if id(f) not in ids)
        for f in doomed:
            f.destroy()
        fsync_dir(self.store_path)

    def delete_expired_file_by_time(self, expired_ms: int, delete_files_interval_ms: int,
                                    clean_immediately: bool, batch_max: int,
                                    now_ms: Callable[[], int], clean_below: int | None = None) -> int:
        """RocketMQ's deleteExpiredFileByTime: oldest first, never the last (written) file; stops at the
        first file still within its reserved time so the remaining files stay contiguous.
        ``clean_immediately`` deletes unexpired files too: all of them, or with ``clean_below`` only
        those ending at or below that offset."""
        files = self.files[:-1]
        doomed: list[MappedFile] = []
        for f in files:
            live_max = int(f.last_modified() * 1000) + expired_ms
            at_once = clean_immediately and (clean_below is None or f.end_offset <= clean_below)
            if now_ms() >= live_max or at_once:
                doomed.append(f)
                if len(doomed) >= batch_max:
                    break
            else:
                break
        for i, f in enumerate(doomed):
            self.remove_files([f])
            log.info("deleted expired file %s", f.path)
            if delete_files_interval_ms > 0 and i + 1 < len(doomed):
                time.sleep(delete_files_interval_ms / 1000)
        return len(doomed)

    def destroy(self) -> None:
        if self._allocator is not None:
            self._allocator.discard()
        files = self.files
        with self._lock:
            self.files = ()
        for f in files:
            f.destroy()
        self.flushed_where = 0
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass

    def close(self) -> None:
        if self._allocator is not None:
            self._allocator.close()
        for f in self.files:
            f.close()


class _NextFileAllocator:
    """Creates the next file of a queue on a background thread, one file ahead (RocketMQ's
    AllocateMappedFileService). A file made ahead is on disk but not in ``files`` until a put takes it:
    after a crash it is an empty last file, which recovery keeps (empty) or truncates like any other."""

    def __init__(self, queue: MappedFileQueue) -> None:
        self._queue = queue
        self._cond = threading.Condition()
        self._offset: int | None = None  # the file asked for, being made or made
        self._file: MappedFile | None = None
        self._busy = False
        self._closed = False

    def request(self, offset: int) -> None:
        with self._cond:
            if self._closed or self._offset == offset:
                return
            self._drop_locked()
            self._offset = offset
            self._busy = True
        threading.Thread(target=self._make, args=(offset,), name="AllocateMappedFileService", daemon=True).start()

    def _make(self, offset: int) -> None:
        try:
            f: MappedFile | None = self._queue.create_file(offset)
        except (OSError, ValueError) as e:
            # The put path retries inline and reports the failure there (a full disk, say).
            log.warning("pre-allocating %s/%s failed: %s", self._queue.store_path, offset_to_file_name(offset), e)
            f = None
        with self._cond:
            if self._offset == offset and not self._closed:
                self._file = f
                f = None
            self._busy = False
            self._cond.notify_all()
        if f is not None:  # asked for something else meanwhile, or closed
            f.destroy()

    def take(self, offset: int) -> MappedFile | None:
        """The file made ahead for ``offset`` (waiting for it if it is being made), or None."""
        with self._cond:
            if self._offset != offset:
                return None
            while self._busy:
                self._cond.wait()
            f, self._file, self._offset = self._file, None, None
            return f

    def _drop_locked(self) -> None:
        while self._busy:
            self._cond.wait()
        if self._file is not None:
            self._file.destroy()
        self._file = self._offset = None

    def discard(self) -> None:
        """Delete the file made ahead (the queue was truncated or destroyed)."""
        with self._cond:
            self._drop_locked()

    def close(self) -> None:
        """Unmap the file made ahead but keep it on disk: the next start takes it as an empty last file."""
        with self._cond:
            while self._busy:
                self._cond.wait()
            self._closed = True
            if self._file is not None:
                self._file.close()
            self._file = self._offset = None
