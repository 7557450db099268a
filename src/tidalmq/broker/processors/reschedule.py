"""RESCHEDULE_MESSAGE (TidalMQ's; RocketMQ has none): deliver a pending scheduled message at another time —
earlier, later or now — whether it waits in the timer (RocketMQ 5's deliver time) or in a delay level.

The broker stores ONE record: a copy of the message (body, flag, keys, tags, UNIQ_KEY, user properties, born
host and time as sent) parked in ``rmq_sys_wheel_timer`` at the new time, whose RESCHEDULED_FROM names what it
replaces; a delay-level target is first written to ``delayReschedule.json`` so its level skips it. Atomicity
and the failure analysis: schedule/reschedule.py and docs/scheduled-delivery.md, "Reschedule".
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from tidalmq.broker.message import InnerMessage
from tidalmq.broker.topic.topic_config import PERM_WRITE
from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.msgid import host_bytes
from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.common.record import RecordError, decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import (
    RescheduleMessageRequestHeader,
    RescheduleMessageResponseHeader,
)
from tidalmq.remoting.transport import Connection
from tidalmq.schedule.reschedule import (
    DELAY_KIND,
    DelayMove,
    ScheduleTarget,
    moved_from_delay,
    moved_from_timer,
)

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.processors.collaborators import InternalSender
    from tidalmq.broker.schedule.services import ScheduleServices
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.api import MessageStore
    from tidalmq.store.config import MessageStoreConfig

# What the copy does not take from the message it replaces: how it was parked (the broker writes the new
# parking), a relative delay (it would delay a re-send anew), and an earlier reschedule's mark.
_NOT_COPIED = (mc.DELAY, mc.TIMER_DELAY_SEC, mc.TIMER_DELAY_MS, mc.TIMER_DELIVER_MS, mc.TIMER_OUT_MS,
               mc.TIMER_ENQUEUE_MS, mc.TIMER_DEQUEUE_MS, mc.TIMER_ROLL_TIMES, mc.RESCHEDULED_FROM, mc.REAL_TOPIC,
               mc.REAL_QID, mc.WAIT_STORE_MSG_OK)
_STORED = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RescheduleRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code, self.remark = code, remark


class RescheduleMessageProcessor:
    def __init__(self, *, config: BrokerConfig, store_config: MessageStoreConfig, topics: TopicConfigManager,
                 store: MessageStore, sender: InternalSender, scheduled: ScheduleServices) -> None:
        self.config, self.store_config, self.topics, self.store = config, store_config, topics, store
        self.sender, self.scheduled = sender, scheduled
        # One reschedule at a time: a second one of the same message must find the first's copy as the message
        # (reschedules are rare: one lock for all is simpler than one a message).
        self._one_at_a_time = asyncio.Lock()

    def process(self, conn: Connection, req: RemotingCommand,
                h: RescheduleMessageRequestHeader) -> asyncio.Future[RemotingCommand]:
        async def answer() -> RemotingCommand:
            try:
                uniq, old, new = await self.reschedule(h.topic, h.msg_id, h.key, h.deliver_time_ms, h.producer_group)
            except RescheduleRefused as e:
                return req.make_response(e.code, e.remark)
            ext = RescheduleMessageResponseHeader(msg_id=uniq, deliver_time_ms=new, previous_deliver_time_ms=old).to_ext()
            return req.make_response(ResponseCode.SUCCESS, None, ext)

        return asyncio.ensure_future(answer())

    def _check(self, topic: str, msg_id: str | None, key: str | None, deliver_ms: int, now: int) -> None:
        c, sc = self.config, self.store_config
        if c.is_slave:
            raise RescheduleRefused(ResponseCode.SLAVE_NOT_AVAILABLE, "reschedule: this broker is a slave")
        if not c.broker_permission & PERM_WRITE:
            raise RescheduleRefused(ResponseCode.SERVICE_NOT_AVAILABLE, "reschedule: the broker is not writeable")
        if not sc.timer_wheel_enable:
            raise RescheduleRefused(ResponseCode.SYSTEM_ERROR,
                                    "accurate timer message is not enabled, timerWheelEnable is false")
        if not self.store.has_index:
            raise RescheduleRefused(ResponseCode.SYSTEM_ERROR,
                                    "reschedule needs the message index (messageIndexEnable is false)")
        if self.topics.get(topic) is None:
            raise RescheduleRefused(ResponseCode.TOPIC_NOT_EXIST, f"reschedule: the topic[{topic}] not exist")
        if bool(msg_id) == bool(key):
            raise RescheduleRefused(ResponseCode.MESSAGE_ILLEGAL, "reschedule: give the message id or a key, one of them")
        if deliver_ms - now > sc.timer_max_delay_sec * 1000:
            raise RescheduleRefused(ResponseCode.MESSAGE_ILLEGAL,
                                    f"reschedule: {deliver_ms} is beyond the max delay of {sc.timer_max_delay_sec * 1000} ms "
                                    f"(timerMaxDelaySec={sc.timer_max_delay_sec})")

    async def reschedule(self, topic: str, msg_id: str | None, key: str | None, deliver_ms: int,
                         producer_group: str = "") -> tuple[str, int, int]:
        """(uniq key, old deliver ms, new deliver ms) once the copy is stored; RescheduleRefused otherwise."""
        now = _now_ms()
        self._check(topic, msg_id, key, deliver_ms, now)
        name = msg_id or f"with key {key}"
        async with self._one_at_a_time:
            target = await self.scheduled.lookup_schedule_target(topic, msg_id or None, key or None)
            return await self._move(topic, name, target, max(deliver_ms, _now_ms()), producer_group)

    async def _move(self, topic: str, name: str, target: ScheduleTarget, deliver_ms: int,
                    producer_group: str) -> tuple[str, int, int]:
        where = f"message {name} of topic {topic}"
        if target.state == "ambiguous":
            raise RescheduleRefused(ResponseCode.MESSAGE_ILLEGAL, f"reschedule: {where} names "
                                    f"{len(target.uniq_keys)} scheduled messages ({', '.join(target.uniq_keys)}): give the message id")
        if target.state == "unknown":
            raise RescheduleRefused(ResponseCode.QUERY_NOT_FOUND, f"reschedule: no scheduled {where}")
        if target.state == "cancelled":
            raise RescheduleRefused(ResponseCode.QUERY_NOT_FOUND, f"reschedule: {where} is cancelled")
        if target.state == "delivered" or target.current is None:
            raise RescheduleRefused(ResponseCode.QUERY_NOT_FOUND, f"reschedule: {where} was already delivered")
        cur = target.current
        now = _now_ms()
        guard = self.scheduled.timer_rewrite.cancel_guard_ms
        if cur.deliver_ms - now < guard:
            raise RescheduleRefused(ResponseCode.QUERY_NOT_FOUND, f"reschedule: {where} is due at {cur.deliver_ms}, "
                                    "too late to reschedule (already delivered or being delivered)")
        raw = self.store.select_one_message_by_offset(cur.record.commit_log_offset, cur.record.store_size)
        try:
            whole = decode_record(raw) if raw is not None else None
        except RecordError:
            whole = None
        if whole is None:
            raise RescheduleRefused(ResponseCode.SYSTEM_ERROR, f"reschedule: {where} cannot be read")
        props = {k: v for k, v in whole.properties.items() if k not in _NOT_COPIED}
        move: DelayMove | None = None
        if cur.kind == DELAY_KIND:
            move = DelayMove(cur.level, whole.commit_log_offset, whole.queue_offset, topic, target.uniq)
            props[mc.RESCHEDULED_FROM] = moved_from_delay(cur.level, whole.commit_log_offset)
        else:
            props[mc.RESCHEDULED_FROM] = moved_from_timer(cur.deliver_ms)
        if producer_group:
            props[mc.PGROUP] = producer_group
        props[mc.TIMER_DELIVER_MS] = str(deliver_ms)
        # The parked tail the timer's enqueue reads in place comes last (broker/schedule/hooks.py).
        props[mc.REAL_TOPIC] = whole.properties.get(mc.REAL_TOPIC, topic)
        props[mc.REAL_QID] = whole.properties.get(mc.REAL_QID, "0")
        props[mc.TIMER_OUT_MS] = str(deliver_ms)
        sysflag = sf.with_transaction_type(whole.sysflag, sf.TRANSACTION_NOT_TYPE)  # a committed one is plain now
        copy = InnerMessage(TIMER_TOPIC, 0, whole.body, whole.flag, mc.encode_properties(props), sysflag,
                            whole.born_timestamp, host_bytes(whole.born_host[0]), whole.born_host[1],
                            whole.reconsume_times)
        if move is not None:
            try:
                await asyncio.to_thread(self.scheduled.delay_moves.add, move)  # before the copy: the journal
            except OSError as e:
                raise RescheduleRefused(ResponseCode.SYSTEM_ERROR, f"reschedule: {e}") from None
        resp = await self.sender.store_internal(RemotingCommand(code=RequestCode.SEND_MESSAGE), copy)
        if resp.code not in _STORED:
            if move is not None:
                await asyncio.to_thread(self.scheduled.delay_moves.discard, move.phys)
            raise RescheduleRefused(resp.code, f"reschedule failed: {resp.remark}")
        return target.uniq, cur.deliver_ms, deliver_ms
