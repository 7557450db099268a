"""The store's reads of messages: RocketMQ's getMessage (the pull read path), and messages by CommitLog
offset or by key (the index). The reads of queue entries alone are the ConsumeQueueTable's
(store/consume_queue_table.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tidalmq.common.message import KEY_SEPARATOR
from tidalmq.common.record import RecordError, StoredMessage, decode_record
from tidalmq.store.commit_log import CommitLog
from tidalmq.store.config import CQ_STORE_UNIT_SIZE, MessageStoreConfig
from tidalmq.store.consume_queue import BLANK_SIZE, ConsumeQueue
from tidalmq.store.consume_queue_table import ConsumeQueueTable
from tidalmq.store.index_service import IndexServiceLike
from tidalmq.store.results import GetMessageResult, GetStatus
from tidalmq.store.store_stats import StoreStatsService

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


BATCH_READ_MIN = 64  # the fewest entries a pull reads at once (get_messages) rather than one by one


class MessageReader(OffsetLookup):
    """Reads messages of ``commit_log`` through the entries of ``queues`` and the ``index``; counts them in
    ``stats``. ``memory``: the bytes of the CommitLog's tail taken to be in the page cache (the transfer
    limits differ for messages in memory and on disk, as in RocketMQ)."""

    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, queues: ConsumeQueueTable,
                 index: IndexServiceLike | None, stats: StoreStatsService, memory: int) -> None:
        self.config = config
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self._stats = stats.counts
        self._memory = memory

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int = MAX_PULL_MSG_SIZE, tag_codes: set[int] | None = None,
                    filter: Callable[[int, memoryview], bool] | None = None) -> GetMessageResult:  # noqa: A002
        """RocketMQ's getMessage. ``tag_codes``: ConsumeQueue-level filter on tag hash codes (None: all).
        ``filter(tags_code, raw_record)``: CommitLog-level filter (e.g. SQL92), called for entries that
        passed ``tag_codes``."""
        cq = self.queues.get(topic, queue_id)
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
        if tag_codes is None and filter is None:
            # Unfiltered, every live entry is taken until the batch is full: entries past the most it can
            # hold are never looked at, so they are not converted either (800 entries for a pull of 32 at
            # RocketMQ's defaults; the conversion was a fifth of the broker's time serving such pulls).
            n_scan = min(n_scan, max(1, max_msg_nums), max(cfg.max_transfer_count_on_message_in_memory,
                                                   cfg.max_transfer_count_on_message_in_disk))
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
        buffers = res.buffers
        qoffs = res.queue_offsets
        memory = self._memory
        get = self.commit_log.get_message
        # Unfiltered, a large batch's entries are read at once (get_messages: one file lookup, the TOTALSIZE
        # and record CRC checks as matrices); a small one, or where that declines, one by one: numpy's cost
        # a call outweighs the loop below a few dozen records (docs/benchmarks.md, 2026-12-03 night).
        batched = filter is None and self.commit_log.reads_in_batches and min(
            len(cand_idx), max_msg_nums, cfg.max_transfer_count_on_message_in_memory) >= BATCH_READ_MIN
        while True:
            total = count = filtered = max_phy_pulling = 0
            next_rel = n
            taken: list[int] = []
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
                if batched:
                    taken.append(i)
                    total += size
                    count += 1
                    continue
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
            if not batched:
                break
            views = self.commit_log.get_messages(phys[taken], sizes[taken])
            if views is not None:
                buffers.extend(views)
                qoffs.extend(offset + i for i in taken)
                break
            batched = False
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

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None:
        if size is None:
            size = self.commit_log.record_size_at(commit_log_offset)
            if size <= 0:
                return None
        return self.commit_log.get_message(commit_log_offset, size)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]:
        index = self.index
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
