"""The read API of ``DefaultMessageStore``: RocketMQ's getMessage (the pull read path), and what the
broker's services read (queue ranges and entries, offsets by time, messages by offset or key).

``MessageStoreRead`` is a base of ``DefaultMessageStore`` (store/message_store.py), which owns the state
it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from tidalmq.common.message import KEY_SEPARATOR
from tidalmq.common.record import RecordError, StoredMessage, decode_record
from tidalmq.store.commit_log import CommitLog
from tidalmq.store.config import CQ_STORE_UNIT_SIZE, MessageStoreConfig
from tidalmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from tidalmq.store.message_store_dispatch import IndexServiceLike
from tidalmq.store.results import DispatchBatch, GetMessageResult, GetStatus, QueueEntries, QueueRange

MAX_PULL_MSG_SIZE = 128 * 1024 * 1024


class OffsetLookup:
    """A message read by its CommitLog offset, for the broker's store and the timer process's follower."""

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None:
        raise NotImplementedError

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None:
        """The message at ``commit_log_offset``, or None where there is none or it does not decode."""
        view = self.select_one_message_by_offset(commit_log_offset, size)
        if view is None:
            return None
        try:
            return decode_record(view)
        except RecordError:
            return None


class MessageStoreRead(OffsetLookup):
    """The read part of ``DefaultMessageStore``: the attributes below are the store's."""

    config: MessageStoreConfig
    commit_log: CommitLog
    index_service: IndexServiceLike | None
    _cqs: dict[tuple[str, int], ConsumeQueue]
    _loaded: bool
    _shutdown: bool
    _memory: int
    _stats: dict[str, int]


    def consume_queues(self) -> Iterable[ConsumeQueue]:
        return list(self._cqs.values())

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._cqs.get((topic, queue_id))

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = MAX_PULL_MSG_SIZE, tag_codes: set[int] | None = None,
                    filter: Callable[[int, memoryview], bool] | None = None) -> GetMessageResult:  # noqa: A002
        """RocketMQ's getMessage. ``tag_codes``: ConsumeQueue-level filter on tag hash codes (None: all).
        ``filter(tags_code, raw_record)``: CommitLog-level filter (e.g. SQL92), called for entries that
        passed ``tag_codes``."""
        if self._shutdown or not self._loaded:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, offset)
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            # RocketMQ creates the (empty) queue on lookup, so it answers NO_MESSAGE_IN_QUEUE, next 0.
            self._stats["getMessageTimesTotalMiss"] += 1
            return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        min_off = cq.min_offset_in_queue
        max_off = cq.max_offset_in_queue
        res = GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, offset, min_off, max_off)
        if max_off == 0:
            res.status, res.next_begin_offset = GetStatus.NO_MESSAGE_IN_QUEUE, 0
        elif offset < min_off:
            res.status, res.next_begin_offset = GetStatus.OFFSET_TOO_SMALL, min_off
        elif offset == max_off:
            res.status, res.next_begin_offset = GetStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > max_off:
            res.status, res.next_begin_offset = GetStatus.OFFSET_OVERFLOW_BADLY, max_off
        else:
            self._read_range(res, cq, offset, max_off, max_msg_nums, max_total_bytes, tag_codes, filter)
        self._stats["getMessageTimesTotalFound" if res.status is GetStatus.FOUND else "getMessageTimesTotalMiss"] += 1
        return res

    def _read_range(self, res: GetMessageResult, cq: ConsumeQueue, offset: int, max_off: int, max_msg_nums: int,
                    max_total_bytes: int, tag_codes: set[int] | None,
                    filter: Callable[[int, memoryview], bool] | None) -> None:  # noqa: A002
        cfg = self.config
        max_offset_py = self.commit_log.max_offset
        # Entries examined per call are bounded like RocketMQ (maxFilterMessageSize, one CQ file).
        max_filter_bytes = max(cfg.max_filter_message_size, max_msg_nums * CQ_STORE_UNIT_SIZE)
        n_scan = min(max_off - offset, -(-max_filter_bytes // CQ_STORE_UNIT_SIZE))
        max_pull = min(max(max_total_bytes, 100), MAX_PULL_MSG_SIZE)
        arr = cq.entries(offset, n_scan)
        if arr is None:
            res.status = GetStatus.OFFSET_FOUND_NULL
            res.next_begin_offset = cq.roll_next_file(offset)
            return
        n = len(arr)
        if n == 0:  # the entry is being written; nothing readable yet
            res.status = GetStatus.OFFSET_FOUND_NULL
            res.next_begin_offset = offset
            return
        phys = arr["offset"].astype(np.int64)
        sizes = arr["size"].astype(np.int64)
        tags = arr["tag"].astype(np.int64)
        del arr  # drop the view of the mapped file
        live = sizes != BLANK_SIZE
        removed = phys < self.commit_log.min_offset
        cand = live & ~removed
        if tag_codes is not None:
            cand &= np.isin(tags, np.fromiter(tag_codes, np.int64, len(tag_codes)))
        cand_idx = np.flatnonzero(cand).tolist()
        phys_l = phys.tolist()
        sizes_l = sizes.tolist()
        total = count = 0
        buffers = res.buffers
        qoffs = res.queue_offsets
        memory = self._memory
        next_rel = n
        max_phy_pulling = 0
        filtered = 0
        get = self.commit_log.get_message
        for i in cand_idx:
            size = sizes_l[i]
            p = phys_l[i]
            if count:
                # isTheBatchFull
                if count + 1 > max_msg_nums or total + size > max_pull:
                    next_rel = i
                    break
                if max_offset_py - p <= memory:
                    if total + size > cfg.max_transfer_bytes_on_message_in_memory \
                            or count > cfg.max_transfer_count_on_message_in_memory - 1:
                        next_rel = i
                        break
                elif total + size > cfg.max_transfer_bytes_on_message_in_disk \
                        or count > cfg.max_transfer_count_on_message_in_disk - 1:
                    next_rel = i
                    break
            if total >= max_pull:
                next_rel = i
                break
            max_phy_pulling = p
            view = get(p, size)
            if view is None:
                continue
            if filter is not None and not filter(int(tags[i]), view):
                filtered += 1
                continue
            buffers.append(view)
            qoffs.append(offset + i)
            total += size
            count += 1
        res.next_begin_offset = offset + next_rel
        res.message_count = count
        res.buffer_total_size = total
        res.filter_message_count = filtered
        if count:
            res.status = GetStatus.FOUND
            self._stats["getMessageTransferedMsgCount"] += count
        elif next_rel > 0 and bool(removed[next_rel - 1]) and bool(live[next_rel - 1]):
            res.status = GetStatus.MESSAGE_WAS_REMOVING
        else:
            res.status = GetStatus.NO_MATCHED_MESSAGE
        if max_phy_pulling:
            res.suggest_pulling_from_slave = (max_offset_py - max_phy_pulling) > memory

    # ------------------------------------------------------------------ the read API for services
    # What the broker's services (schedule, timer, transactions, admin) read. Nothing outside store/
    # touches ConsumeQueue arrays, mapped files or the CommitLog directly (tests/store/test_face.py).
    def queue_range(self, topic: str, queue_id: int) -> QueueRange:
        cq = self._cqs.get((topic, queue_id))
        return QueueRange(0, 0) if cq is None else QueueRange(cq.min_offset_in_queue, cq.max_offset_in_queue)

    def read_queue(self, topic: str, queue_id: int, offset: int, max_n: int) -> QueueEntries:
        """Up to ``max_n`` entries from logical ``offset`` (read from the queue's min offset when
        ``offset`` is below it), never past one ConsumeQueue file: loop on ``next_offset`` while it is
        below ``queue_range().max_offset`` and the read was not empty."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return QueueEntries.empty(offset, offset)
        start = max(offset, cq.min_offset_in_queue)
        arr = cq.entries(start, max_n) if max_n > 0 and start < cq.max_offset_in_queue else None
        if arr is None:
            # No file holds ``start`` (retention took it): the next read starts at the next file.
            nxt = cq.roll_next_file(start) if max_n > 0 and start < cq.max_offset_in_queue else start
            return QueueEntries.empty(start, nxt)
        out = QueueEntries(start, start + len(arr), arr["offset"].astype(np.int64), arr["size"].astype(np.int64),
                           arr["tag"].astype(np.int64))
        del arr  # the view of the mapped file; the result holds copies
        return out

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self._cqs

    def queue_entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """(CommitLog offset, size, tag code) of one entry; None outside the queue's range."""
        cq = self._cqs.get((topic, queue_id))
        return cq.entry(offset) if cq is not None else None

    def queue_offset_at_or_after(self, topic: str, queue_id: int, commit_log_offset: int) -> int:
        """The first logical offset whose entry points at or past ``commit_log_offset`` (the max offset
        when none does): entries of a queue follow CommitLog order, so a binary search finds it."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            if e is None or e[0] >= commit_log_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message appended to (topic, queue) gets: ahead of
        ``queue_range().max_offset`` by what is appended but not yet dispatched."""
        return self.commit_log.topic_queue_table.get((topic, queue_id), 0)

    @property
    def has_index(self) -> bool:
        """True when messages are indexed by key (``query_message`` can find them)."""
        return self.index_service is not None

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.max_offset_in_queue if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.min_offset_in_queue if cq is not None else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        e = cq.entry(offset) if cq is not None else None
        return e[0] if e is not None else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        e = cq.entry(offset) if cq is not None else None
        if e is None or e[1] == BLANK_SIZE:
            return -1
        return self.commit_log.store_timestamp_at(e[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset_in_queue)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Logical offset of the first message stored at or after ``timestamp_ms``; the max offset when
        there is none. Binary search over the queue, reading store times from the CommitLog."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue - 1
        min_phy = self.commit_log.min_offset
        while lo <= hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            ts = -1
            if e is not None and e[1] != BLANK_SIZE and e[0] >= min_phy:
                ts = self.commit_log.store_timestamp_at(e[0])
            if ts < 0 or ts < timestamp_ms:  # unreadable entries only exist at the head: treat as older
                lo = mid + 1
            else:
                hi = mid - 1
        return lo

    def commit_log_range(self) -> tuple[int, int]:
        """(first CommitLog offset still on disk, offset after the last record written)."""
        return self.commit_log.min_offset, self.commit_log.written[0]

    def read_commit_log_records(self, offset: int, max_bytes: int) -> tuple[DispatchBatch, int]:
        """What reput reads of the records from ``offset`` (about ``max_bytes``): topic, queue, offsets,
        store time, keys, ``UNIQ_KEY``, a column each; and the offset after them (no progress: nothing
        more is readable there)."""
        batch, nxt, _bad = self.commit_log.read_dispatch_requests(offset, max_bytes)
        return batch, nxt

    def offset_msg_id(self, commit_log_offset: int) -> str:
        """The offset msgId of the record at ``commit_log_offset`` (store host + port + offset)."""
        return self.commit_log.msg_id(commit_log_offset)

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None:
        if size is None:
            size = self.commit_log.record_size_at(commit_log_offset)
            if size <= 0:
                return None
        return self.commit_log.get_message(commit_log_offset, size)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]:
        index = self.index_service
        if index is None:
            return []
        max_num = min(max_num, self.config.max_msgs_num_batch)
        out: list[memoryview] = []
        seen: set[int] = set()
        for off in index.query_offsets(topic, key, max_num, begin_ts, end_ts):
            if off in seen:  # re-dispatch after a crash may index a record twice
                continue
            seen.add(off)
            view = self.select_one_message_by_offset(off)
            if view is None:
                continue
            try:
                msg = decode_record(view, read_body=False)
            except RecordError:
                continue
            if msg.topic != topic:
                continue
            keys = msg.properties.get("KEYS")
            if msg.properties.get("UNIQ_KEY") == key or (keys and key in keys.split(KEY_SEPARATOR)):
                out.append(view)
        return out
