"""A send load that runs until the broker dies, and the read-back that checks what survived.

Shared by the process-crash tests (tests/broker/test_crash.py) and the power-cut tests (tests/faults/).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from tests.broker.rawclient import pull_cmd, send_cmd
from tidalmq.common.record import decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

QUEUES = 4

# One message of the load: its i -> (its key, the send request).
Sender = Callable[[int], tuple[str, RemotingCommand]]


def plain_sender(topic: str, prefix: str = "k") -> Sender:
    """Message i to queue i % QUEUES of ``topic``, with key ``<prefix><i>``."""
    return lambda i: (f"{prefix}{i}", send_cmd(topic, f"body-{i}".encode(), queue_id=i % QUEUES,
                                               props={"KEYS": f"{prefix}{i}"}))


async def create_topic(addr: str, topic: str, queues: int = QUEUES) -> None:
    c = RemotingClient()
    try:
        r = await c.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}), 10)
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await c.close()


async def load_until_killed(addr: str, sender: Sender, kill_after: float, kill: Callable[[], None],
                            window: int = 64) -> tuple[dict[str, float], int, float]:
    """Pipelined sends until ``kill()`` runs, ``kill_after`` seconds in. Returns the acknowledged keys with
    the time.monotonic() each acknowledgement arrived, the number of sends attempted, and the time
    ``kill()`` was called."""
    c = RemotingClient()
    conn = await c.connection(addr)
    acked: dict[str, float] = {}
    attempted = 0
    loop = asyncio.get_running_loop()
    killed: asyncio.Future[float] = loop.create_future()

    def do_kill() -> None:
        at = time.monotonic()
        kill()
        killed.set_result(at)

    loop.call_later(kill_after, do_kill)
    pending: set[asyncio.Future[RemotingCommand]] = set()

    def done(fut: asyncio.Future[RemotingCommand], key: str) -> None:
        pending.discard(fut)
        if not fut.cancelled() and fut.exception() is None and fut.result().code == ResponseCode.SUCCESS:
            acked[key] = time.monotonic()

    i = 0
    while not killed.done():
        while len(pending) < window and not killed.done():
            key, cmd = sender(i)
            fut = conn.request(cmd)
            pending.add(fut)
            fut.add_done_callback(functools.partial(done, key=key))
            i += 1
            attempted += 1
        await asyncio.wait(list(pending) + [killed], return_when=asyncio.FIRST_COMPLETED)
    # Responses already on the wire are read before the dead broker's connection reports its loss, which
    # fails every send still pending: once all are resolved, ``acked`` is complete.
    if pending:
        await asyncio.wait(list(pending), timeout=10)
    assert not pending, "sends unresolved 10 s after the broker died"
    await c.close()
    return acked, attempted, killed.result()


async def read_back(addr: str, topic: str, queues: int = QUEUES) -> list[str]:
    """The KEYS of every message in the topic, read through the ConsumeQueues (CRC checked, no gap)."""
    c = RemotingClient()
    out: list[str] = []
    try:
        for q in range(queues):
            offset = 0
            while True:
                r = await c.invoke(addr, pull_cmd(topic, q, offset, max_nums=32), 10)
                if r.code != ResponseCode.SUCCESS:
                    break
                body, pos = r.body_bytes(), 0
                while pos < len(body):
                    m = decode_record(body, pos, check_crc=True)
                    assert m.queue_offset == offset, "a gap or a duplicate in the ConsumeQueue"
                    out.append(m.properties["KEYS"])
                    offset += 1
                    pos += m.store_size
        return out
    finally:
        await c.close()


async def query_key(addr: str, topic: str, key: str) -> int:
    """How many messages of ``topic`` the index finds under ``key``."""
    c = RemotingClient()
    try:
        r = await c.invoke(addr, RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={
            "topic": topic, "key": key, "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(int(time.time() * 1000) + 60000)}), 10)
        if r.code != ResponseCode.SUCCESS:
            return 0
        body, pos, n = r.body_bytes(), 0, 0
        while pos < len(body):
            m = decode_record(body, pos)
            n += m.properties.get("KEYS") == key
            pos += m.store_size
        return n
    finally:
        await c.close()


def check_exactly_once(addr: str, topic: str, acked: dict[str, float], index_samples: int = 20) -> set[str]:
    """Read the topic back: no message twice, and a sample of the stored ones found once through the
    index. Returns the acknowledged keys that are missing."""
    counts: dict[str, int] = {}
    for k in asyncio.run(asyncio.wait_for(read_back(addr, topic), 60)):
        counts[k] = counts.get(k, 0) + 1
    twice = [k for k, n in counts.items() if n > 1]
    assert not twice, f"stored twice: {twice[:10]}"
    for key in sorted(acked)[:: max(1, len(acked) // index_samples)]:  # the index was rebuilt past its last consistent point
        if key in counts:
            assert asyncio.run(query_key(addr, topic, key)) == 1, key
    return acked.keys() - counts.keys()
