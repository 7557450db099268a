"""StoreCheckpoint: the ``checkpoint`` file, one OS page of big-endian longs as RocketMQ writes it.

    0 physicMsgTimestamp   store time of the last CommitLog record known flushed
    8 logicsMsgTimestamp   store time of the last record whose ConsumeQueue entry is known flushed
   16 indexMsgTimestamp    store time up to which the index is known flushed
   24 masterFlushedOffset  (HA; kept as read)
   32 confirmPhyOffset     (HA; kept as read)
   40 dispatchedPhyOffset  TidalMQ's: where the reput's last finished round ended (every record before it
                           has its ConsumeQueue and index entries), 0 = unknown
   48 dispatchedMsgTimestamp  store time of the last record of that round

Abnormal recovery starts from the CommitLog file whose first record is older than the minimum of these
timestamps (minus 3 s), so everything before it is known to be on disk in every structure.

The last two are stored through the mapping after every reput round and never fsynced for it: they hold
after a crash of the process alone (the page cache kept the entries they vouch for), not after a power
loss, and recovery reads them only in the first case (store/message_store.py). RocketMQ's five longs keep
their places, so a RocketMQ tool reading the file sees what it expects.
"""

from __future__ import annotations

import mmap
import os
import struct

from tidalmq.common.fileutil import reserve_file_space
from tidalmq.store.mapped_file import OS_PAGE_SIZE

_LAYOUT = struct.Struct(">qqqqq")
_DISPATCHED = struct.Struct(">qq")
_DISPATCHED_POS = 40


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        exists = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # Reserved, not a sparse ftruncate: the values are stored through the mapping, and a store
            # into a hole on a full disk is a SIGBUS.
            reserve_file_space(self._fd, OS_PAGE_SIZE)
            self._mm = mmap.mmap(self._fd, OS_PAGE_SIZE)
        except BaseException:
            os.close(self._fd)
            raise
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        self.dispatched_phy_offset = 0
        self.dispatched_msg_timestamp = 0
        if exists:
            (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
             self.master_flushed_offset, self.confirm_phy_offset) = _LAYOUT.unpack_from(self._mm, 0)
            self.dispatched_phy_offset, self.dispatched_msg_timestamp = _DISPATCHED.unpack_from(self._mm, _DISPATCHED_POS)

    def write(self) -> None:
        """Store the values in the mapping (survives a process kill, not a power loss)."""
        _LAYOUT.pack_into(self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                          self.index_msg_timestamp, self.master_flushed_offset, self.confirm_phy_offset)

    def note_dispatched(self, offset: int, store_timestamp: int) -> None:
        """Everything before CommitLog ``offset`` (a record boundary, or 0 for "unknown") is dispatched; the
        last of it was stored at ``store_timestamp``. One store into the mapping: cheap enough per round."""
        self.dispatched_phy_offset = offset
        self.dispatched_msg_timestamp = store_timestamp
        _DISPATCHED.pack_into(self._mm, _DISPATCHED_POS, offset, store_timestamp)

    def take_dispatched(self) -> tuple[int, int]:
        """(dispatchedPhyOffset, dispatchedMsgTimestamp), then 0 ("unknown") until the next round: a crash
        during recovery's truncation must not leave it pointing past the cut, into stale bytes."""
        taken = (self.dispatched_phy_offset, self.dispatched_msg_timestamp)
        self.note_dispatched(0, 0)
        return taken

    def lower_dispatched(self, offset: int) -> None:
        """Before the CommitLog is cut at ``offset``: never past the cut, where new records will go."""
        if self.dispatched_phy_offset > offset:
            self.note_dispatched(offset, 0)

    def flush(self) -> None:
        self.write()
        os.fsync(self._fd)

    def min_timestamp(self) -> int:
        """min(physic, logics) - 3 s, floored at 0 (StoreCheckpoint.getMinTimestamp)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def close(self) -> None:
        try:
            self._mm.close()
        finally:
            os.close(self._fd)
