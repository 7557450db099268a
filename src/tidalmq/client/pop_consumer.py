"""PopConsumer: RocketMQ 5's pop consumption over remoting (the broker keeps the positions).

``receive`` pops messages that stay invisible to the group for ``invisible_time``; ``ack`` consumes one
for good; ``change_invisible`` postpones it. A message neither acked nor postponed comes back after its
invisible time, reconsume times + 1, and goes to ``%DLQ%<group>`` after the group's retryMaxTimes.
Each received message carries its receipt handle in the ``POP_CK`` property, built from the pop
response header as RocketMQ's client builds it (MQClientAPIImpl.processPopResponse). See docs/pop.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client import codec
from tidalmq.client import validators as v
from tidalmq.client.errors import MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.lifecycle import InstanceClient
from tidalmq.client.message import MessageExt
from tidalmq.common import naming as nm
from tidalmq.common import pop_handle as ph
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.tls import TlsOption

POP_CK = "POP_CK"  # MessageConst.PROPERTY_POP_CK
RETRY_TOPIC = "RETRY_TOPIC"
MAX_POP_NUMS = 32


def _route_topic(topic: str, route_topic: str | None) -> str:
    """The topic to route by: ``topic`` itself, or for a lite topic's queue, its parent (``route_topic``)."""
    if route_topic is None:
        v.check_topic(topic)
        return topic
    names = nm.parse_lite_queue(topic)
    if names is None or names[0] != route_topic:
        raise v.ValidationError(f"{topic[:200]!r} is not a lite topic queue of {route_topic[:200]!r}")
    return route_topic


