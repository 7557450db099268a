"""The durable commit of a TimerStore (the disk's part of RocketMQ's TimerFlushService): flush points, the
fsync of the TimerLog segments and the wheel, and the checkpoint written after them.

A flush runs in three steps, for a caller whose lock guards the TimerStore (the timer service): the point
is taken under the lock (``TimerStore.flush_point``), synced without it (``sync``: the disk's write-back,
which can take a long time on a busy disk, then holds up no delivery), and ``TimerStore.flushed`` under
the lock again.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from tidalmq.schedule.timer_checkpoint import TimerCheckpoint
from tidalmq.schedule.timer_log import TimerLog
from tidalmq.schedule.timer_wheel import TimerWheel


@dataclass(frozen=True, slots=True)
class FlushPoint:
    """A checkpoint to write once what it claims is on disk (TimerStore.flush_point)."""

    number: int
    fds: list[int]  # a duplicate descriptor of each TimerLog segment written since the previous point
    watermark: int
    write_pos: int
    commit: tuple[int, int]
    seg_max: dict[int, int]


class TimerFlush:
    """Flush points of one TimerStore's files and the checkpoint ``cp`` written at ``path`` after them."""

    def __init__(self, cp: TimerCheckpoint, path: Path) -> None:
        self.cp = cp
        self.path = path
        self._points = 0  # flush points taken
        self._points_on_disk = 0  # the newest whose checkpoint is written
        self._lock = threading.Lock()  # one sync at a time
        self._unsynced_fds: list[int] = []  # of TimerLog segments a failed sync left unsynced

    def point(self, log: TimerLog, watermark: int, commit: tuple[int, int], seg_max: dict[int, int]) -> FlushPoint:
        """What a checkpoint written now would claim, and the TimerLog segments to sync before it."""
        self._points += 1
        return FlushPoint(self._points, log.take_dirty(), watermark, log.write_pos, commit, dict(seg_max))

    def sync(self, point: FlushPoint, wheel: TimerWheel) -> None:
        """Sync the point's TimerLog segments and the wheel, then write its checkpoint, unless one taken
        later is on disk already (checkpoints only move forward). Needs no lock of the caller's; runs one
        at a time (a later point's checkpoint must wait for an earlier point's segments). A failed sync
        raises OSError and keeps those segments for the next point to sync before its checkpoint."""
        with self._lock:
            # held as unsynced until every one is synced: a failure leaves them for the next point (close()
            # closes what is left)
            fds = self._unsynced_fds = self._unsynced_fds + point.fds
            for fd in fds:
                os.fsync(fd)
            wheel.flush()
            self._unsynced_fds = []
            for fd in fds:
                os.close(fd)
            if point.number <= self._points_on_disk:
                return
            cp = self.cp
            cp.enqueue_offset = point.watermark
            cp.flush_pos = point.write_pos
            cp.read_ms, cp.read_offset = point.commit
            cp.segment_max_slot = point.seg_max
            cp.write(self.path)
            self._points_on_disk = point.number

    def close(self) -> None:
        """Release the descriptors a failed sync left."""
        with self._lock:
            for fd in self._unsynced_fds:
                os.close(fd)
            self._unsynced_fds = []
