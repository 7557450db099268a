"""The remoting face of pop: POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME and NOTIFICATION, with RocketMQ's header fields (PopMessageRequestHeader,
PopMessageResponseHeader, AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader/ResponseHeader,
NotificationRequestHeader/ResponseHeader). request_check has validated names and numbers already."""

from __future__ import annotations

import asyncio
import binascii
import logging
from collections.abc import Awaitable, Callable

from tidalmq.broker.pop.service import PopError, PopRequest, PopService
from tidalmq.common import fastjson
from tidalmq.common import pop_handle as xi
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol.header import NoHeader
from tidalmq.remoting.transport import Connection

log = logging.getLogger(__name__)


async def _answer(req: RemotingCommand, work: Callable[[], Awaitable[RemotingCommand]]) -> RemotingCommand:
    try:
        return await work()
    except PopError as e:
        return req.make_response(e.code, e.remark)
    except Exception as e:
        log.exception("pop request %d failed", req.code)
        return req.make_response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")


class PopProcessors:
    def __init__(self, service: PopService) -> None:
        self.service = service

    def pop(self, conn: Connection, req: RemotingCommand, h: bh.PopMessageRequestHeader) -> asyncio.Future[RemotingCommand]:
        pr = PopRequest(
            group=h.consumer_group, topic=h.topic, queue_id=h.queue_id, max_nums=h.max_msg_nums,
            invisible_time=h.invisible_time, poll_time=h.poll_time, init_mode=h.init_mode,
            exp_type=h.exp_type or "TAG", exp=h.exp or "*", order=h.order,
        )

        async def work() -> RemotingCommand:
            res = await self.service.pop(pr)
            out = bh.PopMessageResponseHeader(pop_time=res.pop_time, invisible_time=res.invisible_time,
                                              revive_qid=res.revive_qid, rest_num=res.rest_num)
            if not res.found:
                return req.make_response(ResponseCode.POLLING_TIMEOUT, "no new message", out.to_ext())
            out.start_offset_info = xi.build_start_offset_info(res.start_offsets)
            out.msg_offset_info = xi.build_msg_offset_info(res.msg_offsets)
            if res.order_counts:
                out.order_count_info = xi.build_start_offset_info(res.order_counts)
            return req.make_response(ResponseCode.SUCCESS, "FOUND", out.to_ext(), b"".join(res.records))

        return asyncio.ensure_future(_answer(req, work))

    def ack(self, conn: Connection, req: RemotingCommand, h: bh.AckMessageRequestHeader) -> asyncio.Future[RemotingCommand]:
        async def work() -> RemotingCommand:
            await self.service.ack(h.consumer_group, h.topic, h.queue_id, h.offset, h.extra_info)
            return req.make_response(ResponseCode.SUCCESS)

        return asyncio.ensure_future(_answer(req, work))

    def batch_ack(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> asyncio.Future[RemotingCommand]:
        async def work() -> RemotingCommand:
            try:
                acks = [(str(a["c"]), str(a["t"]), str(a.get("r") or "0"), int(a["q"]), int(a["so"]), int(a["pt"]),
                         int(a["it"]), xi.bitset_offsets(int(a["so"]), str(a["b"])))
                        for a in fastjson.loads(req.body_bytes() or b"{}").get("acks") or []]
            except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
                return req.make_response(ResponseCode.INVALID_PARAMETER, f"bad batch ack body: {e!r}")
            first: PopError | None = None
            for ack in acks:  # every good ack counts, whatever another one of the batch is
                try:
                    await self.service.batch_ack(*ack)
                except PopError as e:
                    first = first or e
            if first is not None:
                return req.make_response(first.code, f"{first.remark} (the other acks of the batch were taken)")
            return req.make_response(ResponseCode.SUCCESS)

        return asyncio.ensure_future(_answer(req, work))

    def change_invisible(self, conn: Connection, req: RemotingCommand,
                         h: bh.ChangeInvisibleTimeRequestHeader) -> asyncio.Future[RemotingCommand]:
        async def work() -> RemotingCommand:
            new = await self.service.change_invisible(h.consumer_group, h.topic, h.queue_id, h.offset, h.extra_info,
                                                      h.invisible_time)
            return req.make_response(ResponseCode.SUCCESS, None, bh.ChangeInvisibleTimeResponseHeader(
                pop_time=new.pop_time, invisible_time=new.invisible_time, revive_qid=new.revive_qid).to_ext())

        return asyncio.ensure_future(_answer(req, work))

    def notification(self, conn: Connection, req: RemotingCommand,
                     h: bh.NotificationRequestHeader) -> asyncio.Future[RemotingCommand]:
        async def work() -> RemotingCommand:
            has = await self.service.notification(h.consumer_group, h.topic, h.queue_id, h.poll_time, h.order)
            return req.make_response(ResponseCode.SUCCESS, None,
                                     bh.NotificationResponseHeader(has_msg=has, polling_full=False).to_ext())

        return asyncio.ensure_future(_answer(req, work))