class PopConsumer(InstanceClient):
    KIND = "pop consumer"

    def __init__(self, group: str, namesrv_addr: str | None = None, *, request_timeout: float = 10.0,
                 instance_name: str | None = None, credentials: SessionCredentials | None = None,
                 tls: TlsOption = None) -> None:
        v.check_group(group)
        self.group = group
        self.request_timeout = request_timeout
        self._instance = ClientInstance(namesrv_addr, instance_name=instance_name, credentials=credentials, tls=tls)
        self._state = "created"
        self._next_broker = itertools.count()

    async def _broker_addrs(self, topic: str) -> list[tuple[str, str]]:
        # The cached route (the instance refreshes it periodically): no NameServer round trip per pop.
        route = await self._instance.route(topic)
        names = sorted({mq.broker_name for mq in route.subscribe_queues()})
        out = []
        for name in names:
            addr = self._instance.master_addr(name)
            if addr is not None:
                out.append((name, addr))
        return out

    async def _addr(self, broker_name: str, topic: str) -> str:
        addr = self._instance.master_addr(broker_name)
        if addr is None:
            await self._instance.update_route(topic)
            addr = self._instance.master_addr(broker_name)
        if addr is None:
            raise MQClientError(10003, f"The broker[{broker_name}] not exist")
        return addr

    async def receive(self, topic: str, max_nums: int = 16, invisible_time: float = 30.0, *, expression: str = "*",
                      expression_type: str = "TAG", block_timeout: float = 0.0, order: bool = False,
                      queue_id: int = -1, consume_from_max: bool = False, route_topic: str | None = None
                      ) -> list[MessageExt]:
        """Pop up to ``max_nums`` messages of ``topic`` from one broker (brokers taken in turn), invisible
        to the group for ``invisible_time`` seconds. ``block_timeout`` > 0: wait that long for a message
        when none is there (long polling). ``order``: FIFO, a queue's next message only after the
        previous is acked. An empty list when nothing came. ``route_topic``: the topic whose route names
        the brokers, for a lite topic's queue ``%LMQ%$<parent>$<lite>`` (``topic``), which has none."""
        self._check_running()
        route_topic = _route_topic(topic, route_topic)
        if not 1 <= max_nums <= MAX_POP_NUMS:
            raise v.ValidationError(f"max_nums must be within 1..{MAX_POP_NUMS}, got {max_nums}")
        if invisible_time <= 0:
            raise v.ValidationError(f"invisible_time must be > 0, got {invisible_time}")
        brokers = await self._broker_addrs(route_topic)
        start = next(self._next_broker)
        for i in range(len(brokers)):
            name, addr = brokers[(start + i) % len(brokers)]
            # Long polling on the last broker only: the others are asked without waiting first.
            poll_ms = int(block_timeout * 1000) if i == len(brokers) - 1 else 0
            ext = bh.PopMessageRequestHeader(
                consumer_group=self.group, topic=topic, queue_id=queue_id, max_msg_nums=max_nums,
                invisible_time=int(invisible_time * 1000), poll_time=poll_ms, born_time=int(time.time() * 1000),
                init_mode=1 if consume_from_max else 0, exp_type=expression_type, exp=expression, order=order,
            )
            resp = await self._instance.invoke_ok(addr, RC.POP_MESSAGE, ext, timeout=self.request_timeout + block_timeout,
                                                  ok=(ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT,
                                                      ResponseCode.NO_MESSAGE))
            if resp.code == ResponseCode.SUCCESS and resp.body:
                return self._messages(bh.PopMessageResponseHeader.parse(resp.ext_fields), resp.body_bytes() or b"",
                                      name, topic)
        return []

    def _messages(self, h: bh.PopMessageResponseHeader, body: bytes, broker_name: str, topic: str) -> list[MessageExt]:
        msgs = codec.decode_messages(body, broker_name)
        starts = ph.parse_start_offset_info(h.start_offset_info)
        counts = ph.parse_order_count_info(h.order_count_info)
        pop_time, invisible, revive_qid = h.pop_time, h.invisible_time, h.revive_qid
        lite = nm.is_lite_queue(topic)
        for m in msgs:
            if lite:
                # Stored under its parent topic; the broker shows the LMQ's queue and offset, and it is
                # acked in the LMQ: its topic here is the LMQ's name.
                m.topic = topic
            key = ph.queue_key(m.topic, m.queue_id)
            flag = ph.retry_flag(m.topic)
            info = ph.ExtraInfo(starts.get(key, m.queue_offset), pop_time, invisible, revive_qid, flag, broker_name,
                                m.queue_id, m.queue_offset)
            m.properties[POP_CK] = info.build()
            if key in counts:
                m.reconsume_times = counts[key]
            if flag != ph.NORMAL:  # popped from the group's retry topic: shown under the topic it was sent to
                m.topic = m.properties.get(RETRY_TOPIC, topic)
        return msgs

    async def ack(self, msg: MessageExt) -> None:
        """Consume ``msg`` for good (before its invisible time runs out)."""
        self._check_running()
        await self._instance.invoke_ok(await self._addr(msg.broker_name, msg.topic), RC.ACK_MESSAGE,
                                       self._handle_ext(msg), timeout=self.request_timeout)

    async def ack_many(self, msgs: list[MessageExt]) -> None:
        """Ack several messages, one BATCH_ACK_MESSAGE per broker: each BatchAck covers the messages of
        one pop of one queue (same handle prefix), its offsets as a bit set from the pop's start offset."""
        self._check_running()
        groups: dict[tuple[str, str, ph.ExtraInfo], list[MessageExt]] = {}
        for m in msgs:
            info = ph.ExtraInfo.parse(self._handle_ext(m).extra_info)
            # the handle less its message offset: one BatchAck per pop of a queue
            groups.setdefault((m.broker_name, m.topic, dataclasses.replace(info, queue_offset=-1)), []).append(m)
        by_broker: dict[tuple[str, str], list[dict[str, object]]] = {}
        for (broker, topic, i), ms in groups.items():
            by_broker.setdefault((broker, topic), []).append({
                "c": self.group, "t": topic, "r": i.retry, "so": i.ck_queue_offset, "q": i.queue_id,
                "rq": i.revive_qid, "pt": i.pop_time, "it": i.invisible_time,
                "b": ph.bitset_of(i.ck_queue_offset, [m.queue_offset for m in ms])})
        for (broker, topic), acks in by_broker.items():
            body = json.dumps({"brokerName": broker, "acks": acks}).encode()
            await self._instance.invoke_ok(await self._addr(broker, topic), RC.BATCH_ACK_MESSAGE, body=body,
                                           timeout=self.request_timeout)

    async def change_invisible(self, msg: MessageExt, invisible_time: float) -> str:
        """Make ``msg`` visible again ``invisible_time`` seconds from now instead; its handle (POP_CK)
        is replaced by the new one, which is returned."""
        self._check_running()
        a = self._handle_ext(msg)
        ext = bh.ChangeInvisibleTimeRequestHeader(consumer_group=a.consumer_group, topic=a.topic, queue_id=a.queue_id,
                                                  extra_info=a.extra_info, offset=a.offset,
                                                  invisible_time=int(invisible_time * 1000))
        resp = await self._instance.invoke_ok(await self._addr(msg.broker_name, msg.topic),
                                              RC.CHANGE_MESSAGE_INVISIBLETIME, ext, timeout=self.request_timeout)
        h = bh.ChangeInvisibleTimeResponseHeader.parse(resp.ext_fields)
        old = ph.ExtraInfo.parse(msg.properties[POP_CK])
        new = dataclasses.replace(old, ck_queue_offset=msg.queue_offset, pop_time=h.pop_time,
                                  invisible_time=h.invisible_time, revive_qid=h.revive_qid)
        msg.properties[POP_CK] = new.build()
        return msg.properties[POP_CK]

    async def has_message(self, topic: str, block_timeout: float = 0.0, *, order: bool = False,
                          route_topic: str | None = None) -> bool:
        """NOTIFICATION: whether the group has something to pop from ``topic`` on any broker, waiting
        up to ``block_timeout`` seconds on the last one. ``route_topic``: as for ``receive``."""
        self._check_running()
        brokers = await self._broker_addrs(_route_topic(topic, route_topic))
        for i, (_name, addr) in enumerate(brokers):
            poll_ms = int(block_timeout * 1000) if i == len(brokers) - 1 else 0
            resp = await self._instance.invoke_ok(addr, RC.NOTIFICATION, bh.NotificationRequestHeader(
                consumer_group=self.group, topic=topic, queue_id=-1, poll_time=poll_ms,
                born_time=int(time.time() * 1000), order=order,
            ), timeout=self.request_timeout + block_timeout)
            if bh.NotificationResponseHeader.parse(resp.ext_fields).has_msg:
                return True
        return False

    def _handle_ext(self, msg: MessageExt) -> bh.AckMessageRequestHeader:
        handle = msg.properties.get(POP_CK)
        if not handle:
            raise v.ValidationError("the message has no receipt handle (POP_CK): was it received by pop?")
        return bh.AckMessageRequestHeader(consumer_group=self.group, topic=msg.topic, queue_id=msg.queue_id,
                                          extra_info=handle, offset=msg.queue_offset)
