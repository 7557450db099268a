"""PullConsumer with explicit offsets (DefaultLitePullConsumer's assign/seek mode, MQPullConsumer):
the caller owns the positions — fetch queues, pull a range, seek by time, commit. What a Spark connector
needs: deterministic ranges, nothing happening in the background."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client import codec
from tidalmq.client import validators as v
from tidalmq.client.broker_addr import find_master_addr
from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.lifecycle import InstanceClient
from tidalmq.client.message import MessageExt, MessageQueue, PullResult, PullStatus
from tidalmq.client.offset_store import NOT_FOUND, RemoteBrokerOffsetStore
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import ExtFieldsTemplate, RemotingCommand, SerializeType
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol.requests import ext_of
from tidalmq.remoting.tls import TlsOption
from tidalmq.remoting.transport import RemotingConnectError

_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
_PULL_OFFSET_KEY = bh.PullMessageRequestHeader.key_of("queue_offset")
_PULL_NUMS_KEY = bh.PullMessageRequestHeader.key_of("max_msg_nums")
MAX_PULL_NUMS = 65536  # the broker caps a pull anyway (maxTransferCountOnMessageInMemory, bytes)


@dataclass(slots=True)
class RawPullResult:
    """A pull's answer with the records undecoded: ``body`` is the concatenated stored records."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes
    suggest_which_broker_id: int = 0


def raw_pull_header(group: str, mq: MessageQueue, offset: int, max_nums: int, expression: str, expression_type: str,
                    block_timeout: float, max_bytes: int) -> bh.PullMessageRequestHeader:
    """A raw pull's header: the subscription comes with it (no heartbeat registers one), a TAG expression in
    the form the broker parses."""
    expr = codec.Subscription.build(mq.topic, expression, 0).expression if expression_type == "TAG" else expression
    return bh.PullMessageRequestHeader(
        consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=FLAG_SUBSCRIPTION | (FLAG_SUSPEND if block_timeout > 0 else 0), commit_offset=0,
        suspend_timeout_millis=int(block_timeout * 1000), subscription=expr, sub_version=0,
        expression_type=expression_type, max_msg_bytes=max(max_bytes, 0))


def raw_result(resp: RemotingCommand, offset: int) -> RawPullResult:
    """A PULL_MESSAGE response (one of ``_STATUS``'s codes) as a ``RawPullResult`` of a pull at ``offset``."""
    h = bh.PullMessageResponseHeader.parse(resp.ext_fields)
    body = resp.body_bytes() if resp.code == ResponseCode.SUCCESS else b""
    nbo = offset if h.next_begin_offset is None else h.next_begin_offset
    return RawPullResult(_STATUS[ResponseCode(resp.code)], nbo, h.min_offset, h.max_offset, body,
                         h.suggest_which_broker_id)


class RawPullPipeline:
    """Raw pulls of one queue sent back to back without a coroutine, a task or a timer each (the Spark
    source's reads: a broker at RocketMQ's default cap answers 32 messages a pull, so a large read is many
    pulls, and the client's own cost a pull counts). ``send`` writes a PULL_MESSAGE in the ROCKETMQ
    header serialization, its fields from a template encoded once (where the client signs its requests, a
    signature covering every field, they are built and signed each time), and returns the future of the
    response, or None when there is no open connection to the queue's broker: the caller then goes through
    ``PullConsumer.pull_raw``, which connects and retries. ``result`` reads an answer as ``pull_raw`` does;
    an error code raises ``MQBrokerError`` as there."""

    def __init__(self, consumer: PullConsumer, mq: MessageQueue, addr: str, expression: str, expression_type: str,
                 max_bytes: int) -> None:
        self._instance = consumer._instance
        self._addr = addr
        self._timeout = consumer.pull_timeout
        fields = ext_of(RC.PULL_MESSAGE, raw_pull_header(consumer.group, mq, 0, 1, expression, expression_type, 0.0,
                                                         max_bytes))
        self._fields = fields
        changing = (_PULL_OFFSET_KEY, _PULL_NUMS_KEY)
        self._template = ExtFieldsTemplate(changing, {k: v for k, v in fields.items() if k not in changing})

    def send(self, offset: int, max_nums: int) -> asyncio.Future[RemotingCommand] | None:
        if offset < 0:
            raise v.ValidationError(f"offset must be >= 0, got {offset}")
        if not 1 <= max_nums <= MAX_PULL_NUMS:
            raise v.ValidationError(f"max_nums must be within 1..{MAX_PULL_NUMS}, got {max_nums}")
        conn = self._instance.ready_connection(self._addr)
        if conn is None:
            return None
        if self._instance.signer is None:
            cmd = RemotingCommand(code=RC.PULL_MESSAGE, serialize_type=SerializeType.ROCKETMQ,
                                  ext_encoded=self._template.encode(str(offset), str(max_nums)))
        else:
            ext = {**self._fields, _PULL_OFFSET_KEY: str(offset), _PULL_NUMS_KEY: str(max_nums)}
            cmd = self._instance.sign(RemotingCommand(code=RC.PULL_MESSAGE, ext_fields=ext,
                                                      serialize_type=SerializeType.ROCKETMQ))
        return conn.request(cmd, self._timeout)

    def result(self, resp: RemotingCommand, offset: int) -> RawPullResult:
        if resp.code not in _STATUS:
            raise MQBrokerError(resp.code, resp.remark, self._addr)
        return raw_result(resp, offset)


