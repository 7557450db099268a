"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (SendMessageProcessor) with group commit.

Every send that arrives in one event-loop turn is appended to the CommitLog in a single
``put_messages`` call; in SYNC_FLUSH each waits for the one fsync that covers it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import re
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tidalmq.broker.dedup import window_for
from tidalmq.broker.message import InnerMessage, SendError
from tidalmq.broker.pop.revive_log import REVIVE_TOPIC_PREFIX
from tidalmq.broker.processors.recall import attach_recall_handle
from tidalmq.broker.schedule.hooks import TIMER_REQUEST_PROPERTIES
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.attribute.topic_message_type import (
    TopicMessageType,
    check_lite,
    check_messages,
    message_type_of,
    priority_of,
    priority_queue,
)
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import RecordError, encode_record
from tidalmq.common.record_batch import encode_batch_records
from tidalmq.common.sysflag import COMPRESSED_FLAG, TRANSACTION_PREPARED_TYPE, TRANSACTION_TYPE_MASK
from tidalmq.ha.service import TransferStatus
from tidalmq.remoting import request_check
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import ExtFieldsTemplate, RemotingCommand, SerializeType, all_ext_fields
from tidalmq.remoting.request_check import (
    SEND_HEADER as SEND_HEADER,  # where callers of the send path find it
)
from tidalmq.remoting.request_check import SendHeaderKeys
from tidalmq.remoting.transport import Connection
from tidalmq.store.message_store import AppendResult, PutRequest, PutStatus

if TYPE_CHECKING:
    from tidalmq.broker.broker_controller import BrokerController
    from tidalmq.schedule.timer_service import CancelTarget

log = logging.getLogger(__name__)

# A reply to one send: sends the response to the client (or completes a broker-internal future).
Respond = Callable[[RemotingCommand], object]

# Refused in a batch: delay levels (RocketMQ's rule), cancels (each needs its own lookup), and properties only
# the broker writes (a client re-sends a delivered message alone). Timer deliver times are accepted
# (TimerRewrite.park_batch).
BATCH_FORBIDDEN_PROPERTIES = (mc.DELAY, mc.TIMER_DEL_UNIQKEY, *mc.BROKER_ONLY_PROPERTIES, *mc.BROKER_WRITTEN_PROPERTIES)
_LITE_TOPIC = (mc.LITE_TOPIC,)
# Quick markers of the properties only the broker writes; most sends carry none, and skip the parse.
# One pass over the properties text finds any of them (a hit only means "parse and look").
_BROKER_PROPERTY_MARKERS = re.compile("|".join(
    re.escape(n + mc.NAME_VALUE_SEPARATOR) for n in mc.BROKER_ONLY_PROPERTIES + mc.BROKER_WRITTEN_PROPERTIES))


def send_header_keys(req: RemotingCommand) -> SendHeaderKeys:
    """The header names this send request uses (the C++ client sends batches with the V2 letters): the
    spelling request_check validated and the ACL read the topic from."""
    return request_check.send_header_keys(req.code, req.ext_fields)


def screen_client_properties(msg: InnerMessage) -> None:
    """A client's message may not carry what only the broker writes (docs/security.md, "Properties"):
    BROKER_ONLY_PROPERTIES are refused, BROKER_WRITTEN_PROPERTIES dropped. Messages the broker builds
    itself (send-back, schedule delivery) do not come through here."""
    text = msg.properties_text
    if _BROKER_PROPERTY_MARKERS.search(text) is None:
        return
    props = msg.properties
    for name in mc.BROKER_ONLY_PROPERTIES:
        if name in props:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                            f"the property {name} is written by the broker only; a client may not set it")
    for name in mc.BROKER_WRITTEN_PROPERTIES:
        props.pop(name, None)


def route_priority(msg: InnerMessage, write_queue_nums: int) -> None:
    """RocketMQ 5.4's SendMessageProcessor: a message whose properties make it a PRIORITY message (a
    priority >= 0 and nothing that makes it transactional, delayed or FIFO) is stored in the queue of its
    priority, min(priority, writeQueueNums - 1), whatever queue the client chose and whatever the topic's
    type; any other message loses the priority property. A value that is not an int is left as it is."""
    if priority_of(msg.get_property(mc.PRIORITY)) < 0:
        return
    props = msg.properties
    if message_type_of(props) == TopicMessageType.PRIORITY:
        msg.queue_id = priority_queue(priority_of(props[mc.PRIORITY]), write_queue_nums)
    else:
        del props[mc.PRIORITY]


