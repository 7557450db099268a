"""A few raw remoting requests for broker tests (no client library in between)."""

from __future__ import annotations

import time
from typing import Any

from tidalmq.common import fastjson
from tidalmq.common.message import encode_properties
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient


def send_cmd(topic: str, body: bytes, *, queue_id: int = 0, props: dict[str, str] | None = None,
             group: str = "PG") -> RemotingCommand:
    ext = {
        "a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties(props or {}), "j": "0", "k": "false",
    }
    return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=body)


def pull_cmd(topic: str, queue_id: int, offset: int, *, group: str = "CG", max_nums: int = 32,
             suspend_ms: int = 0, sub: str = "*", expression_type: str = "TAG",
             with_subscription: bool = True, sub_version: int = 0) -> RemotingCommand:
    flags = (4 if with_subscription else 0) | (2 if suspend_ms else 0)
    ext = {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "sysFlag": str(flags), "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms), "subscription": sub, "subVersion": str(sub_version),
        "expressionType": expression_type,
    }
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext)


async def runtime_info(client: RemotingClient, addr: str) -> dict[str, Any]:
    resp = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO), 5)
    return fastjson.loads(resp.body_bytes())["table"]


async def wait_max_offset(client: RemotingClient, addr: str, topic: str, queue_id: int, expected: int,
                          timeout: float = 10.0) -> None:
    """Wait until reput has dispatched ``expected`` entries into the queue."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        r = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={
            "topic": topic, "queueId": str(queue_id)}), 5)
        if int(r.ext_fields.get("offset", "-1")) >= expected:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{topic}:{queue_id} did not reach offset {expected} within {timeout}s")
        await asyncio.sleep(0.01)


async def pull_bodies(client: RemotingClient, addr: str, topic: str, queues: int) -> set[bytes]:
    """The bodies of every message stored in queues 0..queues-1 of ``topic`` on one broker, pulled from
    offset 0 to the end (a queue the broker refuses counts as empty)."""
    out: set[bytes] = set()
    for q in range(queues):
        offset = 0
        while True:
            resp = await client.invoke(addr, pull_cmd(topic, q, offset, max_nums=32), 10)
            if resp.code != ResponseCode.SUCCESS:
                break
            out |= {bytes(m.body) for m in records(resp.body_bytes())}
            offset = int(resp.ext_fields["nextBeginOffset"])
    return out


def run(coro, timeout: float = 60):
    """Run one scenario coroutine with a bound on its time."""
    import asyncio

    return asyncio.run(asyncio.wait_for(coro, timeout))


def records(body: bytes) -> list:
    """Every stored record in a PULL_MESSAGE / QUERY_MESSAGE body, decoded."""
    from tidalmq.common.record import decode_record

    out, pos = [], 0
    while pos < len(body):
        m = decode_record(body, pos)
        out.append(m)
        pos += m.store_size
    return out