class PullConsumer(InstanceClient):
    """Pulls exactly the offsets asked for. Offsets committed with ``commit`` are stored on the broker
    under the group (visible to ``Admin.consumer_progress``)."""

    KIND = "pull consumer"

    def __init__(self, group: str, namesrv_addr: str | None = None, *, pull_timeout: float = 10.0,
                 instance_name: str | None = None, client_ip: str | None = None,
                 credentials: SessionCredentials | None = None, tls: TlsOption = None) -> None:
        v.check_group(group)
        self.group = group
        self.pull_timeout = pull_timeout
        self._instance = ClientInstance(namesrv_addr, instance_name=instance_name, client_ip=client_ip,
                                        credentials=credentials, tls=tls)
        self._offsets = RemoteBrokerOffsetStore(self._instance, group)
        self._state = "created"

    async def _addr(self, mq: MessageQueue) -> str:
        return await find_master_addr(self._instance, mq)

    # queues and positions ---------------------------------------------------------------------
    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, sorted (fetchSubscribeMessageQueues)."""
        self._check_running()
        v.check_topic(topic)
        route = await self._instance.update_route(topic)
        if route is None or not route.queue_datas:
            raise MQClientError(10005, f"Can not find Message Queue for this topic, {topic}")
        return route.subscribe_queues()

    async def _offset(self, mq: MessageQueue, code: int, timestamp: int | None = None) -> int:
        self._check_running()
        ext: bh.TopicQueueRequestHeader | bh.SearchOffsetRequestHeader = (
            bh.TopicQueueRequestHeader(topic=mq.topic, queue_id=mq.queue_id) if timestamp is None
            else bh.SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp))
        resp = await self._instance.invoke_ok(await self._addr(mq), code, ext)
        return bh.OffsetResponseHeader.parse(resp.ext_fields).offset

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset(mq, RC.GET_MIN_OFFSET)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset after the last message (where the next one will go)."""
        return await self._offset(mq, RC.GET_MAX_OFFSET)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The broker's answer to SEARCH_OFFSET_BY_TIMESTAMP: as RocketMQ, the offset of the message whose
        store time is *nearest* to ``timestamp_ms`` (which may be just before it)."""
        return await self._offset(mq, RC.SEARCH_OFFSET_BY_TIMESTAMP, int(timestamp_ms))

    async def seek_by_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message stored at or after ``timestamp_ms`` (the max offset if none):
        the broker's nearest answer, corrected by looking at the store times around it."""
        offset = await self.search_offset(mq, timestamp_ms)
        lo = await self.min_offset(mq)
        while offset > lo:  # step back while the previous message is not older than the time
            prev = await self.pull(mq, offset - 1, 1)
            if not prev.messages or prev.messages[0].store_timestamp < timestamp_ms:
                break
            offset -= 1
        while True:  # step forward over messages stored before the time
            res = await self.pull(mq, offset, 32)
            if res.status != PullStatus.FOUND or not res.messages:
                return offset
            for m in res.messages:
                if m.store_timestamp >= timestamp_ms:
                    return m.queue_offset
            offset = res.next_begin_offset

    async def earliest_store_time(self, mq: MessageQueue) -> int:
        self._check_running()
        resp = await self._instance.invoke_ok(await self._addr(mq), RC.GET_EARLIEST_MSG_STORETIME,
                                              bh.TopicQueueRequestHeader(topic=mq.topic, queue_id=mq.queue_id))
        return bh.GetEarliestMsgStoretimeResponseHeader.parse(resp.ext_fields).timestamp

    # pulling ----------------------------------------------------------------------------------
    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = "*", *,
                   block_timeout: float = 0.0, expression_type: str = "TAG") -> PullResult:
        """Pull up to ``max_nums`` messages from ``offset``. With ``block_timeout`` > 0 the broker holds
        the request until a message arrives or the time is up (long polling)."""
        self._check_running()
        if not 1 <= max_nums <= 1024:
            raise v.ValidationError(f"max_nums must be within 1..1024, got {max_nums}")
        raw = await self.pull_raw(mq, offset, max_nums, expression, block_timeout=block_timeout,
                                  expression_type=expression_type)
        msgs: list[MessageExt] = []
        if raw.body:
            msgs = codec.decode_messages(raw.body, mq.broker_name)
            sub = codec.Subscription.build(mq.topic, expression, 0)
            if expression_type == "TAG" and not sub.matches_all:  # SQL92: the broker filtered
                msgs = [m for m in msgs if sub.matches(m.tags)]
        return PullResult(raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset, msgs,
                          raw.suggest_which_broker_id)

    async def pull_raw(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = "*", *,
                       block_timeout: float = 0.0, expression_type: str = "TAG", max_bytes: int = 0) -> RawPullResult:
        """``pull`` without decoding: the response body is the broker's stored records as they are (for
        columnar decoders such as the Spark source). The records are filtered by the broker only (tag hash
        or SQL92); the exact tag check is the caller's."""
        self._check_running()
        if offset < 0:
            raise v.ValidationError(f"offset must be >= 0, got {offset}")
        if not 1 <= max_nums <= MAX_PULL_NUMS:
            raise v.ValidationError(f"max_nums must be within 1..{MAX_PULL_NUMS}, got {max_nums}")
        ext = raw_pull_header(self.group, mq, offset, max_nums, expression, expression_type, block_timeout, max_bytes)
        resp = await self._instance.invoke_ok(await self._addr(mq), RC.PULL_MESSAGE, ext,
                                              timeout=self.pull_timeout + block_timeout, ok=tuple(_STATUS))
        return raw_result(resp, offset)

    async def raw_pipeline(self, mq: MessageQueue, expression: str = "*", *, expression_type: str = "TAG",
                           max_bytes: int = 0) -> RawPullPipeline:
        """Pipelined ``pull_raw``s of ``mq`` (``RawPullPipeline``), to its broker's master, connected to it
        where it answers (where not, ``send`` finds no connection until ``pull_raw`` makes one)."""
        self._check_running()
        addr = await self._addr(mq)
        try:
            await self._instance.remoting.connection(addr)
        except RemotingConnectError:
            pass
        return RawPullPipeline(self, mq, addr, expression, expression_type, max_bytes)

    async def pull_range(self, mq: MessageQueue, start: int, end: int, expression: str = "*",
                         batch: int = 32) -> list[MessageExt]:
        """Every message with ``start <= queue_offset < end`` (filtered by ``expression``), pulled in batches;
        stops early at the end of the queue."""
        out: list[MessageExt] = []
        offset = start
        while offset < end:
            res = await self.pull(mq, offset, min(batch, end - offset), expression)
            if res.status == PullStatus.OFFSET_ILLEGAL:
                if res.next_begin_offset > offset:  # messages before the queue's minimum are gone
                    offset = res.next_begin_offset
                    continue
                break
            out += [m for m in res.messages if m.queue_offset < end]
            if res.next_begin_offset <= offset or res.status == PullStatus.NO_NEW_MSG:
                break
            offset = res.next_begin_offset
        return out

    # committed offsets --------------------------------------------------------------------------
    async def commit(self, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` (the next one to read) as the group's position in ``mq`` on the broker."""
        self._check_running()
        await self._offsets.commit(mq, offset)

    async def commit_all(self, offsets: dict[MessageQueue, int] | Iterable[tuple[MessageQueue, int]]) -> None:
        items = offsets.items() if isinstance(offsets, dict) else offsets
        for mq, off in items:
            await self.commit(mq, off)

    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq``, None if it never committed."""
        self._check_running()
        off = await self._offsets.read(mq, from_store=True)
        if off == NOT_FOUND:
            return None
        if off < 0:
            raise MQClientError(10002, f"could not read the committed offset of {mq}")
        return off
