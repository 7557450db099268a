"""END_TRANSACTION (EndTransactionProcessor): a producer's commit or rollback of a half message, after its
local transaction or in answer to CHECK_TRANSACTION_STATE (``fromTransactionCheck``).

Official clients send it oneway, so its answer only reaches a caller that asked for one; every refusal
still changes nothing and is logged with its reason.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from tidalmq.broker.transaction.half_service import COMMIT, ROLLBACK
from tidalmq.common import sysflag as sf
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import EndTransactionRequestHeader
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.transaction.half_service import TransactionalMessageService

log = logging.getLogger(__name__)

_DECISIONS = {sf.TRANSACTION_COMMIT_TYPE: COMMIT, sf.TRANSACTION_ROLLBACK_TYPE: ROLLBACK}


class EndTransactionProcessor:
    def __init__(self, *, config: BrokerConfig, transactions: TransactionalMessageService) -> None:
        self.config, self.transactions = config, transactions

    def process(self, conn: Connection, req: RemotingCommand,
                h: EndTransactionRequestHeader) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        if self.config.broker_role == "SLAVE":
            return req.make_response(ResponseCode.SLAVE_NOT_AVAILABLE, "the broker is a slave: end transaction is forbidden")
        group, tso, clo, kind = h.producer_group, h.tran_state_table_offset, h.commit_log_offset, h.commit_or_rollback
        from_check = h.from_transaction_check
        if kind == sf.TRANSACTION_NOT_TYPE:
            # UNKNOW: the producer does not know yet; the check service will ask again.
            log.debug("END_TRANSACTION UNKNOW from %s for %s (fromTransactionCheck=%s)", conn.addr, clo, from_check)
            return req.make_response(ResponseCode.SUCCESS, "transaction state UNKNOW: nothing changed, the broker will check back")
        decision = _DECISIONS.get(kind)
        if decision is None:
            return req.make_response(ResponseCode.SYSTEM_ERROR, f"illegal commitOrRollback {kind}: expected 8 (commit) or 12 (rollback)")
        resp = self.transactions.end_transaction(conn, req, group=group, tran_state_table_offset=tso, commit_log_offset=clo,
                                              decision=decision, from_check=from_check)
        if isinstance(resp, RemotingCommand) and resp.code != ResponseCode.SUCCESS:
            log.warning("END_TRANSACTION %s from %s (group %s, fromTransactionCheck=%s) refused: %s",
                        decision, conn.addr, group, from_check, resp.remark)
        return resp
