"""A byte flipped on disk inside a stored record's properties: never served as it is, and the rest of the
batch still delivered. By default the record CRC (``__CRC32#``, enabledAppendPropCRC) is checked on every
read: the broker skips the record (logged, counted in ``commitLogCorruptRecords``), as it does with
``checkCRCOnRead=true``; with ``checkPropCRCOnRead=false`` the broker serves the stored bytes and
``tidalmq.client`` skips a record it cannot decode. A flip that leaves the properties well formed (a value's
letter changed) is found by the record CRC alone: on read, and by recovery after a restart."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.broker.rawclient import runtime_info
from tests.client.helpers import create_topic, uniq
from tests.support import Standalone, wait_for
from tidalmq.client import Admin, AdminError, Message, Producer, PullConsumer
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.common.record import view_record
from tidalmq.remoting.transport import RemotingClient, RemotingError

pytestmark = pytest.mark.timeout(90)


def _flip_in_properties(data_dir: Path, commit_log_offset: int, file_size: int) -> None:
    """XOR 0x80 into the second byte of the record's properties (a property name's letter becomes a byte
    that is not UTF-8), through the file, as a disk error would: the broker's mapping sees it."""
    path = data_dir / "store" / "commitlog" / f"{commit_log_offset - commit_log_offset % file_size:020d}"
    with open(path, "r+b") as f:
        f.seek(commit_log_offset % file_size)
        rec = f.read(4096)
        at = view_record(rec).props_at + 1
        f.seek(commit_log_offset % file_size + at)
        f.write(bytes([rec[at] ^ 0x80]))


def _flip_in_value(data_dir: Path, commit_log_offset: int, file_size: int, value: bytes) -> None:
    """XOR 1 into the last byte of the property value ``value`` of the record (``k2`` becomes ``k3``): the
    properties stay well formed UTF-8 pairs, only a CRC over them can tell."""
    path = data_dir / "store" / "commitlog" / f"{commit_log_offset - commit_log_offset % file_size:020d}"
    with open(path, "r+b") as f:
        f.seek(commit_log_offset % file_size)
        rec = f.read(4096)
        v = view_record(rec)
        at = v.props_at + rec[v.props_at : v.props_at + v.props_len].index(b"\x01" + value + b"\x02") + len(value)
        f.seek(commit_log_offset % file_size + at)
        f.write(bytes([rec[at] ^ 0x01]))


async def _corrupt_count(broker: Standalone) -> str:
    client = RemotingClient()
    try:
        return (await runtime_info(client, broker.broker_addr))["commitLogCorruptRecords"]
    finally:
        await client.close()


