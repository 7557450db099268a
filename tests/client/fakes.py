"""A fake NameServer + Broker in one RemotingServer, for client tests that need scripted answers."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from tidalmq.common import fastjson
from tidalmq.common.msgid import encode_offset_msg_id
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import Connection, RemotingServer

# A handler answers now, later (a future: the transport sends its result when it is done), or never (None).
Handler = Callable[[Connection, RemotingCommand], RemotingCommand | asyncio.Future[RemotingCommand] | None]


class FakeCluster:
    """One server answering both as NameServer (routes) and as each of ``brokers`` (by name): all brokers
    share the address space of separate servers, one per broker."""

    def __init__(self, brokers: list[str], topic_queues: int = 2) -> None:
        self.brokers = brokers
        self.topic_queues = topic_queues
        self.namesrv = RemotingServer("127.0.0.1", 0)
        self.servers = {b: RemotingServer("127.0.0.1", 0) for b in brokers}
        self.requests: list[tuple[str, RemotingCommand]] = []
        self.handlers: dict[str, dict[int, Handler]] = {b: {} for b in brokers}
        self.connections: dict[str, list[Connection]] = {b: [] for b in brokers}
        self.offsets: dict[str, int] = {b: 0 for b in brokers}

    async def start(self) -> FakeCluster:
        self.namesrv.register_default(self._namesrv)
        await self.namesrv.start()
        for b, srv in self.servers.items():
            srv.register_default(functools.partial(self._broker, b))
            await srv.start()
        return self

    async def stop(self) -> None:
        await self.namesrv.stop()
        for srv in self.servers.values():
            await srv.stop()

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    def addr(self, broker: str) -> str:
        return f"127.0.0.1:{self.servers[broker].port}"

    def route(self) -> dict[str, Any]:
        return {
            "queueDatas": [{"brokerName": b, "readQueueNums": self.topic_queues, "writeQueueNums": self.topic_queues,
                            "perm": 6, "topicSysFlag": 0} for b in self.brokers],
            "brokerDatas": [{"cluster": "C", "brokerName": b, "brokerAddrs": {0: self.addr(b)}} for b in self.brokers],
        }

    def _namesrv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RC.GET_ROUTEINFO_BY_TOPIC:
            return cmd.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(self.route()))
        return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "fake")

    def _broker(self, b: str, conn: Connection, cmd: RemotingCommand) -> Any:
        if conn not in self.connections[b]:
            self.connections[b].append(conn)
        self.requests.append((b, cmd))
        h = self.handlers[b].get(cmd.code)
        if h is not None:
            return h(conn, cmd)
        if cmd.code in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
            return self.send_ok(b, cmd)
        if cmd.code in (RC.HEART_BEAT, RC.UNREGISTER_CLIENT):
            return cmd.make_response(ResponseCode.SUCCESS)
        if cmd.code == RC.END_TRANSACTION:
            return None
        return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "fake broker")

    def send_ok(self, b: str, cmd: RemotingCommand) -> RemotingCommand:
        off = self.offsets[b]
        self.offsets[b] += 100
        ext = {"msgId": encode_offset_msg_id(b"\x7f\x00\x00\x01", self.servers[b].port, off),
               "queueId": cmd.ext_fields.get("e", "0"), "queueOffset": str(off // 100)}
        return cmd.make_response(ResponseCode.SUCCESS, None, ext)

    def of_code(self, code: int, broker: str | None = None) -> list[RemotingCommand]:
        return [c for b, c in self.requests if c.code == code and (broker is None or b == broker)]

    async def wait_for(self, pred: Callable[[], Any], timeout: float = 5.0) -> Any:
        async def loop() -> Any:
            while True:
                v = pred()
                if v:
                    return v
                await asyncio.sleep(0.01)

        return await asyncio.wait_for(loop(), timeout)
