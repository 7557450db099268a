"""A byte flipped on disk inside a stored record's properties: never served as it is, and the rest of the
batch still delivered. With ``checkCRCOnRead=true`` the broker skips the record (logged, counted in
``commitLogCorruptRecords``); with the default the broker serves the stored bytes and ``tidalmq.client``
skips the record it cannot decode."""

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


@pytest.mark.parametrize("check_on_read", [True, False], ids=["checkCRCOnRead", "default"])
def test_flipped_property_byte_is_not_served_and_the_batch_is(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                              check_on_read: bool) -> None:
    file_size = 64 * 1024 * 1024
    settings = {"mappedFileSizeCommitLog": str(file_size), "checkCRCOnRead": str(check_on_read).lower()}
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
