"""A real small filesystem for the full-disk tests: a tmpfs mounted with ``size=`` in a temp dir.

Mounting needs root (or CAP_SYS_ADMIN); without it the tests are skipped with the reason printed, never
silently passed. The mount is taken down in teardown (lazily if a dead broker still holds a file).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Standalone

DISK_MB = 64
# Small files so that a 64 MiB disk holds several of each: 4 MiB CommitLog files, 2000-entry
# ConsumeQueue files, an 84 KB index file.
SMALL_FILES = {
    "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
    "maxMessageSize": str(1024 * 1024),
    "mappedFileSizeConsumeQueue": str(20 * 2000),
    "maxHashSlotNum": "1000",
    "maxIndexNum": "4000",
    "flushIntervalCommitLog": "50",
}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mnt)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: cannot mount a {DISK_MB} MiB tmpfs (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def broker_on(disk: Path, tmp_path: Path, **settings: str) -> Standalone:
    """A standalone whose data is on ``disk`` and whose log is not (it must stay writable)."""
    return Standalone(disk / "data", {**SMALL_FILES, **settings}, log_path=tmp_path / "standalone.log")


def fill(path: Path, limit_mb: int | None = None) -> int:
    """Write 1 MiB chunks to ``path`` until the disk refuses (or ``limit_mb``); bytes written."""
    chunk = b"\xa5" * (1024 * 1024)
    written = 0
    with open(path, "wb", buffering=0) as f:
        while limit_mb is None or written < limit_mb * len(chunk):
            try:
                written += f.write(chunk)
            except OSError:
                break
    # A last partial chunk may have gone in: the disk is now truly full.
    return written