@pytest.mark.parametrize("restart", [False, True], ids=["live", "restarted"])
def test_changed_property_value_is_not_served_and_the_others_are(tmp_path: Path, restart: bool) -> None:
    """A record whose property value changed on disk: skipped by the read-time record CRC check while the
    broker runs; after a restart (the byte flipped while it was stopped, read checks off) recovery finds
    it and the record is still never served, the messages after it are."""
    file_size = 64 * 1024 * 1024
    settings = {"mappedFileSizeCommitLog": str(file_size)}
    if restart:
        settings["checkPropCRCOnRead"] = "false"  # recovery's check alone
    topic = uniq("CorruptValue")

    async def send(broker: Standalone) -> list[int]:
        await create_topic(broker.namesrv_addr, topic, 1)
        async with Producer(uniq("PG"), broker.namesrv_addr) as p:
            sent = [await p.send(Message(topic, b"m%d" % i, tags="T", keys=f"k{i}")) for i in range(5)]
        return [decode_offset_msg_id(s.offset_msg_id)[2] for s in sent]

    async def pull_all(broker: Standalone) -> list[tuple[int, bytes]]:
        async with PullConsumer(uniq("CG"), broker.namesrv_addr) as pc:
            (mq,) = await pc.fetch_queues(topic)
            return [(m.queue_offset, m.body) for m in await pc.pull_range(mq, 0, 5)]

    async def body() -> None:
        with Standalone(tmp_path / "data", settings) as broker:
            offsets = await send(broker)
            if not restart:
                _flip_in_value(broker.data_dir, offsets[2], file_size, b"k2")
                assert await pull_all(broker) == [(i, b"m%d" % i) for i in (0, 1, 3, 4)]
                assert await _corrupt_count(broker) == "1"
                wait_for(lambda: f"corrupt record at CommitLog offset {offsets[2]}" in broker.log_tail(200), 10,
                         what="the broker's error log")
                return
        _flip_in_value(tmp_path / "data", offsets[2], file_size, b"k2")
        with Standalone(tmp_path / "data", settings) as broker:
            assert await pull_all(broker) == [(i, b"m%d" % i) for i in (0, 1, 3, 4)]
            assert await _corrupt_count(broker) == "1"
            async with Producer(uniq("PG"), broker.namesrv_addr) as p:  # and the queue goes on
                await p.send(Message(topic, b"m5", tags="T"))
            async with PullConsumer(uniq("CG"), broker.namesrv_addr) as pc:
                (mq,) = await pc.fetch_queues(topic)
                assert [m.body for m in await pc.pull_range(mq, 3, 6)] == [b"m3", b"m4", b"m5"]

    asyncio.run(asyncio.wait_for(body(), 80))


@pytest.mark.parametrize("mode", ["checkCRCOnRead", "default", "noReadChecks"])
def test_flipped_property_byte_is_not_served_and_the_batch_is(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                              mode: str) -> None:
    file_size = 64 * 1024 * 1024
    settings = {"mappedFileSizeCommitLog": str(file_size), "checkCRCOnRead": str(mode == "checkCRCOnRead").lower(),
                "checkPropCRCOnRead": str(mode != "noReadChecks").lower()}
    check_on_read = mode != "noReadChecks"
    topic = uniq("Corrupt")

    async def body() -> None:
        with Standalone(tmp_path / "data", settings) as broker:
            await create_topic(broker.namesrv_addr, topic, 1)
            async with Producer(uniq("PG"), broker.namesrv_addr) as p:
                sent = [await p.send(Message(topic, b"m%d" % i, tags="T", keys=f"k{i}")) for i in range(5)]
            _, _, victim = decode_offset_msg_id(sent[2].offset_msg_id)
            _flip_in_properties(broker.data_dir, victim, file_size)
            async with PullConsumer(uniq("CG"), broker.namesrv_addr) as pc:
                (mq,) = await pc.fetch_queues(topic)
                with caplog.at_level(logging.WARNING, logger="tidalmq.client.codec"):
                    got = await pc.pull_range(mq, 0, 5)
            assert [(m.queue_offset, m.body) for m in got] == [(i, b"m%d" % i) for i in (0, 1, 3, 4)]
            client_warnings = [r.getMessage() for r in caplog.records if r.name == "tidalmq.client.codec"]
            client = RemotingClient()
            try:
                info = await runtime_info(client, broker.broker_addr)
            finally:
                await client.close()
            if check_on_read:
                assert info["commitLogCorruptRecords"] == "1" and not client_warnings
                wait_for(lambda: f"corrupt record at CommitLog offset {victim}" in broker.log_tail(200), 10,
                         what="the broker's error log")
                async with Admin(broker.namesrv_addr) as admin:  # viewing it by id is refused as well
                    with pytest.raises((AdminError, RemotingError)):
                        await admin.view_message(sent[2].offset_msg_id)
                    assert (await admin.view_message(sent[3].offset_msg_id)).body == b"m3"
            else:
                assert info["commitLogCorruptRecords"] == "0"
                assert len(client_warnings) == 1 and "queue offset(s) [2]" in client_warnings[0]

    asyncio.run(asyncio.wait_for(body(), 80))
