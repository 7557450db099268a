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
from tidalmq.remoting.transport import Connection

log = logging.getLogger(__name__)


def _bool(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


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

    def pop(self, conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        h = req.ext_fields
        pr = PopRequest(
            group=h["consumerGroup"], topic=h["topic"], queue_id=int(h["queueId"]), max_nums=int(h["maxMsgNums"]),
            invisible_time=int(h["invisibleTime"]), poll_time=int(h.get("pollTime") or 0),
            init_mode=int(h.get("initMode") or 0), exp_type=h.get("expType") or "TAG", exp=h.get("exp") or "*",
            order=_bool(h.get("order")),
        )

        async def work() -> RemotingCommand:
            res = await self.service.pop(pr)
            ext = {"popTime": str(res.pop_time), "invisibleTime": str(res.invisible_time),
                   "reviveQid": str(res.revive_qid), "restNum": str(res.rest_num)}
            if not res.found:
                return req.make_response(ResponseCode.POLLING_TIMEOUT, "no new message", ext)
            ext["startOffsetInfo"] = xi.build_start_offset_info(res.start_offsets)
            ext["msgOffsetInfo"] = xi.build_msg_offset_info(res.msg_offsets)
            if res.order_counts:
                ext["orderCountInfo"] = xi.build_start_offset_info(res.order_counts)
            return req.make_response(ResponseCode.SUCCESS, "FOUND", ext, b"".join(res.records))

        return asyncio.ensure_future(_answer(req, work))

    def ack(self, conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        h = req.ext_fields

        async def work() -> RemotingCommand:
            await self.service.ack(h["consumerGroup"], h["topic"], int(h["queueId"]), int(h["offset"]), h["extraInfo"])
            return req.make_response(ResponseCode.SUCCESS)

        return asyncio.ensure_future(_answer(req, work))

    def batch_ack(self, conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
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

    def change_invisible(self, conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        h = req.ext_fields

        async def work() -> RemotingCommand:
            new = await self.service.change_invisible(h["consumerGroup"], h["topic"], int(h["queueId"]),
                                                      int(h["offset"]), h["extraInfo"], int(h["invisibleTime"]))
            return req.make_response(ResponseCode.SUCCESS, None, {
                "popTime": str(new.pop_time), "invisibleTime": str(new.invisible_time),
                "reviveQid": str(new.revive_qid)})

        return asyncio.ensure_future(_answer(req, work))

    def notification(self, conn: Connection, req: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        h = req.ext_fields

        async def work() -> RemotingCommand:
            has = await self.service.notification(h["consumerGroup"], h["topic"], int(h["queueId"]),
                                                  int(h.get("pollTime") or 0), _bool(h.get("order")))
            return req.make_response(ResponseCode.SUCCESS, None, {"hasMsg": "true" if has else "false",
                                                                  "pollingFull": "false"})

        return asyncio.ensure_future(_answer(req, work))
