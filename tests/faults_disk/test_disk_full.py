"""A full disk, on a real small filesystem: the broker never dies, refuses sends with RocketMQ's
disk-full answer, goes on serving pulls and offsets, and takes sends again by itself once space is back."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

from tests.broker.rawclient import pull_cmd, records, run, runtime_info, send_cmd, wait_max_offset
from tests.faults_disk.conftest import broker_on, fill
from tests.mqadmin.support import run_mqadmin
from tests.support import Standalone, wait_for
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

BODY = b"m" * (256 * 1024)


def alive(s: Standalone) -> None:
    assert s.proc is not None
    code = s.proc.poll()
    assert code is None, f"broker exited with {code} (-{int(signal.SIGBUS)} is SIGBUS)\n{s.log_tail()}"


async def send(c: RemotingClient, s: Standalone, topic: str, body: bytes = BODY) -> RemotingCommand:
    return await c.invoke(s.broker_addr, send_cmd(topic, body), 10)


async def send_until_refused(c: RemotingClient, s: Standalone, topic: str, acked: list[int],
                             limit: int = 2000) -> RemotingCommand:
    """Send until the broker refuses; the queue offsets of the acknowledged sends go to ``acked``."""
    for _ in range(limit):
        r = await send(c, s, topic)
        if r.code != ResponseCode.SUCCESS:
            return r
        acked.append(int(r.ext_fields["queueOffset"]))
    raise AssertionError(f"{limit} sends all accepted: the disk never filled")


async def send_until_accepted(c: RemotingClient, s: Standalone, topic: str, timeout: float = 15.0) -> RemotingCommand:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        r = await send(c, s, topic, b"again")
        if r.code == ResponseCode.SUCCESS:
            return r
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
        if loop.time() > deadline:
            raise AssertionError(f"sends still refused {timeout}s after space came back: {r.remark}")
        await asyncio.sleep(0.1)


async def read_queue(c: RemotingClient, s: Standalone, topic: str, upto: int) -> list[int]:
    """Queue offsets of every message readable in queue 0 from offset 0 up to ``upto``."""
    await wait_max_offset(c, s.broker_addr, topic, 0, upto)
    seen: list[int] = []
    offset = 0
    while offset < upto:
        r = await c.invoke(s.broker_addr, pull_cmd(topic, 0, offset), 10)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        got = records(r.body_bytes())
        seen += [m.queue_offset for m in got]
        offset = got[-1].queue_offset + 1
    return seen


async def commit_and_query(c: RemotingClient, s: Standalone, topic: str, offset: int) -> int:
    r = await c.invoke(s.broker_addr, RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
        "consumerGroup": "FullG", "topic": topic, "queueId": "0", "commitOffset": str(offset)}), 10)
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await c.invoke(s.broker_addr, RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields={
        "consumerGroup": "FullG", "topic": topic, "queueId": "0"}), 10)
    return int(r.ext_fields["offset"])


def admin_cluster(s: Standalone) -> str:
    """mqadmin brokerStatus's diskFull line (and diskFullReason's)."""
    out = run_mqadmin(s.namesrv_addr, "brokerStatus", "-b", s.broker_addr)
    assert out.returncode == 0, out.stderr
    return out.stdout


def assert_disk_full_answer(r: RemotingCommand) -> None:
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
    assert "the broker's disk is full" in (r.remark or ""), r.remark


def test_broker_filling_its_disk_refuses_sends_then_resumes_without_restart(small_disk: Path, tmp_path: Path) -> None:
    ballast = small_disk / "ballast"
    fill(ballast, limit_mb=8)
    # No periodic disk-ratio check: the refusal here comes from the refused reservation (ENOSPC) itself.
    with broker_on(small_disk, tmp_path, cleanResourceInterval="3600000") as s:
        async def scenario() -> None:
            c = RemotingClient()
            try:
                acked: list[int] = []
                refused = await send_until_refused(c, s, "FullT", acked)
                assert_disk_full_answer(refused)
                assert "commitlog" in (refused.remark or "")
                alive(s)
                # Refused sends took no queue offset; everything acknowledged is readable, no gap.
                assert acked == list(range(len(acked))) and len(acked) > 10
                for _ in range(3):
                    assert_disk_full_answer(await send(c, s, "FullT"))
                assert await read_queue(c, s, "FullT", len(acked)) == acked
                assert await commit_and_query(c, s, "FullT", len(acked)) == len(acked)
                info = await runtime_info(c, s.broker_addr)
                assert info["diskFull"] == "true" and "commitlog" in info["diskFullReason"]
                assert re.search(r"^diskFull +: true$", await asyncio.to_thread(admin_cluster, s), re.M)
                alive(s)

                ballast.unlink()
                again = await send_until_accepted(c, s, "FullT")
                assert int(again.ext_fields["queueOffset"]) == len(acked)  # next offset, no gap
                assert await read_queue(c, s, "FullT", len(acked) + 1) == [*acked, len(acked)]
                assert (await runtime_info(c, s.broker_addr))["diskFull"] == "false"
                assert re.search(r"^diskFull +: false$", await asyncio.to_thread(admin_cluster, s), re.M)
            finally:
                await c.close()

        run(scenario(), timeout=120)
        alive(s)
        assert s.stop() == 0


def test_another_process_filling_the_disk_and_a_restart_on_a_full_disk(small_disk: Path, tmp_path: Path) -> None:
    filler = small_disk / "filler"
    settings = {"cleanResourceInterval": "200", "flushConsumerOffsetInterval": "100"}
    s = broker_on(small_disk, tmp_path, **settings)
    acked: list[int] = []
    offsets_file = small_disk / "data" / "store" / "config" / "consumerOffset.json"
    with s:
        async def fill_while_running() -> None:
            c = RemotingClient()
            try:
                for _ in range(4):
                    r = await send(c, s, "OtherT")
                    assert r.code == ResponseCode.SUCCESS
                    acked.append(int(r.ext_fields["queueOffset"]))
                assert await commit_and_query(c, s, "OtherT", 1) == 1
                await asyncio.to_thread(wait_for, lambda: offsets_file.exists() and "OtherT@FullG" in
                                        offsets_file.read_text(), 10, what="offsets persisted")
                await asyncio.to_thread(fill, filler)
                # What the broker had reserved still takes sends; the disk ratio check then refuses them.
                assert_disk_full_answer(await send_until_refused(c, s, "OtherT", acked))
                alive(s)
                assert await read_queue(c, s, "OtherT", len(acked)) == acked == list(range(len(acked)))
                # Committed and answered, in memory: the file cannot be rewritten on a full disk.
                assert await commit_and_query(c, s, "OtherT", 2) == 2
            finally:
                await c.close()

        run(fill_while_running(), timeout=120)
        alive(s)
        assert s.stop() == 0  # a clean shutdown on a full disk
    # The schedule process could not commit its files: it still stopped when asked (not after the broker's
    # 15 s wait and a kill), and said why in one line.
    log = s.log_path.read_text(errors="replace")
    assert "did not stop" not in log and "timer store final commit failed: [Errno 28]" in log
    assert "Traceback" not in log, log[log.index("Traceback") - 300:][:2000]

    # Restart with the disk still full: it starts, serves what it has, refuses new messages.
    s = broker_on(small_disk, tmp_path, **settings)
    with s:
        async def after_restart() -> None:
            c = RemotingClient()
            try:
                assert_disk_full_answer(await send_until_refused(c, s, "OtherT", acked))
                alive(s)
                assert await read_queue(c, s, "OtherT", len(acked)) == acked == list(range(len(acked)))
                r = await c.invoke(s.broker_addr, RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields={
                    "consumerGroup": "FullG", "topic": "OtherT", "queueId": "0"}), 10)
                # The last offset persisted before the disk filled: consumers re-read one message, none lost.
                assert r.ext_fields["offset"] == "1"
                os.unlink(filler)
                again = await send_until_accepted(c, s, "OtherT")
                assert int(again.ext_fields["queueOffset"]) == len(acked)
            finally:
                await c.close()

        run(after_restart(), timeout=120)
        alive(s)
    log = s.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[log.index("Traceback") - 300:][:2000]


CLEANUP = {
    "cleanResourceInterval": "200",
    "diskSpaceCleanForciblyRatio": "30",  # the lowest RocketMQ allows: about 19 MiB of this disk
    "timerWheelEnable": "false",  # its 19 MiB wheel would take most of that
}


def test_cleanup_over_the_forcible_ratio_keeps_unconsumed_messages(small_disk: Path, tmp_path: Path) -> None:
    with broker_on(small_disk, tmp_path, **CLEANUP) as s:
        async def scenario() -> None:
            c = RemotingClient()
            try:
                acked: list[int] = []
                refused = await send_until_refused(c, s, "CleanT", acked)
                assert_disk_full_answer(refused)
                # The sends may outrun the clean service (every cleanResourceInterval) to the warning
                # level; by its next round it names what holds the space: unconsumed messages.
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 15
                while True:
                    info = await runtime_info(c, s.broker_addr)
                    why = info.get("diskFullReason", "")
                    if "unconsumed" in why and "CleanT queue 0" in why:
                        break
                    assert loop.time() < deadline, f"the clean service never named the unconsumed queue: {why!r}"
                    await asyncio.sleep(0.1)
                assert info["commitLogMinOffset"] == "0"  # nothing deleted
                assert int(info["commitLogMaxOffset"]) > 3 * 4 * 1024 * 1024  # several files to delete
                assert await read_queue(c, s, "CleanT", len(acked)) == acked == list(range(len(acked)))
                # A group consumes everything: cleanup proceeds and sends are taken again, no restart.
                assert await commit_and_query(c, s, "CleanT", len(acked)) == len(acked)
                again = await send_until_accepted(c, s, "CleanT")
                assert int(again.ext_fields["queueOffset"]) == len(acked)
                assert int((await runtime_info(c, s.broker_addr))["commitLogMinOffset"]) > 0
            finally:
                await c.close()

        run(scenario(), timeout=120)
        alive(s)


def test_clean_file_forcibly_enable_deletes_unconsumed_files_as_rocketmq(small_disk: Path, tmp_path: Path) -> None:
    with broker_on(small_disk, tmp_path, **CLEANUP, cleanFileForciblyEnable="true") as s:
        async def scenario() -> None:
            c = RemotingClient()
            try:
                for _ in range(120):  # 30 MiB: past the ratio, while the deletions keep the disk below full
                    r = await send(c, s, "ForceT")
                    assert r.code == ResponseCode.SUCCESS, r.remark
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 15
                while int((await runtime_info(c, s.broker_addr))["commitLogMinOffset"]) == 0:
                    assert loop.time() < deadline, "no CommitLog file deleted over the forcible ratio"
                    await asyncio.sleep(0.1)
                # Nobody consumed them, and they are gone: a pull from 0 starts past them. Until the consume
                # queue's minimum follows the CommitLog's, a pull is told to retry (MESSAGE_WAS_REMOVING), as
                # RocketMQ's is: the client pulls again at once.
                r = await c.invoke(s.broker_addr, pull_cmd("ForceT", 0, 0), 10)
                while r.code == ResponseCode.PULL_RETRY_IMMEDIATELY:
                    assert loop.time() < deadline, "the consume queue's minimum never followed the CommitLog's"
                    await asyncio.sleep(0.05)
                    r = await c.invoke(s.broker_addr, pull_cmd("ForceT", 0, 0), 10)
                if r.code == ResponseCode.SUCCESS:
                    assert records(r.body_bytes())[0].queue_offset > 0
                else:
                    assert r.code == ResponseCode.PULL_OFFSET_MOVED and int(r.ext_fields["nextBeginOffset"]) > 0
            finally:
                await c.close()

        run(scenario(), timeout=120)
        alive(s)
