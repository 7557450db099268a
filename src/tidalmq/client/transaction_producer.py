"""TransactionProducer (TransactionMQProducer) and its TransactionListener: half messages, END_TRANSACTION,
and the answers to the broker's CHECK_TRANSACTION_STATE."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tidalmq.client import codec
from tidalmq.client.errors import MQClientError
from tidalmq.client.message import (
    Message,
    MessageExt,
    SendResult,
    SendStatus,
    TransactionSendResult,
    TransactionState,
)
from tidalmq.client.producer import Producer
from tidalmq.client.send_request import TIMER_PROPERTIES
from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol.header import RequestError
from tidalmq.remoting.transport import Connection

log = logging.getLogger(__name__)

class TransactionListener(Protocol):
    """The application's side of a transactional send. Either method may be a coroutine function."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> TransactionState | Awaitable[TransactionState]:
        """Run the local transaction after the half message is stored; return its outcome."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> TransactionState | Awaitable[TransactionState]:
        """Answer the broker's question about a half message whose outcome it never learned."""
        ...


_END_TYPE = {
    TransactionState.COMMIT: sf.TRANSACTION_COMMIT_TYPE,
    TransactionState.ROLLBACK: sf.TRANSACTION_ROLLBACK_TYPE,
    TransactionState.UNKNOWN: sf.TRANSACTION_NOT_TYPE,
}


async def _call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


class TransactionProducer(Producer):
    """Transactional messages: a half message (``TRAN_MSG=true``, ``PGROUP``) is stored but invisible,
    the local transaction runs, then END_TRANSACTION commits or rolls it back. The broker asks about
    half messages left unresolved with CHECK_TRANSACTION_STATE; ``check_local_transaction`` answers."""

    def __init__(self, group: str, listener: TransactionListener, namesrv_addr: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.listener = listener
        self._checks: set[asyncio.Task[Any]] = set()

    async def send_in_transaction(self, msg: Message, arg: Any = None, *, timeout: float | None = None) -> TransactionSendResult:
        self._check_running()
        for prop in (mc.DELAY, *TIMER_PROPERTIES):  # a half message is never delayed (as the Java client)
            msg.properties.pop(prop, None)
        msg.properties[mc.TRAN_MSG] = "true"
        msg.properties[mc.PGROUP] = self.group
        result = await self.send(msg, timeout=timeout)
        state = TransactionState.UNKNOWN
        error: BaseException | None = None
        if result.status == SendStatus.SEND_OK:
            result.transaction_id = result.transaction_id or result.msg_id
            msg.properties[mc.TRANSACTION_ID] = result.transaction_id
            try:
                out = await _call_maybe_async(self.listener.execute_local_transaction, msg, arg)
                state = TransactionState(out) if out is not None else TransactionState.UNKNOWN
            except Exception as e:
                log.warning("local transaction of %s failed: %s", result.msg_id, e)
                error = e
        else:
            state = TransactionState.ROLLBACK
        try:
            await self.end_transaction(result, state, error)
        except MQClientError as e:
            log.warning("END_TRANSACTION of %s failed (the broker will check back): %s", result.msg_id, e)
        return TransactionSendResult(result, state)

    async def end_transaction(self, result: SendResult, state: TransactionState,
                              error: BaseException | None = None) -> None:
        """END_TRANSACTION (oneway) to the broker that stored the half message."""
        _, _, commit_offset = decode_offset_msg_id(result.offset_msg_id)
        route, _ = await self._queues(result.message_queue.topic)
        addr = self._broker_addr(route, result.message_queue)
        ext = bh.EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=result.queue_offset, commit_log_offset=commit_offset,
            commit_or_rollback=_END_TYPE[state], from_transaction_check=False, msg_id=result.msg_id,
            transaction_id=result.transaction_id or None).to_ext()
        remark = f"executeLocalTransactionBranch exception: {error!r}" if error is not None else None
        await self._instance.invoke_oneway(addr, RemotingCommand(code=RC.END_TRANSACTION, ext_fields=ext, remark=remark))

    def on_check_transaction_state(self, conn: Connection, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE from a broker (server→client, oneway): answer in a task."""
        if self._state != "running":
            return None
        task = asyncio.ensure_future(self._check(conn, cmd))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None

    async def _check(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            h = bh.CheckTransactionStateRequestHeader.parse(cmd.ext_fields)
        except RequestError as e:
            log.warning("CHECK_TRANSACTION_STATE from %s refused: %s", conn.addr, e)
            return
        msgs = codec.decode_messages(cmd.body_bytes())
        if not msgs:
            log.warning("CHECK_TRANSACTION_STATE without a message body from %s", conn.addr)
            return
        msg = msgs[0]
        uniq = msg.properties.get(mc.UNIQ_KEY) or msg.offset_msg_id
        tid = h.transaction_id or uniq
        msg.properties.setdefault(mc.TRANSACTION_ID, tid)
        group = msg.properties.get(mc.PGROUP) or self.group
        error: BaseException | None = None
        try:
            out = await _call_maybe_async(self.listener.check_local_transaction, msg)
            state = TransactionState(out) if out is not None else TransactionState.UNKNOWN
        except Exception as e:
            log.warning("check_local_transaction of %s failed: %s", uniq, e)
            state, error = TransactionState.UNKNOWN, e
        tso, clo = h.tran_state_table_offset, h.commit_log_offset
        ext = bh.EndTransactionRequestHeader(
            producer_group=group,
            tran_state_table_offset=msg.queue_offset if tso is None else tso,
            commit_log_offset=msg.commit_log_offset if clo is None else clo,
            commit_or_rollback=_END_TYPE[state], from_transaction_check=True, msg_id=uniq, transaction_id=tid,
        ).to_ext()
        remark = f"checkLocalTransactionState Exception: {error!r}" if error is not None else None
        conn.invoke_oneway(self._instance.sign(RemotingCommand(code=RC.END_TRANSACTION, ext_fields=ext, remark=remark)))

    async def shutdown(self) -> None:
        if self._checks:
            await asyncio.wait(list(self._checks), timeout=self.send_timeout)
        await super().shutdown()
