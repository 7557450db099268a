"""The check-back service (RocketMQ's TransactionalMessageCheckService).

Every ``transactionCheckInterval`` ms one round runs on the broker's event loop:

1. scan: walk the half queue from the check offset; half messages already decided are passed over, the
   first one stored less than ``transactionTimeOut`` ms ago stops the walk (the queue is in store order),
   the others join ``pending``. A message with ``CHECK_IMMUNITY_TIME_IN_SECONDS`` waits that long instead
   (never less than the timeout) without holding up the walk.
2. check: each due pending message is sent to one live producer of its group (``PGROUP``) as
   CHECK_TRANSACTION_STATE, oneway, with ``TRANSACTION_CHECK_TIMES``; the producer answers with
   END_TRANSACTION ``fromTransactionCheck=true``. A round counts even when no producer of the group is
   connected (as RocketMQ counts it). After ``transactionCheckMax`` checks the message is rolled back:
   an op message records it and a copy goes to ``TRANS_CHECK_MAX_TIME_TOPIC``.
3. the state is persisted if it changed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from tidalmq.broker.transaction.half_service import (
    DISCARD,
    HALF_QUEUE_ID,
    PendingTx,
    TransactionalMessageService,
)
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import StoredMessage, encode_record
from tidalmq.remoting.codes import RequestCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import CheckTransactionStateRequestHeader
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig

log = logging.getLogger(__name__)

MAX_SCAN_PER_ROUND = 100_000
MIN_INTERVAL_MS = 10


class TransactionCheckService:
    def __init__(self, service: TransactionalMessageService, config: BrokerConfig) -> None:
        self.service = service
        self.config = config
        self.store = service.store
        self._rr = 0
        self._wake: asyncio.Event | None = None

    @property
    def interval_ms(self) -> int:
        return max(MIN_INTERVAL_MS, self.config.transaction_check_interval)

    async def run(self) -> None:
        self._wake = asyncio.Event()
        while True:
            try:
                self.run_round()
            except Exception:
                log.exception("transaction check round failed")
            try:  # not wait_for: on 3.11 it drops a cancel that meets a wakeup() (CPython gh-86296)
                async with asyncio.timeout(self.interval_ms / 1000.0):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()

    def wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def run_round(self, now: int | None = None) -> None:
        now = self.service.clock() if now is None else now
        self.scan(now)
        self.check(now)
        self.service.persist_if_dirty()
        self.service.stats.check_rounds += 1

    # 1. scan ----------------------------------------------------------------------------------
    def scan(self, now: int) -> None:
        svc = self.service
        rng = self.store.queue_range(nm.TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        c = max(svc.check_offset, rng.min_offset)
        end = min(rng.max_offset, c + MAX_SCAN_PER_ROUND)
        timeout = max(0, self.config.transaction_time_out)
        while c < end:
            if svc.resolved_ahead.pop(c, None) is not None or c in svc.inflight:
                c += 1  # decided (a failing decision re-opens itself into pending)
                continue
            e = self.store.queue_entry(nm.TRANS_HALF_TOPIC, HALF_QUEUE_ID, c)
            if e is None:
                break
            phy, size, _ = e
            msg = self.store.look_message_by_offset(phy, size)
            if msg is None:
                log.warning("half message %d at %d is no longer readable (retention?): skipped", c, phy)
                c += 1
                continue
            immunity, custom = timeout, False
            text = msg.properties.get(mc.CHECK_IMMUNITY_TIME_IN_SECONDS)
            if text:
                try:
                    immunity, custom = max(int(text.strip()) * 1000, timeout), True
                except ValueError:
                    pass
            due = msg.store_timestamp + immunity
            if due > now and not custom:
                break
            svc.pending[c] = PendingTx(phy, size, 0, due)
            c += 1
        if c != svc.check_offset:
            svc.check_offset = c
            svc._dirty = True

    # 2. check ---------------------------------------------------------------------------------
    def check(self, now: int) -> None:
        svc = self.service
        max_checks = self.config.transaction_check_max
        next_due = now + self.interval_ms * 9 // 10
        for k in list(svc.pending):
            tx = svc.pending.get(k)
            if tx is None or tx.due_ms > now or k in svc.inflight:
                continue
            msg = self.store.look_message_by_offset(tx.phy_offset, tx.size)
            if msg is None or msg.topic != nm.TRANS_HALF_TOPIC:
                log.warning("half message %d at %d is no longer readable (retention?): dropped", k, tx.phy_offset)
                del svc.pending[k]
                svc._dirty = True
                continue
            if tx.checks >= max_checks:
                log.warning("half message %s (topic %s, group %s) is still undecided after %d checks: rolled back",
                            msg.properties.get(mc.UNIQ_KEY), msg.properties.get(mc.REAL_TOPIC),
                            msg.properties.get(mc.PGROUP), tx.checks)
                svc.resolve(svc.internal_request(), k, msg, DISCARD)
                continue
            tx.checks += 1
            tx.due_ms = next_due
            svc._dirty = True
            conn = self.pick_producer(msg.properties.get(mc.PGROUP, ""))
            if conn is None:
                svc.stats.checks_without_producer += 1
                continue
            if conn.invoke_oneway(self.check_request(k, tx, msg)):
                svc.stats.checks_sent += 1
            else:
                svc.stats.checks_without_producer += 1

    def pick_producer(self, group: str) -> Connection | None:
        """A live producer connection of ``group``, in turn (getAvailableChannel)."""
        members = self.service.producers.get(group)
        if not members:
            return None
        conns = [c for c in members if c.is_open]
        if not conns:
            return None
        self._rr += 1
        return conns[self._rr % len(conns)]

    def check_request(self, k: int, tx: PendingTx, msg: StoredMessage) -> RemotingCommand:
        """CHECK_TRANSACTION_STATE: the header names the half message, the body is the message as its
        producer sent it (real topic and queue), with TRANSACTION_CHECK_TIMES."""
        props = dict(msg.properties)
        props[mc.TRANSACTION_CHECK_TIMES] = str(tx.checks)
        topic = props.get(mc.REAL_TOPIC) or msg.topic
        try:
            queue_id = int(props.get(mc.REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        body = encode_record(
            topic=topic, queue_id=queue_id, body=msg.body, properties=props, flag=msg.flag, sysflag=msg.sysflag,
            born_timestamp=msg.born_timestamp, born_host=host_bytes(msg.born_host[0]), born_port=msg.born_host[1],
            store_host=msg.store_host_bytes, store_port=msg.store_host[1], reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset, queue_offset=k,
            physical_offset=msg.commit_log_offset, store_timestamp=msg.store_timestamp, body_crc=msg.body_crc,
        )
        uniq = props.get(mc.UNIQ_KEY) or None
        ext = CheckTransactionStateRequestHeader(
            topic=msg.topic, tran_state_table_offset=k, commit_log_offset=msg.commit_log_offset,
            offset_msg_id=msg.msg_id, broker_name=self.config.broker_name, msg_id=uniq, transaction_id=uniq,
        ).to_ext()
        return RemotingCommand(code=RequestCode.CHECK_TRANSACTION_STATE, ext_fields=ext, body=bytes(body))
