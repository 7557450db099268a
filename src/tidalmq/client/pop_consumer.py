"""PopConsumer: RocketMQ 5's pop consumption over remoting (the broker keeps the positions).

``receive`` pops messages that stay invisible to the group for ``invisible_time``; ``ack`` consumes one
for good; ``change_invisible`` postpones it. A message neither acked nor postponed comes back after its
invisible time, reconsume times + 1, and goes to ``%DLQ%<group>`` after the group's retryMaxTimes.
Each received message carries its receipt handle in the ``POP_CK`` property, built from the pop
response header as RocketMQ's client builds it (MQClientAPIImpl.processPopResponse). See docs/pop.md.
"""

from __future__ import annotations

import itertools
import time

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client import codec
from tidalmq.client import validators as v
from tidalmq.client.errors import IllegalStateError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import MessageExt
from tidalmq.common.naming import RETRY_GROUP_TOPIC_PREFIX
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.tls import TlsOption

POP_CK = "POP_CK"  # MessageConst.PROPERTY_POP_CK
RETRY_TOPIC = "RETRY_TOPIC"
MAX_POP_NUMS = 32


def _retry_flag(topic: str) -> str:
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "0"
    return "2" if "+" in topic else "1"


def _parse_info(text: str | None) -> dict[str, str]:
    """``retry queueId value`` entries of a pop response header, by ``retry@queueId``."""
    out: dict[str, str] = {}
    for item in filter(None, (text or "").split(";")):
        flag, qid, value = item.split(" ")
        out[f"{flag}@{qid}"] = value
    return out


