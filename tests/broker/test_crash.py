"""Durability: SIGKILL the broker under a steady send load, restart, and check what survived.

SYNC_FLUSH: every acknowledged message is readable exactly once through its ConsumeQueue and findable
through the index. ASYNC_FLUSH: the same check, reporting how many acknowledged messages were lost
(a SIGKILL leaves the page cache intact, so usually none; a power cut would lose up to a flush interval).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.broker.rawclient import pull_cmd, send_cmd
from tests.support import Standalone
from tidalmq.common.record import decode_record
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

QUEUES = 4


async def load_until_killed(s: Standalone, topic: str, kill_after: float, window: int = 64) -> tuple[set[str], int]:
    """Pipelined sends until the broker is SIGKILLed; returns (acknowledged keys, sends attempted)."""
    c = RemotingClient()
    conn = await c.connection(s.broker_addr)
    acked: set[str] = set()
    attempted = 0
    loop = asyncio.get_running_loop()
    killed = loop.create_future()
    loop.call_later(kill_after, lambda: (s.kill(), killed.set_result(None)))
    pending: set[asyncio.Future[RemotingCommand]] = set()

    def done(fut: asyncio.Future[RemotingCommand], key: str) -> None:
        pending.discard(fut)
        if not fut.cancelled() and fut.exception() is None and fut.result().code == ResponseCode.SUCCESS:
            acked.add(key)

    i = 0
    while not killed.done():
        while len(pending) < window and not killed.done():
            key = f"k{i}"
            fut = conn.request(send_cmd(topic, f"body-{i}".encode(), queue_id=i % QUEUES, props={"KEYS": key}))
            pending.add(fut)
            fut.add_done_callback(lambda f, k=key: done(f, k))
            i += 1
            attempted += 1
        await asyncio.wait(list(pending) + [killed], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0.2)  # let responses already on the wire be read before the socket closes
    await c.close()
    return acked, attempted


async def read_back(s: Standalone, topic: str) -> list[str]:
    """Every message body in the topic, read through the ConsumeQueues."""
    c = RemotingClient()
    out: list[str] = []
    try:
        for q in range(QUEUES):
            offset = 0
            while True:
                r = await c.invoke(s.broker_addr, pull_cmd(topic, q, offset, max_nums=32), 10)
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


async def query_key(s: Standalone, topic: str, key: str) -> int:
    c = RemotingClient()
    try:
        r = await c.invoke(s.broker_addr, RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields={
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


def crash_round(tmp: Path, flush: str, kill_after: float) -> tuple[int, int, int]:
    s = Standalone(tmp / "data", {"flushDiskType": flush, "mappedFileSizeCommitLog": str(4 * 1024 * 1024)})
    s.start()
    topic = "CrashT"

    async def create() -> None:
        c = RemotingClient()
        try:
            r = await c.invoke(s.broker_addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
                "topic": topic, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"}), 10)
            assert r.code == ResponseCode.SUCCESS
        finally:
            await c.close()

    asyncio.run(create())
    acked, attempted = asyncio.run(asyncio.wait_for(load_until_killed(s, topic, kill_after), 60))
    assert len(acked) > 100, "the load did not get going before the kill"
    s.start()
    try:
        stored = asyncio.run(asyncio.wait_for(read_back(s, topic), 60))
        counts: dict[str, int] = {}
        for k in stored:
            counts[k] = counts.get(k, 0) + 1
        assert all(n == 1 for n in counts.values()), "a message is stored twice"
        lost = acked - set(counts)
        sample = sorted(acked)[:: max(1, len(acked) // 20)]
        for key in sample:  # the index was rebuilt past its last consistent point
            if key in counts:
                assert asyncio.run(query_key(s, topic, key)) == 1, key
        return len(acked), len(lost), attempted
    finally:
        s.stop()


def test_sync_flush_sigkill_loses_no_acknowledged_message(tmp_path: Path) -> None:
    acked, lost, attempted = crash_round(tmp_path, "SYNC_FLUSH", 1.5)
    print(f"SYNC_FLUSH: {acked} acknowledged of {attempted} attempted, {lost} lost")
    assert lost == 0


def test_async_flush_sigkill_reports_loss(tmp_path: Path) -> None:
    acked, lost, attempted = crash_round(tmp_path, "ASYNC_FLUSH", 1.5)
    # ASYNC_FLUSH acknowledges before fsync, so loss is reported rather than forbidden; what crash_round
    # asserts still holds: nothing stored twice, no gap or torn record in any queue, the index rebuilt.
    print(f"ASYNC_FLUSH: {acked} acknowledged of {attempted} attempted, {lost} lost after SIGKILL")


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(10))
def test_sync_flush_crash_loop(tmp_path: Path, round_: int) -> None:
    acked, lost, _ = crash_round(tmp_path, "SYNC_FLUSH", 0.5 + round_ * 0.37)
    assert lost == 0, f"round {round_}: {lost} of {acked} acknowledged messages lost"