def _no_reply(_: RemotingCommand) -> None:
    """Oneway sends get no response."""


# RocketMQ's remarks for a send refused by flow control (BrokerFastFailure, NettyRemotingAbstract): the
# official clients and operators' log searches know them by their bracketed tags.
_BUSY_TIMEOUT = "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {}ms, size of queue: {}"
_BUSY_PAGE_CACHE = "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {}ms, size of queue: {}"
_BUSY_OVERLOAD = "[OVERLOAD]system busy, start flow control for a while"
# While another thread holds the CommitLog's put lock, the group commit tries again this often.
_PUT_LOCK_RETRY_S = 0.001
# SendMessageResponseHeader of a stored message, for a request in the ROCKETMQ serialization: encoded from a
# template, without a dict and a loop over it per response (docs/benchmarks.md, "Hot paths").
_SEND_OK_REGION = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
_SEND_OK_HEADER = ExtFieldsTemplate(("msgId", "queueId", "queueOffset"), _SEND_OK_REGION)



class SendMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        # Sends waiting for the group commit: (put, request, reply, wait for flush, received at). A client's
        # send has the time its frame was read; a message the broker builds itself has 0.0 (never shed).
        self._pending: list[tuple[PutRequest, RemotingCommand, Respond, bool, float]] = []
        self._drain_scheduled = False
        self.busy_answers = 0  # sends answered SYSTEM_BUSY by flow control
        self._lookups: set[asyncio.Future[None]] = set()  # cancels waiting on their lookup (kept alive)
        self.dedup = window_for(broker.config, broker.store)  # duplicationEnable: idempotent produce (broker/dedup.py)

    def pending_sends(self) -> list[tuple[PutRequest, RemotingCommand, Respond, bool, float]]:
        """The sends waiting for the group commit (the runtime info's sendThreadPoolQueueSize)."""
        return self._pending

    def head_wait_ms(self) -> int:
        """How long the oldest client send has waited (sendThreadPoolQueueHeadWaitTimeMills)."""
        for item in self._pending:
            if item[4]:
                return int((time.monotonic() - item[4]) * 1000)
        return 0

    # entry point ------------------------------------------------------------------------------
    def process(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        """Answers bad requests at once; a stored message is answered by the group commit, which sends
        the response itself (no future per message)."""
        try:
            self._process(conn, req)
        except SendError as e:
            return req.make_response(e.code, e.remark)
        return None

    def _process(self, conn: Connection, req: RemotingCommand) -> None:
        b = self.broker
        h = req.ext_fields
        k = send_header_keys(req)
        topic = h.get(k.topic, "")
        if not (b.config.broker_permission & 0x2):
            raise SendError(ResponseCode.NO_PERMISSION, f"the broker[{b.config.broker_ip1}] sending message is forbidden")
        ha = b.replication.ha_service
        if ha is not None and b.config.broker_role == "SYNC_MASTER" and ha.in_sync_replicas_not_enough():
            # Controller mode, minInSyncReplicas: refused before anything is stored (RocketMQ's answer).
            raise SendError(ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")
        try:
            nm.check_topic(topic)
        except nm.NameError_ as e:
            raise SendError(ResponseCode.SYSTEM_ERROR, str(e)) from None
        # The revive topics too: a forged checkpoint would make the broker copy any message to a group.
        if topic in nm.NOT_ALLOWED_SEND_TOPICS or topic.startswith(REVIVE_TOPIC_PREFIX):
            raise SendError(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        try:
            queue_id = int(h.get(k.queue_id, "-1"))
            sysflag = int(h.get(k.sys_flag, "0"))
            born_ts = int(h.get(k.born_timestamp, "0"))
            flag = int(h.get(k.flag, "0"))
            reconsume = int(h.get(k.reconsume_times) or 0)
            default_qnums = int(h.get(k.default_topic_queue_nums) or b.config.default_topic_queue_nums)
        except ValueError as e:
            raise SendError(ResponseCode.SYSTEM_ERROR, f"illegal send header: {e}") from None
        tc = b.topics.get(topic)
        if tc is None:
            default_topic = h.get(k.default_topic) or nm.AUTO_CREATE_TOPIC_KEY_TOPIC
            if topic.startswith(nm.RETRY_GROUP_TOPIC_PREFIX):
                tc = b.topics.create_system_like(topic, 1, 6)
            else:
                tc = b.topics.create_in_send(topic, default_topic, default_qnums)
            if tc is None:
                raise SendError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
            b.register_soon()
        if not tc.writable:
            raise SendError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if queue_id >= tc.write_queue_nums:
            raise SendError(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.writeQueueNums:[{tc.write_queue_nums}]",
            )
        if queue_id < 0:
            queue_id = random.randrange(tc.write_queue_nums)
        body = req.body if req.body is not None else b""
        if isinstance(body, list):
            body = b"".join(body)
        max_size = b.store_config.max_message_size
        born_host = conn.attributes.get("born_host")
        if born_host is None:
            born_host = conn.attributes["born_host"] = host_bytes(conn.remote[0])
        born_port = conn.remote[1]
        # The C++ client (1.2.x, 2.x) sends batches as SEND_MESSAGE with batch="1" (a C++ bool through
        # ostream); Java's Boolean.parseBoolean reads that as false and stores the batch as one message.
        is_batch = req.code == RequestCode.SEND_BATCH_MESSAGE or h.get(k.batch) in ("true", "1")
        reply: Respond = _no_reply if req.is_oneway else conn.send
        if is_batch:
            if sysflag & TRANSACTION_TYPE_MASK == TRANSACTION_PREPARED_TYPE:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, "transactional messages cannot be batched (RocketMQ's rule)")
            if sysflag & COMPRESSED_FLAG:
                # The C++ client (1.2.x) zlib-compresses a whole batch body over compressMsgBodyOverHowmuch
                # (Java never does): store its messages uncompressed, each without the flag.
                try:
                    body = zlib.decompress(body)
                except zlib.error:
                    raise SendError(ResponseCode.MESSAGE_ILLEGAL, "the compressed batch body does not inflate") from None
                sysflag &= ~COMPRESSED_FLAG
            if len(body) > max_size:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"the message body size over max value, MAX: {max_size}")
            try:
                records = encode_batch_records(
                    body, topic=topic, queue_id=queue_id, sysflag=sysflag, born_timestamp=born_ts,
                    born_host=born_host, born_port=born_port, store_host=b.store_host_bytes,
                    store_port=b.config.listen_port, reconsume_times=reconsume,
                    forbidden_properties=BATCH_FORBIDDEN_PROPERTIES,
                )
                if not records:
                    raise SendError(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
                if b.config.enable_topic_message_type_check and (why := check_messages(
                        topic, tc.message_type, (str(p, "utf-8", "replace") for p in records.item_properties()))):
                    raise SendError(ResponseCode.MESSAGE_ILLEGAL, why)  # docs/message-types.md
                if records.carries(_LITE_TOPIC) and (why := check_lite(
                        topic, tc.message_type, (str(p, "utf-8", "replace") for p in records.item_properties()))):
                    raise SendError(ResponseCode.MESSAGE_ILLEGAL, why)  # docs/grpc.md, "Lite topics"
                put = PutRequest(topic=topic, queue_id=queue_id, records=records)
                if records.carries(TIMER_REQUEST_PROPERTIES):
                    parked, due, due_at = b.scheduled.timer_rewrite.park_batch(records, topic, queue_id)
                    if parked is not None:
                        put = PutRequest(topic=nm.TIMER_TOPIC, queue_id=0, records=parked)
                        if due is not None:  # some due already: two puts, one answer
                            joint = _JointAnswer(req, reply, due_at, len(records))
                            self._enqueue(req, PutRequest(topic, queue_id, due), True, joint.due, conn.received_at, room=2)
                            self._enqueue(req, put, True, joint.parked, conn.received_at)
                            return
            except RecordError as e:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None
            self._enqueue(req, put, True, reply, conn.received_at)
            return
        if len(body) > max_size:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"the message body size over max value, MAX: {max_size}")
        msg = InnerMessage(topic, queue_id, body, flag, h.get(k.properties, ""), sysflag, born_ts, born_host,
                           born_port, reconsume)
        if b.config.enable_topic_message_type_check and (why := check_messages(topic, tc.message_type, (msg.properties_text,))):
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, why)  # docs/message-types.md
        if why := check_lite(topic, tc.message_type, (msg.properties_text,)):
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, why)  # docs/grpc.md, "Lite topics"
        screen_client_properties(msg)
        if msg.has_property(mc.PRIORITY):
            route_priority(msg, tc.write_queue_nums)
        self._store(req, msg, attach_recall_handle(b, req, msg, reply), conn.received_at)

    def store_internal(self, req: RemotingCommand, msg: InnerMessage) -> asyncio.Future[RemotingCommand]:
        """Store a message the broker built itself (send-back, re-send), through the same rewrites."""
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()

        def reply(resp: RemotingCommand) -> None:
            if not fut.done():
                fut.set_result(resp)

        try:
            self._store(req, msg, reply)
        except SendError as e:
            reply(req.make_response(e.code, e.remark))
        return fut

    def _store(self, req: RemotingCommand, msg: InnerMessage, reply: Respond, received: float = 0.0) -> None:
        b = self.broker
        if b.rewrite_hooks:
            lookup = b.scheduled.cancel_lookup(msg)
            if lookup is not None:
                # A timer cancel: its target is looked up off the loop, then the message goes on.
                task = asyncio.ensure_future(self._store_cancel(req, msg, reply, lookup, bool(received)))
                self._lookups.add(task)
                task.add_done_callback(self._lookups.discard)
                return
            b.rewrite_before_store(msg)
        wait = msg.get_property(mc.WAIT_STORE_MSG_OK) != "false"
        self._enqueue(req, PutRequest(topic=msg.topic, queue_id=msg.queue_id, records=[self._encode(msg)]), wait, reply,
                      received)

    async def _store_cancel(self, req: RemotingCommand, msg: InnerMessage, reply: Respond,
                            lookup: Awaitable[CancelTarget], from_client: bool) -> None:
        try:
            msg.cancel_target = await lookup
            # Its wait in the send queue starts now: the lookup was its own work, not a queue. The
            # broker's own message stays 0.0 (never shed, its response read back by the broker).
            self._store(req, msg, reply, time.monotonic() if from_client else 0.0)
        except SendError as e:
            reply(req.make_response(e.code, e.remark))
        except Exception as e:
            log.exception("timer cancel lookup failed")
            reply(req.make_response(ResponseCode.SYSTEM_ERROR, f"cancel: the target lookup failed: {e}"))

    def _enqueue(self, req: RemotingCommand, put: PutRequest, wait: bool, reply: Respond, received: float,
                 room: int = 1) -> None:
        """Queue ``put`` for the next append round. ``room``: the puts this request is about to queue
        (refused together, for want of room, or queued together)."""
        cfg = self.broker.config
        if received and cfg.broker_fast_failure_enable and len(self._pending) + room > cfg.send_thread_pool_queue_capacity:
            # RocketMQ's send thread pool rejecting a task: its queue (sendThreadPoolQueueCapacity) is full.
            self.busy_answers += 1
            reply(req.make_response(ResponseCode.SYSTEM_BUSY, _BUSY_OVERLOAD))
            return
        if received and self.dedup is not None:  # a client's send (not the broker's own message)
            screened = self.dedup.screen(req, put, reply)
            if screened is None:
                return
            put = screened
        self._pending.append((put, req, reply, wait, received))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _encode(self, m: InnerMessage) -> bytearray:
        b = self.broker
        try:
            return encode_record(
                topic=m.topic,
                queue_id=m.queue_id,
                body=m.body,
                properties=m.encoded_properties(),
                flag=m.flag,
                sysflag=m.sysflag,
                born_timestamp=m.born_timestamp,
                born_host=m.born_host,
                born_port=m.born_port,
                store_host=b.store_host_bytes,
                store_port=b.config.listen_port,
                reconsume_times=m.reconsume_times,
                prepared_transaction_offset=m.prepared_transaction_offset,
            )
        except ValueError as e:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None

    # group commit -----------------------------------------------------------------------------
    def _drain(self) -> None:
        self._drain_scheduled = False
        b = self.broker
        if b.config.broker_fast_failure_enable:
            self._clean_expired()
        batch = self._pending
        if not batch:
            return
        try:
            # Never waits for the put lock: while another thread (the timer delivering) holds it, the loop
            # goes on reading requests and the sends wait here, where their wait can be seen and bounded.
            results = b.store.try_put_messages([p[0] for p in batch], dispatch_myself=True)
        except Exception as e:  # the store refused the whole batch: answer each sender
            self._pending = []
            log.exception("put_messages failed")
            for put, req, reply, _, _ in batch:
                if self.dedup is not None:
                    self.dedup.settle(put, None)
                reply(req.make_response(ResponseCode.SYSTEM_ERROR, f"store error: {e}"))
            return
        if results is None:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_later(_PUT_LOCK_RETRY_S, self._drain)
            return
        self._pending = []
        # SYNC_FLUSH waits for the disk, SYNC_MASTER (then) for a slave: one wait per round for both.
        sync = b.store_config.sync_flush or b.config.broker_role == "SYNC_MASTER"
        loop = asyncio.get_running_loop()
        max_end = 0
        waiters: list[tuple[Respond, RemotingCommand]] = []
        for (put, req, reply, wait, received), res in zip(batch, results, strict=True):
            # A client's send (it has the time its frame was read) is answered on the wire only: its
            # response may carry the pre-encoded header; the broker's own sends read the fields back.
            resp = self._response(req, put, res, bool(received))
            if self.dedup is not None:
                self.dedup.settle(put, res)
            b.stats_put(put.topic, len(put.records), res)
            if sync and wait and res.status == PutStatus.PUT_OK:
                max_end = max(max_end, res.wrote_offset + res.wrote_bytes)
                waiters.append((reply, resp))
            else:
                reply(resp)
        if waiters:
            def flushed(ok: bool) -> None:
                loop.call_soon_threadsafe(self._complete_flush, waiters, ok, max_end)

            if b.store_config.sync_flush:
                b.store.request_flush(max_end, flushed)
            else:  # SYNC_MASTER over ASYNC_FLUSH: no flush to wait for, straight to the slave
                self._complete_flush(waiters, True, max_end)
        # Dispatch what was just appended on this thread, once the responses are out (they were queued
        # first): in one interpreter a reput thread would only take turns with this one, and take the
        # interpreter whenever this one waits on a socket or a write.
        loop.call_soon(functools.partial(b.store.dispatch, wait=False))

    def _clean_expired(self) -> None:
        """BrokerFastFailure.cleanExpiredRequest: answer SYSTEM_BUSY, without any store work, to the client
        sends queued for longer than waitTimeMillsInSendQueue, or to all of them while the store is
        stalled (isOSPageCacheBusy). The oldest are at the front: the scan stops at the first one still
        in time, so a queue that is moving costs one look."""
        pending = self._pending
        if not pending:
            return
        b = self.broker
        now = time.monotonic()
        all_of_them = b.store.is_os_page_cache_busy()
        limit = now - b.config.wait_time_mills_in_send_queue / 1000
        shed: list[tuple[RemotingCommand, Respond, float]] = []
        keep: list[tuple[PutRequest, RemotingCommand, Respond, bool, float]] = []
        for i, item in enumerate(pending):
            received = item[4]
            if not received:  # the broker's own message: never refused
                keep.append(item)
            elif all_of_them or received <= limit:
                shed.append((item[1], item[2], received))
                if self.dedup is not None:
                    self.dedup.settle(item[0], None)
            else:
                keep.extend(pending[i:])
                break
        if not shed:
            return
        self._pending = keep
        template = _BUSY_PAGE_CACHE if all_of_them else _BUSY_TIMEOUT
        self.busy_answers += len(shed)
        for req, reply, received in shed:
            reply(req.make_response(ResponseCode.SYSTEM_BUSY, template.format(int((now - received) * 1000), len(keep))))

    def _complete_flush(self, waiters: list[tuple[Respond, RemotingCommand]], ok: bool, end: int) -> None:
        for _, resp in waiters:
            if not ok:
                resp.code = ResponseCode.FLUSH_DISK_TIMEOUT
                resp.remark = "flush disk timeout: the message is stored but not yet on disk"
        ha = self.broker.replication.ha_service
        if ha is not None and self.broker.config.broker_role == "SYNC_MASTER":
            ha.transfer(end, lambda status: self._complete_transfer(waiters, status))
            return
        for reply, resp in waiters:
            reply(resp)

    @staticmethod
    def _complete_transfer(waiters: list[tuple[Respond, RemotingCommand]], status: TransferStatus) -> None:
        """SYNC_MASTER: a slave's answer overrides the flush's, as in RocketMQ's handleHA (the message is
        stored on the master in every case; the client's SendStatus tells what else is true)."""
        code, remark = _TRANSFER_CODES[status]
        for reply, resp in waiters:
            if code is not None:
                resp.code, resp.remark = code, remark
            reply(resp)

    def _not_available_remark(self) -> str:
        """RocketMQ's remark for SERVICE_NOT_AVAILABLE, with what actually refuses writes here."""
        store = self.broker.store
        why = store.disk_space.reason()
        return ("service not available now. It may be caused by one of the following reasons: the broker's disk "
                f"is full [{why or 'no'}], messages are put to the slave, message store has been shut down, etc.")

    def _response(self, req: RemotingCommand, put: PutRequest, res: AppendResult,
                  wire_only: bool = False) -> RemotingCommand:
        status = res.status
        if status == PutStatus.PUT_OK:
            if wire_only and req.serialize_type == SerializeType.ROCKETMQ:
                resp = req.make_response(ResponseCode.SUCCESS)
                resp.ext_encoded = _SEND_OK_HEADER.encode(res.msg_id, str(put.queue_id), str(res.queue_offset))
                return resp
            ext = {
                "msgId": res.msg_id,
                "queueId": str(put.queue_id),
                "queueOffset": str(res.queue_offset),
                **_SEND_OK_REGION,
            }
            return req.make_response(ResponseCode.SUCCESS, None, ext)
        code, remark = {
            PutStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "the message is illegal, maybe msg body or properties length not matched"),
            PutStatus.CREATE_MAPPED_FILE_FAILED: (ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken."),
            PutStatus.SERVICE_NOT_AVAILABLE: (ResponseCode.SERVICE_NOT_AVAILABLE, self._not_available_remark()),
        }.get(status, (ResponseCode.SYSTEM_ERROR, f"UNKNOWN_ERROR {status}"))
        return req.make_response(code, remark)


