"""The timer's per-topic pending counts by deliver minute (``timermetrics``): the snapshot written with each
durable commit, read back at start, and what GET_TIMER_METRICS shows across a restart."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.broker.rawclient import send_cmd
from tests.support import Standalone
from tidalmq.common import fastjson
from tidalmq.common.fileutil import atomic_write
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient
from tidalmq.schedule.timer_view import TimerMetrics, TopicCounts

DAY_MINUTES = 1440


def _counts(rng: random.Random) -> TopicCounts:
    tc = TopicCounts()
    base = 29_000_000  # minutes since the epoch (2025)
    for topic, minutes in (("Orders", 30 * DAY_MINUTES), ("Tü", 500)):
        for _ in range(minutes):
            tc.add(topic, (base + rng.randrange(minutes)) * 60_000 + rng.randrange(60_000), rng.randint(1, 9))
    return tc


def test_a_snapshot_reads_back_as_the_counts_it_was_taken_of(tmp_path: Path) -> None:
    counts = _counts(random.Random(7))
    metrics = TimerMetrics(tmp_path / "timermetrics")
    metrics.topics = counts
    atomic_write(metrics.path, metrics.snapshot(12345))
    data = json.loads(metrics.path.read_text())
    assert data["enqueueOffset"] == 12345
    # each topic's total is there as a number for whoever reads the file
    assert {t: v["pending"] for t, v in data["topics"].items()} == counts.pending()
    again = TimerMetrics(metrics.path)
    again.load(enqueue_offset=20000)
    assert again.mark == 12345
    assert again.topics.by_topic == counts.by_topic
    assert again.topics.pending() == counts.pending()


def test_a_snapshot_in_the_older_form_is_read() -> None:
    older = {"Orders": {"29000000": 3, "29000007": 1, "29000009": 0}, "Tü": {"29000001": 2}}
    tc = TopicCounts.from_json(older)
    assert tc.by_topic == {"Orders": Counter({29000000: 3, 29000007: 1}), "Tü": Counter({29000001: 2})}


@pytest.mark.parametrize("text", [
    "not json",
    '{"enqueueOffset": 9, "topics": {"T": {"pending": 1, "minutes": "AAAA", "counts": "AQAAAAAAAAA="}}}',
    '{"enqueueOffset": 9, "topics": {"T": {"pending": 1, "minutes": "%%%", "counts": "AQAAAAAAAAA="}}}',
    '{"enqueueOffset": 9, "topics": ["T"]}',
])
def test_an_unreadable_snapshot_leaves_the_counts_to_the_replay(tmp_path: Path, text: str) -> None:
    path = tmp_path / "timermetrics"
    path.write_text(text)
    metrics = TimerMetrics(path)
    metrics.load(enqueue_offset=500)
    assert metrics.mark == 0 and metrics.topics.by_topic == {}


def test_the_pending_counts_and_their_minutes_survive_a_restart(tmp_path: Path) -> None:
    """Timer messages due over 30 days in two topics: GET_TIMER_METRICS gives the same counts and
    histogram after a clean restart, and the snapshot on disk holds each topic's total. (An unreadable
    snapshot gives the same counts too, recounted by a longer replay: the snapshot's own reading is
    test_a_snapshot_reads_back_as_the_counts_it_was_taken_of.)"""
    sa = Standalone(tmp_path / "data", {"timerMaxDelaySec": str(40 * 86400), "timerPrecisionMs": "100",
                                        "mappedFileSizeCommitLog": str(8 * 1024 * 1024)})
    rng = random.Random(11)
    sent = {"MetricsA": 300, "MetricsB": 40}

    async def send_all() -> None:
        c = RemotingClient()
        try:
            now = int(time.time() * 1000)
            for topic, n in sent.items():
                for _ in range(n):
                    due = now + rng.randrange(3_600_000, 30 * 86_400_000)
                    r = await c.invoke(sa.broker_addr, send_cmd(topic, b"m", props={"TIMER_DELIVER_MS": str(due)}), 5)
                    assert r.code == ResponseCode.SUCCESS, r.remark
        finally:
            await c.close()

    async def metrics_when(ready: dict[str, int], timeout: float) -> dict[str, dict[str, object]]:
        c = RemotingClient()
        try:
            deadline = time.monotonic() + timeout
            while True:
                r = await c.invoke(sa.broker_addr, RemotingCommand(code=RequestCode.GET_TIMER_METRICS), 5)
                topics = fastjson.loads(r.body_bytes())["topics"]
                if all(topics.get(t, {}).get("timer") == n for t, n in ready.items()):
                    return {t: topics[t] for t in ready}
                assert time.monotonic() < deadline, f"timer counts {topics} never reached {ready}"
                await asyncio.sleep(0.1)
        finally:
            await c.close()

    sa.start()
    try:
        asyncio.run(send_all())
        before = asyncio.run(metrics_when(sent, 30))
        sa.stop()
        sa.start()
        after = asyncio.run(metrics_when(sent, 30))
        assert after == before
        data = json.loads((tmp_path / "data" / "store" / "timermetrics").read_text())
        assert {t: data["topics"][t]["pending"] for t in sent} == sent
    finally:
        sa.stop()
