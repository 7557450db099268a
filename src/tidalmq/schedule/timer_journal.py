"""The delivery journal (``timerdeliver``): the exactly-once part of the timer's deliveries across SIGKILL.

Before each batch is re-stored its last key (deliver ms, CommitLog offset) is written as the *intent*, and
again as *done* once the store accepted it: pwrite, no fsync (SIGKILL keeps the page cache). After a restart
the entries at or below *done* were delivered already; those up to an *intent* above it were in flight.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

_JOURNAL = struct.Struct("<qqqq")  # intent (deliver_ms, offset), done (deliver_ms, offset)
NONE_KEY = (-(1 << 62), -1)


class DeliverJournal:
    """The journal at ``path``; ``intent`` and ``done`` as last written (or read at ``open``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1
        self.intent = NONE_KEY
        self.done = NONE_KEY

    @property
    def is_open(self) -> bool:
        return self.fd >= 0

    def open(self) -> None:
        """Open (or create) the file and read what the last run wrote."""
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        raw = os.pread(self.fd, _JOURNAL.size, 0)
        if len(raw) == _JOURNAL.size:
            i0, i1, d0, d1 = _JOURNAL.unpack(raw)
            self.intent, self.done = (i0, i1), (d0, d1)
        else:
            self.write(NONE_KEY, NONE_KEY)

    def write(self, intent: tuple[int, int], done: tuple[int, int]) -> None:
        self.intent, self.done = intent, done
        os.pwrite(self.fd, _JOURNAL.pack(intent[0], intent[1], done[0], done[1]), 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