class _JointAnswer:
    """The one answer to a batch of timer messages stored as two puts (``TimerRewrite.park_batch``): those
    due already in their topic, the rest parked in the timer topic. Both are queued together, so they are
    appended in the same round. Once both are answered: the first that failed, or the parked put's answer
    with every message's id in the batch's order."""

    __slots__ = ("req", "reply", "due_at", "n", "answers")

    def __init__(self, req: RemotingCommand, reply: Respond, due_at: list[int], n: int) -> None:
        self.req, self.reply, self.due_at, self.n = req, reply, due_at, n
        self.answers: list[RemotingCommand | None] = [None, None]

    def due(self, resp: RemotingCommand) -> None:
        self._got(0, resp)

    def parked(self, resp: RemotingCommand) -> None:
        self._got(1, resp)

    def _got(self, k: int, resp: RemotingCommand) -> None:
        self.answers[k] = resp
        due, parked = self.answers
        if due is None or parked is None:
            return
        for r in (due, parked):
            if r.code != ResponseCode.SUCCESS:
                self.reply(r)
                return
        ext = all_ext_fields(parked)
        ids_due, ids_parked = iter(all_ext_fields(due)["msgId"].split(",")), iter(ext["msgId"].split(","))
        at = set(self.due_at)
        ext["msgId"] = ",".join([next(ids_due) if i in at else next(ids_parked) for i in range(self.n)])
        self.reply(self.req.make_response(ResponseCode.SUCCESS, None, ext))


_TRANSFER_CODES: dict[TransferStatus, tuple[int | None, str | None]] = {
    TransferStatus.PUT_OK: (None, None),
    TransferStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT,
                                         "wait for the slave's ack timed out: the message is stored on the master only"),
    TransferStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE,
                                         "no slave in sync: the message is stored on the master only"),
}


def now_ms() -> int:
    return int(time.time() * 1000)
