"""Durable small-file writes for config and metadata (topics.json, consumerOffset.json ...), and the
space reservation every memory-mapped file goes through."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

log = logging.getLogger("tidalmq")


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old or the new content.

    temp file + fsync + rename + fsync of the directory; a ``.bak`` of the previous content is
    kept as RocketMQ's ConfigManager does, for an operator to fall back on.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial temp file would only hold space a full disk lacks
        raise
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        try:
            os.replace(path, bak)
        except OSError:
            pass
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: str | Path) -> None:
    """fsync a directory: a rename or a new file in it survives a power cut only once this returns."""
    dfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def sync_mapped(path: str | Path) -> None:
    """Make what was stored through a shared mapping of ``path`` durable: fdatasync of the file, which on
    Linux writes back the pages dirtied through any mapping of it, as msync would. Unlike ``mmap.flush``
    (msync), it releases the GIL while the disk works: an msync of a mapping held every other thread of
    the process, the broker's event loop among them, for as long as the write-back took."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def persist_config(path: str | Path, data: bytes) -> bool:
    """``atomic_write`` for a config manager whose in-memory table is what the broker serves from: a
    full disk keeps the previous file and is logged (the next persist retries), never raised into the
    request that changed the table. Returns whether the file was written."""
    try:
        atomic_write(path, data)
    except OSError as e:
        if not is_disk_full(e):
            raise
        log.warning("persisting %s failed (%s): kept in memory, retried on the next change or flush", path, e)
        return False
    return True


def read_with_backup(path: str | Path) -> bytes | None:
    """The file's content, or its ``.bak`` if the file is missing (crash between the renames)."""
    path = Path(path)
    for p in (path, path.with_name(path.name + ".bak")):
        try:
            return p.read_bytes()
        except FileNotFoundError:
            continue
    return None


class UnsafePathError(ValueError):
    """A path built from a name would leave the directory it must stay in."""


def path_under(root: str | Path, *parts: str) -> str:
    """``root/part/...``, refusing any part that is not one plain path component and any result that,
    symbolic links resolved, is not strictly inside ``root``.

    Every path the store makes from a name (a topic's ConsumeQueue directory, a queue's files, the
    directories a topic deletion removes) goes through here, so a name that slipped past the naming
    rules still cannot reach outside the store.
    """
    for part in parts:
        if (not isinstance(part, str) or part in ("", ".", "..") or "/" in part or "\\" in part
                or "\x00" in part or (os.altsep is not None and os.altsep in part)):
            raise UnsafePathError(f"refusing path component {part!r} under {root}")
    base = os.path.realpath(root)
    path = os.path.join(base, *parts)
    if os.path.commonpath([base, os.path.realpath(path)]) != base or not parts:
        raise UnsafePathError(f"refusing {path!r}: it resolves outside {base}")
    return path


class DiskFullError(OSError):
    """The filesystem refused to reserve space for a file (ENOSPC or EDQUOT)."""


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in _NO_SPACE


def reserve_file_space(fd: int, size: int) -> None:
    """Make sure every byte of ``[0, size)`` of the file is backed by allocated blocks, extending it.

    A file written through a shared mapping must never have holes: a store into a hole on a full disk
    is a SIGBUS that kills the process, where a refused reservation here is an ordinary error
    (``DiskFullError``) the caller can answer. So a refused reservation is never "fixed" with ftruncate,
    which would make exactly such a hole. Files already fully allocated (st_blocks) cost one fstat.
    """
    st = os.fstat(fd)
    if st.st_size >= size and st.st_blocks * 512 >= size:
        return
    # glibc's posix_fallocate writes into the file itself where the filesystem has no fallocate, so
    # what comes back here is a real refusal.
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in _NO_SPACE:
            raise DiskFullError(e.errno, f"no space to reserve {size} bytes: {os.strerror(e.errno)}") from None
        raise
