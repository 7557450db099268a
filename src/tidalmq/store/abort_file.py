"""The store's ``abort`` file (RocketMQ's createTempFile / deleteFile): made at start, removed by a clean
shutdown, so a store that finds it at load knows the last run crashed.

It holds this boot's id (Linux's boot_id): a crash recovered under the same boot id was a process crash,
whose writes the page cache kept (recovery then re-dispatches less; docs/broker.md).
"""

from __future__ import annotations

import os

from tidalmq.store.mapped_file import fsync_dir


def boot_id() -> bytes:
    """This boot of the machine (Linux's boot_id), b"" where unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read().strip()
    except OSError:
        return b""


class AbortFile:
    """The file at ``path`` in the store's root directory ``root``."""

    def __init__(self, path: str, root: str) -> None:
        self.path = path
        self.root = root

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def crashed_in_this_boot(self) -> bool:
        """The file names this boot: the crash was the process's, and the page cache kept its writes."""
        try:
            with open(self.path, "rb") as f:
                written_by = f.read(64).strip()
        except OSError:
            return False
        return bool(written_by) and written_by == boot_id()

    def create(self) -> None:
        """Made durable before the store takes writes."""
        with open(self.path, "wb") as f:
            f.write(boot_id())
            os.fsync(f.fileno())
        fsync_dir(self.root)

    def delete(self) -> None:
        """After a clean shutdown (the next load recovers normally)."""
        if os.path.exists(self.path):
            os.unlink(self.path)
            fsync_dir(self.root)
