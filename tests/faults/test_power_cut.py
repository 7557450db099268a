"""Power cuts under load: a real ``tidalmq standalone`` whose data dir is on lazyfs (tests/faults/lazyfs.py).

A cut = SIGKILL the broker, drop every write not fsynced (optionally writing back a random part of it,
torn), remount, restart. What it shows, unlike a SIGKILL alone (tests/broker/test_crash.py): SYNC_FLUSH
loses no acknowledged message; ASYNC_FLUSH loses only what was acknowledged within about one flush
interval before the cut; torn pages in every store file are recovered from.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.broker.crashload import (
    QUEUES,
    Sender,
    check_exactly_once,
    create_topic,
    load_until_killed,
    plain_sender,
    read_back,
)
from tests.broker.rawclient import send_cmd
from tests.faults.harness import PowerCutFs
from tests.support import Standalone, wait_for

TOPIC = "PowerT"
TIMER_TOPIC = "PowerTimer"
FLUSH_INTERVAL_MS = 500  # flushIntervalCommitLog, RocketMQ's default, set explicitly for the bound below
# The index is small so its files (mmapped, written back through lazyfs) stay a few MB.
BASE = {"mappedFileSizeCommitLog": str(4 * 1024 * 1024), "maxMessageSize": str(1024 * 1024), "maxHashSlotNum": "20000", "maxIndexNum": "80000",
        "flushIntervalCommitLog": str(FLUSH_INTERVAL_MS)}


@dataclass
class Cuts:
    """What a series of power cuts did to the acknowledged messages (timer messages apart)."""

    acked: int = 0
    lost: int = 0
    # For each lost message: how long before its cut (the broker's SIGKILL) it was acknowledged, in ms.
    lost_ack_age_ms: list[float] = field(default_factory=list)
    reports: list[dict[str, int]] = field(default_factory=list)  # lazyfs's counts at each cut
    timer_acked: dict[str, float] = field(default_factory=dict)


def power_cuts(fs: PowerCutFs, tmp: Path, flush: str, rounds: int, *, torn: float = 0.0, keep_files: str = "",
               kill_after: Callable[[int], float] = lambda r: 0.6 + 0.15 * (r % 5),
               sender: Callable[[str, int], Sender] = lambda topic, r: plain_sender(topic, f"r{r}-"),
               settings: dict[str, str] | None = None) -> Cuts:
    """``rounds`` power cuts of one broker under send load, round r sending to topic ``PowerT<r>``. After
    each cut the broker must restart and serve that round's messages exactly once (no gap, found through
    the index); after the last, every round's messages are checked again: what survived one cut must
    survive the later ones."""
    s = Standalone(fs.mountpoint / "data", {**BASE, "flushDiskType": flush, **(settings or {})},
                   log_path=tmp / "standalone.log")
    s.start()
    asyncio.run(create_topic(s.broker_addr, TIMER_TOPIC))
    out = Cuts()
    survived: dict[str, dict[str, float]] = {}
    try:
        for r in range(rounds):
            topic = f"{TOPIC}{r}"
            asyncio.run(create_topic(s.broker_addr, topic))
            acked, _, kill_at = asyncio.run(asyncio.wait_for(
                load_until_killed(s.broker_addr, sender(topic, r), kill_after(r), s.kill), 60))
            out.reports.append(fs.cut(torn, seed=r, keep_files=keep_files))
            fs.mount()
            s.start()
            mine = {k: t for k, t in acked.items() if not k.startswith("t")}
            out.timer_acked.update((k, t) for k, t in acked.items() if k.startswith("t"))
            assert len(mine) > 50, f"round {r}: the load did not get going before the cut"
            lost = check_exactly_once(s.broker_addr, topic, mine)
            survived[topic] = {k: t for k, t in mine.items() if k not in lost}
            out.acked += len(mine)
            out.lost += len(lost)
            out.lost_ack_age_ms += [(kill_at - mine[k]) * 1000 for k in lost]
        for topic, keys in survived.items():
            gone = check_exactly_once(s.broker_addr, topic, keys, index_samples=2)
            assert not gone, f"{topic}: messages that had survived their cut are gone: {sorted(gone)[:5]}"
        return out
    finally:
        s.stop()


def test_harness_drops_unsynced_writes(power_fs: PowerCutFs, tmp_path: Path) -> None:
    """The harness itself: ASYNC_FLUSH with a flush interval longer than the test loses acknowledged
    messages at a cut (if it did not, nothing here could show a missing fsync) - and still recovers."""
    cuts = power_cuts(power_fs, tmp_path, "ASYNC_FLUSH", 1, settings={
        "flushIntervalCommitLog": "600000", "flushCommitLogThoroughInterval": "600000"})
    assert cuts.reports[0]["dirty_pages"] > 0
    assert cuts.lost > 0, f"no acknowledged message lost out of {cuts.acked}: the harness dropped nothing"
    print(f"\nASYNC_FLUSH, no flush: {cuts.lost} of {cuts.acked} acknowledged lost; lazyfs {cuts.reports[0]}")


@pytest.mark.timeout(300)  # ten restarts: about 30 s alone, more on a busy machine
def test_sync_flush_loses_nothing_acknowledged(power_fs: PowerCutFs, tmp_path: Path) -> None:
    cuts = power_cuts(power_fs, tmp_path, "SYNC_FLUSH", 10, kill_after=lambda r: 0.4 + 0.1 * (r % 5))
    print(f"\nSYNC_FLUSH: {cuts.lost} of {cuts.acked} acknowledged lost over 10 power cuts")
    assert cuts.lost == 0
    assert all(r["dirty_pages"] > 0 for r in cuts.reports), "a cut found nothing unsynced to drop"


def test_async_flush_loses_at_most_a_flush_interval(power_fs: PowerCutFs, tmp_path: Path) -> None:
    cuts = power_cuts(power_fs, tmp_path, "ASYNC_FLUSH", 3)
    oldest = max(cuts.lost_ack_age_ms, default=0.0)
    print(f"\nASYNC_FLUSH ({FLUSH_INTERVAL_MS} ms): {cuts.lost} of {cuts.acked} acknowledged lost over 3 cuts, "
          f"the oldest acknowledged {oldest:.0f} ms before its cut")
    # The flush service starts a flush at most an interval plus one fdatasync after the previous one;
    # the margin is for the scheduling of two Python processes on a busy 2-core machine.
    assert oldest <= FLUSH_INTERVAL_MS + 1000, cuts.lost_ack_age_ms


def mixed_sender(topic: str, r: int) -> Sender:
    """Mostly plain messages to ``topic``; every fifth a timer message (1 s) to TIMER_TOPIC, key ``t...``."""
    plain = plain_sender(topic, f"r{r}-")

    def send(i: int) -> tuple[str, object]:
        if i % 5:
            return plain(i)
        key = f"t{r}-{i}"
        return key, send_cmd(TIMER_TOPIC, key.encode(), queue_id=i % QUEUES,
                             props={"KEYS": key, "TIMER_DELAY_MS": "1000"})
    return send  # type: ignore[return-value]


def test_torn_pages_recover(power_fs: PowerCutFs, tmp_path: Path) -> None:
    """Cuts that write back half the unsynced pages, some partly, in every file that has any: CommitLog,
    ConsumeQueue, index, checkpoint. The broker restarts and serves every acknowledged SYNC_FLUSH message
    exactly once. Timer messages are left out of this load: their delivery after a cut is
    test_timer_messages_survive_a_power_cut's (before the wheel was re-filed from the TimerLog on load,
    torn timer files once kept the broker from starting here)."""
    cuts = power_cuts(power_fs, tmp_path, "SYNC_FLUSH", 2, torn=0.5)
    print(f"\ntorn: {cuts.lost} of {cuts.acked} acknowledged lost over 2 cuts; lazyfs {cuts.reports}")
    assert cuts.lost == 0
    assert sum(r["pages_written_partly"] for r in cuts.reports) > 0


@pytest.mark.parametrize("keep_files", ["", "*/timerwheel"], ids=["plain-cut", "wheel-written-back"])
def test_timer_messages_survive_a_power_cut(power_fs: PowerCutFs, tmp_path: Path, keep_files: str) -> None:
    """Every acknowledged SYNC_FLUSH timer message is delivered (at least once) after a cut - a plain one,
    and one after which the kernel had written back the timer wheel's dirty pages (it may, at any time and
    in any order) but not the TimerLog records appended since the last timer flush."""
    cuts = power_cuts(power_fs, tmp_path, "SYNC_FLUSH", 1, keep_files=keep_files, sender=mixed_sender)
    assert cuts.lost == 0 and cuts.timer_acked
    s = Standalone(power_fs.mountpoint / "data", {**BASE, "flushDiskType": "SYNC_FLUSH"},
                   log_path=tmp_path / "standalone.log")
    with s:
        def missing() -> set[str]:
            return cuts.timer_acked.keys() - set(asyncio.run(asyncio.wait_for(read_back(s.broker_addr, TIMER_TOPIC), 30)))

        # The last acknowledged timer message is due 1 s after its send; deliveries follow within a second
        # or two of a restart when nothing is lost.
        try:
            wait_for(lambda: not missing(), 5, interval=0.5, what="every acknowledged timer message delivered")
        except AssertionError:
            gone = missing()
            raise AssertionError(f"{len(gone)} of {len(cuts.timer_acked)} acknowledged timer messages never "
                                 f"delivered, e.g. {sorted(gone)[:5]}") from None


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_sync_flush_100_power_cuts(power_fs: PowerCutFs, tmp_path: Path) -> None:
    cuts = power_cuts(power_fs, tmp_path, "SYNC_FLUSH", 100, torn=0.3, kill_after=lambda r: 0.3 + 0.1 * (r % 9))
    print(f"\nSYNC_FLUSH: {cuts.lost} of {cuts.acked} acknowledged lost over 100 power cuts (torn 0.3)")
    assert cuts.lost == 0
