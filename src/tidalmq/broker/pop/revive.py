"""PopReviveService: reads the revive topic as the timer releases it, pairs checkpoints with acks and
re-puts every popped message no ack covered into the group's pop retry topic (reconsume times + 1,
1ST_POP_TIME kept), or into ``%DLQ%<group>`` once it was retried the group's retryMaxTimes.

Checkpoints and acks of one pop are due at the same deadline. A checkpoint is revived ``grace_ms``
after its deadline, so that an ack released in the same timer round, just after it, still counts. The
revive offset (group CID_RMQ_SYS_REVIVE_GROUP, in consumerOffset.json) never passes a checkpoint not yet
revived nor an ack whose checkpoint is not yet read: after a restart both are read again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidalmq.broker.pop.requeue import look, max_times, requeue
from tidalmq.broker.pop.revive_log import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    REVIVE_GROUP,
    AckMsg,
    CkKey,
    PopCheckPoint,
)
from tidalmq.broker.pop.service import REVIVE_QID, PopError, PopService, now_ms
from tidalmq.common import message as mc
from tidalmq.common.record import RecordError, decode_record
from tidalmq.store.message_store import GetStatus

if TYPE_CHECKING:
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.store.api import MessageStore

log = logging.getLogger(__name__)

READ_BATCHES_PER_ROUND = 64  # of 32 revive messages
# An ack whose checkpoint was not read this long after the ack was is dropped (a forged or stale handle).
ORPHAN_ACK_KEEP_MS = 60_000


@dataclass(slots=True)
class _Pending:
    ck: PopCheckPoint
    revive_offset: int
    acked: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _Orphan:
    revive_offset: int
    seen_ms: int
    acked: set[int] = field(default_factory=set)


class PopReviveService:
    def __init__(self, store: MessageStore, offsets: ConsumerOffsetManager, pop: PopService, *,
                 interval_ms: int = 100, grace_ms: int = 500) -> None:
        self.store = store
        self.offsets = offsets
        self.pop = pop
        self.interval = interval_ms / 1000.0
        self.grace_ms = grace_ms
        self._pending: dict[CkKey, _Pending] = {}
        self._orphans: dict[CkKey, _Orphan] = {}
        self._read_offset = -1
        self.revived = 0
        self.dead_lettered = 0

    def runtime_info(self) -> dict[str, str]:
        """For GET_BROKER_RUNTIME_INFO."""
        return {"pop.revived": str(self.revived), "pop.deadLettered": str(self.dead_lettered),
                "pop.pendingCheckpoints": str(len(self._pending)),
                "pop.pollingWaiting": str(self.pop.polling.waiting_count())}

    async def run(self) -> None:
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pop revive round failed")
            await asyncio.sleep(self.interval)

    async def round(self) -> None:
        offsets = self.offsets
        topic = self.pop.revive_topic
        if self._read_offset < 0:
            self._read_offset = max(0, offsets.query(REVIVE_GROUP, topic, REVIVE_QID))
        self._read()
        now = now_ms()
        due = [k for k, p in self._pending.items() if p.ck.deadline + self.grace_ms <= now]
        for key in due:
            p = self._pending[key]
            await self._revive(p)
            del self._pending[key]
        for key in [k for k, o in self._orphans.items() if now - o.seen_ms > ORPHAN_ACK_KEEP_MS]:
            del self._orphans[key]
        held = [p.revive_offset for p in self._pending.values()] + [o.revive_offset for o in self._orphans.values()]
        commit = min(held, default=self._read_offset)
        if commit != offsets.query(REVIVE_GROUP, topic, REVIVE_QID):
            offsets.commit(REVIVE_GROUP, topic, REVIVE_QID, commit)

    def _read(self) -> None:
        topic = self.pop.revive_topic
        # A bounded read a round: a backlog (after a restart) does not hold the event loop for long.
        for _ in range(READ_BATCHES_PER_ROUND):
            res = self.store.get_message(REVIVE_GROUP, topic, REVIVE_QID, self._read_offset, 32)
            if res.status != GetStatus.FOUND:
                if res.next_begin_offset > self._read_offset and res.status != GetStatus.OFFSET_OVERFLOW_ONE:
                    self._read_offset = res.next_begin_offset  # the queue's head moved on
                return
            for buf, offset in zip(res.buffers, res.queue_offsets, strict=True):
                self._take(buf, offset)
            self._read_offset = res.next_begin_offset

    def _take(self, buf: memoryview, offset: int) -> None:
        try:
            msg = decode_record(buf)
            tag = msg.properties.get(mc.TAGS)
            if tag == CK_TAG:
                ck = PopCheckPoint.decode(msg.body)
                p = _Pending(ck, offset)
                orphan = self._orphans.pop(ck.key, None)
                if orphan is not None:
                    p.acked |= orphan.acked
                    p.revive_offset = min(offset, orphan.revive_offset)
                self._pending[ck.key] = p
            elif tag == ACK_TAG or tag == BATCH_ACK_TAG:
                ack = AckMsg.decode(msg.body)
                pending = self._pending.get(ack.key)
                if pending is not None:
                    pending.acked.update(ack.ack_offsets)
                else:
                    self._orphans.setdefault(ack.key, _Orphan(offset, now_ms())).acked.update(ack.ack_offsets)
        except (RecordError, ValueError, KeyError, TypeError) as e:
            log.warning("revive topic offset %d: not a checkpoint or ack (%s); skipped", offset, e)

    async def _revive(self, p: _Pending) -> None:
        ck = p.ck
        for offset in ck.offsets:
            if offset in p.acked:
                continue
            msg = look(self.pop, ck.topic, ck.queue_id, offset)
            if msg is None:
                log.warning("pop revive: %s@%d offset %d is gone; not revived", ck.topic, ck.queue_id, offset)
                continue
            try:
                dead = msg.reconsume_times >= max_times(self.pop, ck.group)
                await requeue(self.pop, ck.group, ck.topic, msg, ck.pop_time, attempts=msg.reconsume_times, dead=dead)
            except PopError as e:
                # Stays pending (the revive offset holds): tried again next round.
                log.error("pop revive of %s@%d offset %d failed: %s", ck.topic, ck.queue_id, offset, e.remark)
                raise
            p.acked.add(offset)
            if dead:
                self.dead_lettered += 1
            else:
                self.revived += 1
