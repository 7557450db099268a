"""LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: the broker-side queue locks that orderly push consumers take before
they consume a queue (RocketMQ's RebalanceLockManager).

A lock belongs to one client id of a group and lapses when its holder has not renewed it for
``max_live_ms`` (RocketMQ: 60 s, ``rocketmq.broker.rebalance.lockMaxLiveTime``); clients renew their locks
every 20 s.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from tidalmq.common import fastjson
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from tidalmq.remoting.transport import Connection

MqKey = tuple[str, str, int]  # topic, brokerName, queueId


def _mq_keys(body: dict[str, Any]) -> list[MqKey]:
    return [(str(mq.get("topic", "")), str(mq.get("brokerName", "")), int(mq.get("queueId", 0)))
            for mq in body.get("mqSet") or []]


def _mq_json(k: MqKey) -> dict[str, Any]:
    return {"topic": k[0], "brokerName": k[1], "queueId": k[2]}


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = 60_000, clock: Any = time.monotonic) -> None:
        self.max_live = max_live_ms / 1000.0
        self._clock = clock
        self._locks: dict[str, dict[MqKey, tuple[str, float]]] = {}
        self._mutex = threading.Lock()

    def try_lock_batch(self, group: str, client_id: str, mqs: list[MqKey]) -> list[MqKey]:
        now = self._clock()
        locked = []
        with self._mutex:
            table = self._locks.setdefault(group, {})
            for mq in mqs:
                holder = table.get(mq)
                if holder is None or holder[0] == client_id or now - holder[1] > self.max_live:
                    table[mq] = (client_id, now)
                    locked.append(mq)
        return locked

    def unlock_batch(self, group: str, client_id: str, mqs: list[MqKey]) -> None:
        with self._mutex:
            table = self._locks.get(group)
            if not table:
                return
            for mq in mqs:
                holder = table.get(mq)
                if holder is not None and holder[0] == client_id:
                    del table[mq]

    # request processors -----------------------------------------------------------------------
    def lock_batch_mq(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        try:
            body = fastjson.loads(req.body_bytes() or b"{}")
            mqs = _mq_keys(body)
        except (ValueError, TypeError) as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"illegal lock request body: {e}")
        ok = self.try_lock_batch(str(body.get("consumerGroup", "")), str(body.get("clientId", "")), mqs)
        return req.make_response(ResponseCode.SUCCESS, None,
                                 body=fastjson.dumpb({"lockOKMQSet": [_mq_json(k) for k in ok]}))

    def unlock_batch_mq(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        try:
            body = fastjson.loads(req.body_bytes() or b"{}")
            mqs = _mq_keys(body)
        except (ValueError, TypeError) as e:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"illegal unlock request body: {e}")
        self.unlock_batch(str(body.get("consumerGroup", "")), str(body.get("clientId", "")), mqs)
        return req.make_response(ResponseCode.SUCCESS)
