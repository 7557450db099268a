"""Half messages and their decisions (RocketMQ's TransactionalMessageBridge + TransactionalMessageServiceImpl).

A half message (``TRAN_MSG=true``, ``PGROUP``) is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real
topic and queue in ``REAL_TOPIC`` / ``REAL_QID``; no consumer subscribes there. A decision (commit, rollback,
or the check service giving up) is recorded as an op message in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 —
tag ``d``, body ``"<half queue offset>,"`` as RocketMQ writes it — and a commit also stores the message again
in its real topic and queue, in the same CommitLog append as its op.

A transaction is named by its half queue offset ``k``. What is known about the ``k`` s is kept small:

* ``check_offset`` (C): the half queue up to C has been examined by the check service;
* ``pending``: half messages below C that were due for a check and have no decision yet (check counts);
* ``resolved_ahead``: decisions on half messages at or above C (the checker has not reached them yet).

So ``k`` is open iff it is in ``pending``, or ``k >= C`` and not in ``resolved_ahead``; everything else
below C is resolved. The three are snapshotted to ``config/transactionState.json`` with the op queue offset
they include (O); after a crash the snapshot is loaded and the op queue replayed from O, so no decision is
forgotten and no transaction is committed twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidalmq.broker.message import InnerMessage, SendError
from tidalmq.common import message as mc
from tidalmq.common import naming as nm
from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import atomic_write, read_with_backup
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import StoredMessage
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.broker_headers import SendMessageResponseHeader
from tidalmq.remoting.transport import Connection

if TYPE_CHECKING:
    from tidalmq.broker.client.consumer_manager import ClientChannelInfo
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.topic.topic_config import TopicConfigManager
    from tidalmq.store.api import MessageStore

# How the broker stores a message it built itself, through the send path (SendMessageProcessor.store_internal).
StoreInternal = Callable[[RemotingCommand, InnerMessage], asyncio.Future[RemotingCommand]]

log = logging.getLogger(__name__)

HALF_QUEUE_ID = 0
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVE_TAG
OFFSET_SEPARATOR = ","
# Our addition to the op message: which decision it records (RocketMQ's op only says "done").
OP_DECISION = "TRAN_OP"
COMMIT, ROLLBACK, DISCARD = "commit", "rollback", "discard"
_PAST = {COMMIT: "committed", ROLLBACK: "rolled back", DISCARD: "rolled back after transactionCheckMax checks",
         "resolved": "resolved"}
# A transactional message is not scheduled (RocketMQ: "no schedule and batch support"; its Java client
# drops the delay level before sending): these are removed from a half message.
SCHEDULE_PROPERTIES = (mc.DELAY, mc.TIMER_DELAY_SEC, mc.TIMER_DELAY_MS, mc.TIMER_DELIVER_MS)
# Properties only the half message carries; the committed message goes without them.
HALF_ONLY_PROPERTIES = (mc.REAL_TOPIC, mc.REAL_QID, mc.TRAN_MSG, mc.TRANSACTION_CHECK_TIMES)
RECENT_DECISIONS = 65536  # decisions remembered by key for clearer "already resolved" answers
_STORED = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def past(decision: str) -> str:
    return _PAST.get(decision, decision)


def is_half_message(msg: InnerMessage) -> bool:
    """RocketMQ decides by the property (``Boolean.parseBoolean(TRAN_MSG)``), not by the sysflag."""
    text = msg.get_property(mc.TRAN_MSG)
    return text is not None and text.strip().lower() == "true"


def _delay_level(msg: InnerMessage) -> int:
    text = msg.get_property(mc.DELAY)
    try:
        return int(text) if text else 0
    except ValueError:
        return 0


class HalfMessageRewrite:
    markers = (mc.property_key(mc.TRAN_MSG),)  # and any message whose sysflag carries a transaction type
    """The send-path hook (first in line): a transactional message becomes a half message."""

    def __init__(self, service: TransactionalMessageService) -> None:
        self.service = service

    def __call__(self, msg: InnerMessage) -> None:
        if not is_half_message(msg):
            if sf.transaction_type(msg.sysflag) == sf.TRANSACTION_PREPARED_TYPE:
                # It would be stored in its topic but never enter the ConsumeQueue: invisible for ever.
                raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                                "the sysFlag marks a transactional half message but the TRAN_MSG property is not true")
            return
        if msg.reconsume_times > 0 and _delay_level(msg) > 0:
            # A consumed transactional message sent back for retry by an old client (RocketMQ's
            # "client under version 4.6.1" rule): an ordinary retry, not a new half message.
            msg.properties.pop(mc.TRAN_MSG, None)
            msg.sysflag = sf.with_transaction_type(msg.sysflag, sf.TRANSACTION_NOT_TYPE)
            return
        self.service.to_half(msg)


@dataclass(slots=True)
class PendingTx:
    """A half message the check service found due and still open."""

    phy_offset: int
    size: int
    checks: int = 0  # CHECK_TRANSACTION_STATE rounds so far
    due_ms: int = 0  # not checked before this time


@dataclass
class TransactionStats:
    half_messages: int = 0
    commits: int = 0
    rollbacks: int = 0
    discards: int = 0
    checks_sent: int = 0
    checks_without_producer: int = 0
    refused: int = 0
    # Completed check rounds: lets an observer know a round ran after a given moment (a half message due
    # by then and still open would have been checked in it).
    check_rounds: int = 0

    def snapshot(self) -> dict[str, int]:
        return dict(self.__dict__)


class TransactionalMessageService:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 producers: dict[str, dict[Connection, ClientChannelInfo]], store_internal: StoreInternal,
                 state_path: str | Path, clock: Callable[[], int] = _now_ms) -> None:
        """``producers``: the broker's producer groups and their connections (HEART_BEAT's producerDataSet)."""
        self.config = config
        self.store = store
        self.topics = topics
        self.producers = producers
        self.store_internal = store_internal
        self.store_host_bytes = host_bytes(config.broker_ip1)
        self.path = Path(state_path)
        self.clock = clock
        self.check_offset = 0
        self.op_offset = 0
        self.pending: dict[int, PendingTx] = {}
        self.resolved_ahead: dict[int, str] = {}
        self.inflight: dict[int, str] = {}
        self.recent: OrderedDict[int, str] = OrderedDict()
        self.stats = TransactionStats()
        self.rewrite = HalfMessageRewrite(self)
        self._dirty = False

    # half messages ----------------------------------------------------------------------------
    def to_half(self, msg: InnerMessage) -> None:
        """parseHalfMessageInner: park ``msg`` in the half topic, its real topic and queue in properties."""
        if self.config.reject_transaction_message:
            raise SendError(ResponseCode.NO_PERMISSION,
                            f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden")
        if not msg.get_property(mc.PGROUP):
            raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                            "a transactional message (TRAN_MSG=true) needs the PGROUP property: the producer group "
                            "the broker asks back about it")
        if msg.has_property(mc.TIMER_DEL_UNIQKEY):
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, "a timer cancel (TIMER_DEL_UNIQKEY) cannot be transactional")
        props = msg.properties
        for key in SCHEDULE_PROPERTIES:
            props.pop(key, None)
        props.pop(mc.TRANSACTION_CHECK_TIMES, None)
        uniq = props.get(mc.UNIQ_KEY)
        if uniq:
            props[mc.TRANSACTION_ID] = uniq
        props[mc.REAL_TOPIC] = msg.topic
        props[mc.REAL_QID] = str(msg.queue_id)
        msg.sysflag = sf.with_transaction_type(msg.sysflag, sf.TRANSACTION_NOT_TYPE)
        msg.topic = nm.TRANS_HALF_TOPIC
        msg.queue_id = HALF_QUEUE_ID
        self.stats.half_messages += 1

    def lookup_half(self, commit_log_offset: int) -> StoredMessage | None:
        if commit_log_offset < self.store.min_phy_offset or commit_log_offset >= self.store.max_phy_offset:
            return None
        msg = self.store.look_message_by_offset(commit_log_offset)
        if msg is None or msg.topic != nm.TRANS_HALF_TOPIC or msg.commit_log_offset != commit_log_offset:
            return None
        return msg

    # state ------------------------------------------------------------------------------------
    def decision_of(self, k: int) -> str | None:
        """None while transaction ``k`` is open; else its decision ("resolved" when no longer known)."""
        d = self.inflight.get(k) or self.resolved_ahead.get(k)
        if d is not None:
            return d
        if k in self.pending or k >= self.check_offset:
            return None
        return self.recent.get(k, "resolved")

    def _apply(self, k: int, decision: str) -> None:
        if self.pending.pop(k, None) is None and k >= self.check_offset:
            self.resolved_ahead[k] = decision
        self.recent[k] = decision
        self.recent.move_to_end(k)
        while len(self.recent) > RECENT_DECISIONS:
            self.recent.popitem(last=False)
        self._dirty = True

    def open_count(self) -> int:
        """Half messages without a decision (pending below the check offset, plus those not yet examined)."""
        ahead = max(0, self.store.queue_range(nm.TRANS_HALF_TOPIC, HALF_QUEUE_ID).max_offset - self.check_offset)
        return len(self.pending) + ahead - len(self.resolved_ahead)

    # END_TRANSACTION --------------------------------------------------------------------------
    def end_transaction(self, conn: Connection, req: RemotingCommand, *, group: str, tran_state_table_offset: int,
                        commit_log_offset: int, decision: str,
                        from_check: bool) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        msg = self.lookup_half(commit_log_offset)
        if msg is None:
            self.stats.refused += 1
            return req.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"Find prepared transaction message failed: no half message at commitLogOffset "
                                     f"{commit_log_offset}; nothing changed")
        k = msg.queue_offset
        where = f"half message {msg.properties.get(mc.UNIQ_KEY) or msg.msg_id} (commitLogOffset {commit_log_offset})"
        if k != tran_state_table_offset:
            self.stats.refused += 1
            return req.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"The transaction state table offset wrong: the {where} has tranStateTableOffset "
                                     f"{k}, not {tran_state_table_offset}; nothing changed")
        pgroup = msg.properties.get(mc.PGROUP, "")
        if group != pgroup:
            self.stats.refused += 1
            return req.make_response(ResponseCode.TRANSACTION_STATE_GROUP_WRONG,
                                     f"The producer group wrong: the {where} belongs to producer group {pgroup!r}, "
                                     f"not {group!r}; nothing changed")
        if from_check:
            conn_groups = {g for g, members in self.producers.items() if conn in members}
            if conn_groups and pgroup not in conn_groups:
                self.stats.refused += 1
                return req.make_response(ResponseCode.TRANSACTION_STATE_GROUP_WRONG,
                                         f"check-back answer refused: {conn.addr} is a producer of "
                                         f"{sorted(conn_groups)}, not of {pgroup!r} that owns the {where}")
        prior = self.decision_of(k)
        if prior is not None:
            self.stats.refused += 1
            return req.make_response(ResponseCode.TRANSACTION_FAILED,
                                     f"the {where} was already {past(prior)}: {decision} changes nothing")
        return self.resolve(req, k, msg, decision)

    def resolve(self, req: RemotingCommand, k: int, msg: StoredMessage, decision: str) -> asyncio.Future[RemotingCommand]:
        """Record ``decision`` on open transaction ``k``: an op message, and for a commit the real message
        (for a discard a copy in TRANS_CHECK_MAX_TIME_TOPIC), enqueued together so that one CommitLog
        append holds both."""
        loop = asyncio.get_running_loop()
        out: asyncio.Future[RemotingCommand] = loop.create_future()
        try:
            first = None
            if decision == COMMIT:
                first = self._committed_message(msg)
            elif decision == DISCARD:
                first = self._discarded_message(msg)
            op = self._op_message(k, decision)
            # Encode both before enqueueing either (a rewrite may refuse the real message).
            futs = []
            self.inflight[k] = decision
            if first is not None:
                futs.append(self.store_internal(req, first))
            futs.append(self.store_internal(req, op))
        except SendError as e:
            self.inflight.pop(k, None)
            out.set_result(req.make_response(e.code, f"{decision} of transaction {k} failed: {e.remark}"))
            return out
        remaining = [len(futs)]

        def one_done(_: asyncio.Future[RemotingCommand]) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                self._finish(req, k, msg, decision, futs, out)

        for f in futs:
            f.add_done_callback(one_done)
        return out

    def _finish(self, req: RemotingCommand, k: int, msg: StoredMessage, decision: str,
                futs: list[asyncio.Future[RemotingCommand]], out: asyncio.Future[RemotingCommand]) -> None:
        self.inflight.pop(k, None)
        resps = [f.result() if not f.cancelled() else req.make_response(ResponseCode.SYSTEM_ERROR, "cancelled")
                 for f in futs]
        failed = next((r for r in resps if r.code not in _STORED), None)
        if failed is None:
            self._apply(k, decision)
            if decision == COMMIT:
                self.stats.commits += 1
            elif decision == ROLLBACK:
                self.stats.rollbacks += 1
            else:
                self.stats.discards += 1
            stored = SendMessageResponseHeader.parse(resps[0].ext_fields)
            ext = SendMessageResponseHeader(msg_id=stored.msg_id).to_ext() if decision == COMMIT else None
            resp = req.make_response(ResponseCode.SUCCESS, None, ext)
        else:
            log.error("transaction %d (%s): %s failed: [%s] %s", k, msg.properties.get(mc.UNIQ_KEY), decision,
                      failed.code, failed.remark)
            self._reopen(k, msg)
            resp = req.make_response(failed.code, f"{decision} failed, the transaction stays open: {failed.remark}")
        if not out.done():
            out.set_result(resp)

    def _reopen(self, k: int, msg: StoredMessage) -> None:
        if k < self.check_offset and k not in self.pending:
            self.pending[k] = PendingTx(msg.commit_log_offset, msg.store_size, 0, self.clock())

    # messages the broker builds ---------------------------------------------------------------
    def _committed_message(self, msg: StoredMessage) -> InnerMessage:
        """endMessageTransaction: the half message back in its real topic and queue, sysflag COMMIT."""
        props = dict(msg.properties)
        topic = props.get(mc.REAL_TOPIC)
        if not topic:
            raise SendError(ResponseCode.SYSTEM_ERROR, f"the half message at {msg.commit_log_offset} has no REAL_TOPIC")
        try:
            queue_id = int(props.get(mc.REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        for key in HALF_ONLY_PROPERTIES:
            props.pop(key, None)
        return InnerMessage(topic, queue_id, msg.body, msg.flag, "",
                            sf.with_transaction_type(msg.sysflag, sf.TRANSACTION_COMMIT_TYPE),
                            msg.born_timestamp, host_bytes(msg.born_host[0]), msg.born_host[1], msg.reconsume_times,
                            prepared_transaction_offset=msg.commit_log_offset, _props=props)

    def _discarded_message(self, msg: StoredMessage) -> InnerMessage:
        """resolveDiscardMsg: a copy in TRANS_CHECK_MAX_TIME_TOPIC queue 0 for the operator to find."""
        self.topics.create_system_like(nm.TRANS_CHECK_MAX_TIME_TOPIC, 1, 6)
        props = dict(msg.properties)
        props.pop(mc.TRAN_MSG, None)  # or the send path would take it for a new half message
        props[mc.TRANSACTION_CHECK_TIMES] = str(self.pending[msg.queue_offset].checks
                                                 if msg.queue_offset in self.pending else 0)
        return InnerMessage(nm.TRANS_CHECK_MAX_TIME_TOPIC, 0, msg.body, msg.flag, "", msg.sysflag,
                            msg.born_timestamp, host_bytes(msg.born_host[0]), msg.born_host[1], msg.reconsume_times,
                            _props=props)

    def _op_message(self, k: int, decision: str) -> InnerMessage:
        props = {mc.TAGS: REMOVE_TAG, OP_DECISION: decision}
        return InnerMessage(nm.TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, f"{k}{OFFSET_SEPARATOR}".encode(), 0, "", 0,
                            self.clock(), self.store_host_bytes, self.config.listen_port, _props=props)

    def internal_request(self) -> RemotingCommand:
        return RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields={})

    # persistence ------------------------------------------------------------------------------
    def load(self) -> None:
        raw = read_with_backup(self.path)
        if raw:
            d = json.loads(raw)
            self.check_offset = int(d.get("checkOffset", 0))
            self.op_offset = int(d.get("opOffset", 0))
            self.pending = {int(k): PendingTx(int(p), int(s), int(c), int(due))
                            for k, p, s, c, due in d.get("pending", [])}
            self.resolved_ahead = {int(k): str(v) for k, v in (d.get("resolvedAhead") or {}).items()}
        replayed = self._replay_ops()
        log.info("transactions: check offset %d, %d pending, %d decided ahead, %d op messages replayed",
                 self.check_offset, len(self.pending), len(self.resolved_ahead), replayed)

    def _replay_ops(self) -> int:
        if not self.store.has_queue(nm.TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID):
            return 0
        rng = self.store.queue_range(nm.TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        off = max(self.op_offset, rng.min_offset)
        n = 0
        while off < rng.max_offset:
            e = self.store.queue_entry(nm.TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, off)
            off += 1
            if e is None:
                continue
            msg = self.store.look_message_by_offset(e[0], e[1])
            if msg is None or msg.topic != nm.TRANS_OP_HALF_TOPIC:
                continue
            decision = msg.properties.get(OP_DECISION, "resolved")
            for part in bytes(msg.body).decode("utf-8", "replace").split(OFFSET_SEPARATOR):
                part = part.strip()
                if part.lstrip("-").isdigit():
                    self._apply(int(part), decision)
            n += 1
        self.op_offset = off
        self._dirty = True
        return n

    def persist(self) -> None:
        # Decisions still being written count as made: their op messages sit at or above ``opOffset``
        # (the op queue's next offset now), so a replay after a crash finds them if they were stored.
        op_next = self.store.next_queue_offset(nm.TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        resolved = dict(self.resolved_ahead)
        for k, d in self.inflight.items():
            if k >= self.check_offset:
                resolved[k] = d
        state = {
            "checkOffset": self.check_offset,
            "opOffset": max(self.op_offset, op_next),
            "pending": [[k, t.phy_offset, t.size, t.checks, t.due_ms]
                        for k, t in self.pending.items() if k not in self.inflight],
            "resolvedAhead": {str(k): d for k, d in sorted(resolved.items())},
        }
        atomic_write(self.path, json.dumps(state, separators=(",", ":")).encode())
        self._dirty = False

    def persist_if_dirty(self) -> None:
        if self._dirty:
            self.persist()

    def runtime_info(self) -> dict[str, str]:
        info = {f"transaction.{k}": str(v) for k, v in self.stats.snapshot().items()}
        info["transaction.checkOffset"] = str(self.check_offset)
        info["transaction.pendingChecked"] = str(len(self.pending))
        info["transaction.open"] = str(self.open_count())
        return info
