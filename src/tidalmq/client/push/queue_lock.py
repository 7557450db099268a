"""Broker-side queue locks of orderly clustering consumers (RebalanceImpl.lock / unlock): a queue is
consumed only by the client holding its lock, so two members never consume it at once during a
rebalance."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from tidalmq.client.broker_addr import find_master_addr
from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import MessageQueue
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

LOCK_INTERVAL = 20.0  # lockMQPeriodically (RocketMQ's REBALANCE_LOCK_INTERVAL)


def mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def by_broker(mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    out: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        out.setdefault(mq.broker_name, []).append(mq)
    return out


class QueueLocker:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ per broker. ``supported`` turns False once a broker answers that
    it does not know the request: orderly consumption then relies on rebalance alone (documented)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.supported = True

    def _body(self, mqs: list[MessageQueue]) -> bytes:
        return fastjson.dumpb({"consumerGroup": self.group, "clientId": self.instance.client_id,
                               "mqSet": [mq_json(m) for m in mqs]})

    async def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """The queues of ``mqs`` this client holds now (all of them when the broker has no locks)."""
        if not self.supported:
            return set(mqs)
        out: set[MessageQueue] = set()
        for broker, group_mqs in by_broker(mqs).items():
            try:
                addr = await find_master_addr(self.instance, group_mqs[0])
                resp = await self.instance.invoke_ok(addr, RC.LOCK_BATCH_MQ, body=self._body(group_mqs))
            except MQBrokerError as e:
                if e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    log.info("broker %s has no LOCK_BATCH_MQ: orderly consumption relies on rebalance alone", broker)
                    self.supported = False
                    return set(mqs)
                log.warning("lock %s failed: %s", group_mqs, e)
                continue
            except MQClientError as e:
                log.warning("lock %s failed: %s", group_mqs, e)
                continue
            data = fastjson.loads(resp.body_bytes() or b"{}")
            for m in data.get("lockOKMQSet") or []:
                out.add(MessageQueue(m["topic"], m["brokerName"], int(m["queueId"])))
        return out

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        """Best effort (the broker's lock expires anyway): a failure is logged."""
        if not self.supported or not mqs:
            return
        for group_mqs in by_broker(mqs).values():
            try:
                addr = await find_master_addr(self.instance, group_mqs[0])
                await self.instance.invoke_ok(addr, RC.UNLOCK_BATCH_MQ, body=self._body(group_mqs), timeout=1.0)
            except MQClientError as e:
                log.info("unlock %s failed: %s", group_mqs, e)