class PopConsumer:
    def __init__(self, group: str, namesrv_addr: str | None = None, *, request_timeout: float = 10.0,
                 instance_name: str | None = None, credentials: SessionCredentials | None = None,
                 tls: TlsOption = None) -> None:
        v.check_group(group)
        self.group = group
        self.request_timeout = request_timeout
        self._instance = ClientInstance(namesrv_addr, instance_name=instance_name, credentials=credentials, tls=tls)
        self._state = "created"
        self._next_broker = itertools.count()

    async def start(self) -> None:
        if self._state == "running":
            return
        if self._state != "created":
            raise IllegalStateError(f"the pop consumer {self.group} has been shut down and cannot start again")
        await self._instance.start()
        self._state = "running"

    async def shutdown(self) -> None:
        if self._state == "running":
            await self._instance.shutdown()
        self._state = "shutdown"

    async def __aenter__(self) -> PopConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _check_running(self) -> None:
        if self._state != "running":
            raise IllegalStateError(f"the pop consumer {self.group} is not running")

    async def _broker_addrs(self, topic: str) -> list[tuple[str, str]]:
        route = await self._instance.update_route(topic)
        if route is None or not route.queue_datas:
            raise MQClientError(10005, f"Can not find Message Queue for this topic, {topic}")
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
                      queue_id: int = -1, consume_from_max: bool = False) -> list[MessageExt]:
        """Pop up to ``max_nums`` messages of ``topic`` from one broker (brokers taken in turn), invisible
        to the group for ``invisible_time`` seconds. ``block_timeout`` > 0: wait that long for a message
        when none is there (long polling). ``order``: FIFO, a queue's next message only after the
        previous is acked. An empty list when nothing came."""
        self._check_running()
        v.check_topic(topic)
        if not 1 <= max_nums <= MAX_POP_NUMS:
            raise v.ValidationError(f"max_nums must be within 1..{MAX_POP_NUMS}, got {max_nums}")
        if invisible_time <= 0:
            raise v.ValidationError(f"invisible_time must be > 0, got {invisible_time}")
        brokers = await self._broker_addrs(topic)
        start = next(self._next_broker)
        for i in range(len(brokers)):
            name, addr = brokers[(start + i) % len(brokers)]
            # Long polling on the last broker only: the others are asked without waiting first.
            poll_ms = int(block_timeout * 1000) if i == len(brokers) - 1 else 0
            ext = {
                "consumerGroup": self.group, "topic": topic, "queueId": str(queue_id), "maxMsgNums": str(max_nums),
                "invisibleTime": str(int(invisible_time * 1000)), "pollTime": str(poll_ms),
                "bornTime": str(int(time.time() * 1000)), "initMode": "1" if consume_from_max else "0",
                "expType": expression_type, "exp": expression, "order": "true" if order else "false",
            }
            resp = await self._instance.invoke_ok(addr, RC.POP_MESSAGE, ext, timeout=self.request_timeout + block_timeout,
                                                  ok=(ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT,
                                                      ResponseCode.NO_MESSAGE))
            if resp.code == ResponseCode.SUCCESS and resp.body:
                return self._messages(resp.ext_fields, resp.body_bytes() or b"", name, topic)
        return []

    def _messages(self, h: dict[str, str], body: bytes, broker_name: str, topic: str) -> list[MessageExt]:
        msgs = codec.decode_messages(body, broker_name)
        starts = _parse_info(h.get("startOffsetInfo"))
        counts = _parse_info(h.get("orderCountInfo"))
        pop_time, invisible, revive_qid = h["popTime"], h["invisibleTime"], h["reviveQid"]
        for m in msgs:
            flag = _retry_flag(m.topic)
            key = f"{flag}@{m.queue_id}"
            start = starts.get(key, str(m.queue_offset))
            m.properties[POP_CK] = " ".join((start, pop_time, invisible, revive_qid, flag, broker_name,
                                             str(m.queue_id), str(m.queue_offset)))
            if key in counts:
                m.reconsume_times = int(counts[key])
            if flag != "0":  # popped from the group's retry topic: shown under the topic it was sent to
                m.topic = m.properties.get(RETRY_TOPIC, topic)
        return msgs

    async def ack(self, msg: MessageExt) -> None:
        """Consume ``msg`` for good (before its invisible time runs out)."""
        self._check_running()
        await self._instance.invoke_ok(await self._addr(msg.broker_name, msg.topic), RC.ACK_MESSAGE,
                                       self._handle_ext(msg), timeout=self.request_timeout)

    async def change_invisible(self, msg: MessageExt, invisible_time: float) -> str:
        """Make ``msg`` visible again ``invisible_time`` seconds from now instead; its handle (POP_CK)
        is replaced by the new one, which is returned."""
        self._check_running()
        ext = self._handle_ext(msg)
        ext["invisibleTime"] = str(int(invisible_time * 1000))
        resp = await self._instance.invoke_ok(await self._addr(msg.broker_name, msg.topic),
                                              RC.CHANGE_MESSAGE_INVISIBLETIME, ext, timeout=self.request_timeout)
        h = resp.ext_fields
        old = msg.properties[POP_CK].split(" ")
        new = [str(msg.queue_offset), h["popTime"], h["invisibleTime"], h["reviveQid"], *old[4:]]
        msg.properties[POP_CK] = " ".join(new)
        return msg.properties[POP_CK]

    async def has_message(self, topic: str, block_timeout: float = 0.0, *, order: bool = False) -> bool:
        """NOTIFICATION: whether the group has something to pop from ``topic`` on any broker, waiting
        up to ``block_timeout`` seconds on the last one."""
        self._check_running()
        brokers = await self._broker_addrs(topic)
        for i, (_name, addr) in enumerate(brokers):
            poll_ms = int(block_timeout * 1000) if i == len(brokers) - 1 else 0
            resp = await self._instance.invoke_ok(addr, RC.NOTIFICATION, {
                "consumerGroup": self.group, "topic": topic, "queueId": "-1", "pollTime": str(poll_ms),
                "bornTime": str(int(time.time() * 1000)), "order": "true" if order else "false",
            }, timeout=self.request_timeout + block_timeout)
            if resp.ext_fields.get("hasMsg") == "true":
                return True
        return False

    def _handle_ext(self, msg: MessageExt) -> dict[str, str]:
        handle = msg.properties.get(POP_CK)
        if not handle:
            raise v.ValidationError("the message has no receipt handle (POP_CK): was it received by pop?")
        return {"consumerGroup": self.group, "topic": msg.topic, "queueId": str(msg.queue_id),
                "extraInfo": handle, "offset": str(msg.queue_offset)}
