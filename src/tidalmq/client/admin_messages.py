"""The operator's message tools of ``Admin`` (RocketMQ's queryMsgByKey, queryMsgById, queryMsgByOffset,
the dead-letter and scheduled-message commands, resetOffsetByTime's broker side, consumed-or-not): each a
function of the ``Admin`` it asks through; ``Admin`` offers them as its methods."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidalmq.client.admin_data import AdminError, RewindResult, offset_of
from tidalmq.client.codec import decode_messages
from tidalmq.client.message import MessageExt, MessageQueue
from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.transport import RemotingError

if TYPE_CHECKING:
    from tidalmq.client.admin import Admin


# ---- messages ------------------------------------------------------------------------------------
async def query_messages_by_key(admin: Admin, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                                end_ms: int | None = None,
                                progress: Callable[[], None] | None = None) -> list[MessageExt]:
    """Messages of ``topic`` whose KEYS (or UNIQ_KEY) contain ``key``, from the brokers' index;
    ``progress`` is called once per broker searched."""
    out: list[MessageExt] = []
    for name, addr, _ in await admin._masters_of(topic):
        out += await _query_index(admin, name, addr, topic, key, max_num, begin_ms, end_ms)
        if progress is not None:
            progress()
    out.sort(key=lambda m: m.store_timestamp)
    return out[:max_num]


async def _query_index(admin: Admin, name: str, addr: str, topic: str, key: str, max_num: int, begin_ms: int = 0,
                       end_ms: int | None = None) -> list[MessageExt]:
    """QUERY_MESSAGE on one broker: the messages stored under ``topic`` whose KEYS or UNIQ_KEY is ``key``."""
    end_ms = int(time.time() * 1000) + 60_000 if end_ms is None else end_ms
    ext = bh.QueryMessageRequestHeader(topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
                                       end_timestamp=end_ms)
    resp = await admin._call(addr, RC.QUERY_MESSAGE, ext, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
    if resp.code != ResponseCode.SUCCESS:
        return []
    return [m for m in decode_messages(resp.body_bytes(), name)
            if m.topic == topic and (key in m.keys or m.properties.get("UNIQ_KEY") == key)]


async def _queue_messages(admin: Admin, name: str, addr: str, topic: str, queue_id: int, index: int, count: int,
                          group: str = "") -> tuple[list[MessageExt], int]:
    """Up to ``count`` messages of one queue from ``index`` on (QUERY_CONSUME_QUEUE, then VIEW_MESSAGE_BY_ID
    each): works on queues no subscription may read (the DLQ). Returns them and the index after the last
    entry read (0 entries read: the same index)."""
    resp = await admin._call(addr, RC.QUERY_CONSUME_QUEUE, bh.QueryConsumeQueueRequestHeader(
        topic=topic, queue_id=queue_id, index=index, count=count, consumer_group=group or None),
        ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
    if resp.code != ResponseCode.SUCCESS:
        return [], index  # the broker has no such queue
    data = fastjson.loads(resp.body_bytes())
    rows = data.get("queueData") or []
    out: list[MessageExt] = []
    for row in rows:
        view = await admin._call(addr, RC.VIEW_MESSAGE_BY_ID, bh.ViewMessageRequestHeader(offset=int(row["physicOffset"])),
                                ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if view.code == ResponseCode.SUCCESS:  # a file already deleted by retention is skipped
            out.extend(decode_messages(view.body_bytes(), name))
    return out, (max(index, int(data.get("minQueueIndex", 0))) + len(rows) if rows else index)


async def messages_by_time(admin: Admin, topic: str, begin_ms: int, end_ms: int, max_num: int = 64) -> list[MessageExt]:
    """Messages of ``topic`` stored between ``begin_ms`` and ``end_ms`` (each queue from the offset
    SEARCH_OFFSET_BY_TIMESTAMP gives for ``begin_ms``), oldest first, at most ``max_num``."""
    out: list[MessageExt] = []
    for name, addr, nq in await admin._masters_of(topic):
        for q in range(nq):
            index = await admin.search_offset(MessageQueue(topic, name, q), begin_ms)
            taken = 0
            while taken < max_num:  # each queue gives at most max_num: the oldest overall are kept below
                msgs, nxt = await _queue_messages(admin, name, addr, topic, q, index, min(32, max_num))
                if nxt == index:
                    break  # the end of the queue
                index = nxt
                inside = [m for m in msgs if begin_ms <= m.store_timestamp <= end_ms]
                out += inside
                taken += len(inside)
                if msgs and msgs[-1].store_timestamp > end_ms:
                    break  # past the end of the range
    out.sort(key=lambda m: m.store_timestamp)
    return out[:max_num]


async def view_message(admin: Admin, msg_id: str, topic: str | None = None) -> MessageExt:
    """A message by id: the broker's offset id (decoded to host, port and CommitLog offset), or the
    client id (UNIQ_KEY) looked up in the index of ``topic``."""
    try:
        host, port, offset = decode_offset_msg_id(msg_id)
    except ValueError:
        host, port, offset = "", 0, 0
    if host and 0 < port < 65536:  # a client id (UNIQ_KEY) has the same length but no port there
        try:
            resp = await admin._call(f"{host}:{port}", RC.VIEW_MESSAGE_BY_ID, bh.ViewMessageRequestHeader(offset=offset))
            msgs = decode_messages(resp.body_bytes())
            if msgs and msgs[0].offset_msg_id == msg_id:
                return msgs[0]
        except RemotingError:
            if not topic:
                raise
    if topic:
        found = [m for m in await query_messages_by_key(admin, topic, msg_id, 32)
                 if m.properties.get("UNIQ_KEY") == msg_id]
        if found:
            return found[0]
    raise AdminError(ResponseCode.QUERY_NOT_FOUND, f"no message with id {msg_id}"
                     + ("" if topic else " (pass topic= to look a client id up in the index)"))

# ---- scheduled messages --------------------------------------------------------------------------
async def schedule_stats(admin: Admin) -> dict[str, dict]:
    """Per master broker: scheduled messages (delay levels + timer) pending per real topic with their
    deliver-time histogram, enqueue/delivery rates and lateness (GET_TIMER_METRICS)."""
    return {name: fastjson.loads((await admin._call(addr, RC.GET_TIMER_METRICS)).body_bytes())
            for name, addr in sorted((await admin.master_addrs()).items())}


async def scheduled_messages(admin: Admin, topic: str, key: str, max_num: int = 32) -> list[MessageExt]:
    """Scheduled messages of ``topic`` whose key or client id (UNIQ_KEY) is ``key``, as parked on the
    brokers: timer messages in rmq_sys_wheel_timer (their due time in TIMER_OUT_MS), delay-level ones in
    SCHEDULE_TOPIC_XXXX (DELAY). A parked copy stays after its delivery or cancel: the copy delivered
    is found in ``topic`` itself (query_messages_by_key)."""
    out: list[MessageExt] = []
    for name, addr in sorted((await admin.master_addrs()).items()):
        for parked in (nm.TIMER_TOPIC, nm.SCHEDULE_TOPIC):
            out += [m for m in await _query_index(admin, name, addr, parked, key, max_num)
                    if m.properties.get("REAL_TOPIC") == topic]
    out.sort(key=lambda m: m.store_timestamp)
    return out[:max_num]


async def cancel_scheduled(admin: Admin, topic: str, uniq_key: str, deliver_ms: int | None = None,
                           group: str = "TOOLS_CANCEL_GROUP") -> str:
    """Cancel a timer message before it is due (RocketMQ 5's TIMER_DEL_UNIQKEY): the broker holding it parks
    a delete marker in its slot. ``deliver_ms`` is optional (the broker looks it up). Returns the broker
    name; AdminError QUERY_NOT_FOUND (22) when no broker has it pending (unknown, delivered, cancelled)."""
    props = {"TIMER_DEL_UNIQKEY": f"{topic}+{uniq_key}", "UNIQ_KEY": os.urandom(16).hex().upper()}
    if deliver_ms is not None:
        props["TIMER_DELIVER_MS"] = str(deliver_ms)
    last: AdminError | None = None
    for name, addr, _ in await admin._masters_of(topic):
        try:
            await admin._send(addr, group, topic, props, b"cancel")
            return name
        except AdminError as e:
            if e.code != ResponseCode.QUERY_NOT_FOUND:
                raise
            last = e
    raise last or AdminError(ResponseCode.QUERY_NOT_FOUND, f"topic {topic} has no broker")

# ---- rewind --------------------------------------------------------------------------------------
async def rewind(admin: Admin, group: str, timestamp_ms: int, topic: str | None = None) -> RewindResult:
    """Reset ``group``'s offsets to the first message stored at or after ``timestamp_ms`` (``-1``: the
    latest, ``0``: the earliest) on every master, for one topic or all the group consumes. Live
    consumers are told at once (RESET_CONSUMER_CLIENT_OFFSET) and replay without a restart."""
    result = RewindResult()
    for name, addr in sorted((await admin.master_addrs()).items()):
        resp = await admin._call(addr, RC.INVOKE_BROKER_TO_RESET_OFFSET, bh.ResetOffsetRequestHeader(
            topic=topic or "", group=group, timestamp=timestamp_ms, is_force=True),
            ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.TOPIC_NOT_EXIST))
        if resp.code != ResponseCode.SUCCESS:
            result.refused[name] = resp.remark or str(resp.code)
            continue
        for e in fastjson.loads(resp.body_bytes()).get("offsetTable") or []:
            result.offsets[MessageQueue(e["topic"], e["brokerName"], int(e["queueId"]))] = int(e["offset"])
        if resp.remark:
            result.notes.append(f"{name}: {resp.remark}")
    if not result.offsets:
        reasons = "; ".join(f"{n}: {r}" for n, r in result.refused.items()) or "no broker answered"
        raise AdminError(ResponseCode.CONSUMER_NOT_ONLINE, f"nothing to rewind for group {group}: {reasons}")
    return result


async def message_at(admin: Admin, mq: MessageQueue, offset: int) -> MessageExt | None:
    """The message at a queue offset (mqadmin queryMsgByOffset, printMsg): its ConsumeQueue entry
    (QUERY_CONSUME_QUEUE), then the record (VIEW_MESSAGE_BY_ID); None past the end or removed by retention."""
    addr = await admin._broker_of(mq)
    resp = await admin._call(addr, RC.QUERY_CONSUME_QUEUE, bh.QueryConsumeQueueRequestHeader(
        topic=mq.topic, queue_id=mq.queue_id, index=offset, count=1),
        ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
    if resp.code != ResponseCode.SUCCESS:  # no such queue
        return None
    rows = fastjson.loads(resp.body_bytes()).get("queueData") or []
    if not rows:
        return None
    view = await admin._call(addr, RC.VIEW_MESSAGE_BY_ID, bh.ViewMessageRequestHeader(offset=int(rows[0]["physicOffset"])),
                            ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
    msgs = decode_messages(view.body_bytes(), mq.broker_name) if view.code == ResponseCode.SUCCESS else []
    return msgs[0] if msgs else None

# ---- dead letters --------------------------------------------------------------------------------
async def dead_letters(admin: Admin, group: str, max_num: int = 1000) -> list[MessageExt]:
    """The messages in ``%DLQ%<group>`` on every master, oldest first. The dead-letter queue is not
    readable by subscription; this walks it with QUERY_CONSUME_QUEUE and VIEW_MESSAGE_BY_ID."""
    topic = nm.dlq_topic(group)
    out: list[MessageExt] = []
    for name, addr in sorted((await admin.master_addrs()).items()):
        index = 0
        while len(out) < max_num:
            msgs, nxt = await _queue_messages(admin, name, addr, topic, 0, index, 64, group)
            if nxt == index:
                break  # the end, or this broker has no dead letters for the group
            out += msgs
            index = nxt
    return out[:max_num]


async def resend_dead_letters(admin: Admin, group: str, ids: list[str] | None = None,
                              progress: Callable[[], None] | None = None) -> list[tuple[str, str]]:
    """Send dead letters of ``group`` back to their original topic: the ones whose client id (UNIQ_KEY)
    or offset id is in ``ids``, or all of them when ``ids`` is None. Returns (id, new offset id) pairs.
    An id that is not a dead letter of the group raises AdminError before anything is sent."""
    letters = await dead_letters(admin, group)
    by_id: dict[str, MessageExt] = {}
    for m in letters:
        by_id.setdefault(m.properties.get("UNIQ_KEY") or m.offset_msg_id, m)
        by_id.setdefault(m.offset_msg_id, m)
    if ids is None:
        chosen = list({id(m): m for m in letters}.values())
    else:
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise AdminError(ResponseCode.QUERY_NOT_FOUND,
                             f"not dead letters of group {group}: {', '.join(missing)}; nothing was re-sent")
        chosen = list({id(by_id[i]): by_id[i] for i in ids}.values())
    sent: list[tuple[str, str]] = []
    for m in chosen:
        props = dict(m.properties)
        target = props.get("DLQ_ORIGIN_TOPIC") or props.get("RETRY_TOPIC")
        if not target:
            raise AdminError(ResponseCode.MESSAGE_ILLEGAL, f"dead letter {m.offset_msg_id} has no original topic")
        for key in ("DELAY", "REAL_TOPIC", "REAL_QID", "WAIT", "MAX_OFFSET", "MIN_OFFSET"):
            props.pop(key, None)
        masters = await admin._masters_of(target)
        if not masters:
            raise AdminError(ResponseCode.TOPIC_NOT_EXIST, f"original topic {target} has no route")
        _, addr, nq = masters[0]
        resp = await admin._send(addr, "TOOLS_DLQ_RESEND", target, props, m.body,  # m.body is inflated
                                queue_id=m.queue_id % nq, queue_nums=nq, flag=m.flag)
        sent.append((props.get("UNIQ_KEY") or m.offset_msg_id, bh.SendMessageResponseHeader.parse(resp.ext_fields).msg_id))
        if progress is not None:
            progress()
    return sent

# ---- who consumed a message ----------------------------------------------------------------------
async def consumed_by(admin: Admin, msg: MessageExt) -> dict[str, bool]:
    """For each group that consumes the message's topic: has it consumed the message (its committed
    offset on the message's queue is past the message's queue offset)?"""
    out: dict[str, bool] = {}
    for name, addr, _ in await admin._masters_of(msg.topic):
        if msg.broker_name and name != msg.broker_name:
            continue
        resp = await admin._call(addr, RC.QUERY_TOPIC_CONSUME_BY_WHO, bh.TopicRequestHeader(topic=msg.topic))
        for group in fastjson.loads(resp.body_bytes()).get("groupList") or []:
            r = await admin._call(addr, RC.QUERY_CONSUMER_OFFSET, bh.QueryConsumerOffsetRequestHeader(
                consumer_group=group, topic=msg.topic, queue_id=msg.queue_id),
                ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            offset = offset_of(r) if r.code == ResponseCode.SUCCESS else -1
            out[group] = offset > msg.queue_offset
    return out
