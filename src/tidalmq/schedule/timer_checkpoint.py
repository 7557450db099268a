"""TimerCheckpoint: where enqueue, dequeue and the TimerLog flush had got to, written atomically.

RocketMQ's timercheck holds lastReadTimeMs, lastTimerLogFlushPos and lastTimerQueueOffset; ours holds the
same three ideas (read cursor, flushed TimerLog position, enqueue watermark in CommitLog offsets) plus the
geometry the files were made with and, per TimerLog segment, the latest slot any of its records is filed in
(what retention needs to know without reading the segment).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tidalmq.common.fileutil import fsync_dir

VERSION = 1


@dataclass
class TimerCheckpoint:
    slot_ms: int
    wheel_slots: int
    records_per_segment: int
    enqueue_offset: int = 0  # every timer message below this CommitLog offset is in the TimerLog
    flush_pos: int = 0  # TimerLog record index up to which records (and the cells they touch) are on disk
    read_ms: int = 0  # read cursor: everything ordered at or before (read_ms, read_offset) was delivered
    read_offset: int = -1
    segment_max_slot: dict[int, int] = field(default_factory=dict)
    version: int = VERSION

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> TimerCheckpoint | None:
        try:
            raw = json.loads(Path(path).read_text())
        except FileNotFoundError:
            return None
        raw["segment_max_slot"] = {int(k): int(v) for k, v in raw.get("segment_max_slot", {}).items()}
        return cls(**raw)

    def write(self, path: str | os.PathLike[str]) -> None:
        """temp + fsync + rename + fsync(dir): a reader sees the old file or the new one, never a mix."""
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        data = json.dumps(asdict(self), separators=(",", ":")).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
