"""The official client across broker restarts: committed consumer offsets survive a clean restart, and every
send the client saw succeed survives a SIGKILL of the broker (process-crash recovery, both flush types: the
page cache outlives a SIGKILL, so this cannot tell SYNC_FLUSH from ASYNC_FLUSH; a power-cut harness that
drops unsynced writes, not built yet, will)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import (
    ClientAgent,
    body_text,
    consumer_offsets,
    create_topic,
    msg,
    sentinels_received,
    uniq,
    without_sentinels,
)
from tests.support import Standalone

pytestmark = pytest.mark.compat

SMALL_FILES = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}


def consume(agents: Any, s: Standalone, name: str, group: str, topic: str) -> ClientAgent:
    c = agents.new(name)
    c.call("consumer_start", cid=name, group=group, topic=topic, namesrv=s.namesrv_addr)
    return c


def test_consumer_offsets_survive_a_clean_restart(standalone: Standalone, agents: Any,
                                                  record_property: Any) -> None:
    s = standalone
    topic, group = uniq("Restart"), uniq("CGrestart")
    create_topic(s.namesrv_addr, topic, 4)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    first = [f"before-{i}" for i in range(40)]
    p.call("send", mode="sync", messages=[msg(topic, k, tags="TagA", keys=k) for k in first])
    c1 = consume(agents, s, "c1", group, topic)
    c1.wait_messages(lambda ms: set(first) <= {m["keys"] for m in ms}, 30, "the first 40")
    # A clean client shutdown persists its offsets (oneway UPDATE_CONSUMER_OFFSET, then UNREGISTER_CLIENT).
    c1.call("consumer_shutdown", cid="c1")
    committed = consumer_offsets(s.namesrv_addr, group, topic)
    assert all(mx == co for mx, co in committed.values()), f"not all committed before the restart: {committed}"
    p.call("producer_shutdown")

    assert s.stop() == 0
    s.start()
    after = consumer_offsets(s.namesrv_addr, group, topic)
    assert after == committed, f"offsets changed across the restart: {committed} -> {after}"

    p2 = agents.new("producer2")
    p2.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    second = [f"after-{i}" for i in range(20)]
    p2.call("send", mode="sync", messages=[msg(topic, k, tags="TagA", keys=k) for k in second])
    c2 = consume(agents, s, "c2", group, topic)
    c2.wait_messages(lambda ms: set(second) <= {m["keys"] for m in ms}, 30, "the 20 sent after the restart")
    sentinels_received(p2, [c2], topic, 4, tags="TagA")
    got = Counter(m["keys"] for m in without_sentinels(c2.messages()))
    redelivered = sorted(k for k in got if k.startswith("before-"))
    record_property("redelivered_after_clean_restart", len(redelivered))
    print(f"redelivered after a clean restart: {len(redelivered)} of {len(first)}")
    assert not redelivered, f"{len(redelivered)} messages consumed before the restart came again: {redelivered[:10]}"
    assert all(got[k] == 1 for k in second)


def test_live_consumer_resumes_after_broker_restart(standalone: Standalone, agents: Any,
                                                    record_property: Any) -> None:
    """A push consumer that stays up while the broker restarts reconnects and keeps consuming."""
    s = standalone
    topic, group = uniq("LiveRestart"), uniq("CGlive")
    create_topic(s.namesrv_addr, topic, 4)
    p = agents.new("producer")
    p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr)
    first = [f"before-{i}" for i in range(20)]
    p.call("send", mode="sync", messages=[msg(topic, k, keys=k) for k in first])
    c = consume(agents, s, "c", group, topic)
    c.wait_messages(lambda ms: set(first) <= {m["keys"] for m in ms}, 30, "the first 20")
    # let the client's 5 s offset timer commit what it consumed before the broker goes away
    c.wait(lambda: all(mx == co for mx, co in consumer_offsets(s.namesrv_addr, group, topic).values()), 15,
           "offsets committed")
    assert s.stop() == 0
    s.start()
    second = [f"after-{i}" for i in range(20)]
    res = p.call("send", mode="sync", timeout=60, collect_errors=True,
                 messages=[msg(topic, k, keys=k) for k in second])
    ok = [k for k, r in zip(second, res, strict=True) if r["status"] == "OK"]
    assert len(ok) >= len(second) - 2, f"the producer did not recover: {res}"
    c.wait_messages(lambda ms: set(ok) <= {m["keys"] for m in ms}, 60, "messages sent after the restart")
    sentinels_received(p, [c], topic, 4)
    got = Counter(m["keys"] for m in without_sentinels(c.messages()))
    dup = {k: n for k, n in got.items() if n > 1}
    record_property("duplicates_live_consumer", len(dup))
    print(f"live consumer across restart: duplicates {len(dup)}")
    assert not dup, f"duplicates: {dup}"


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_every_acknowledged_send_survives_a_broker_sigkill(tmp_path: Path, agents: Any, record_property: Any,
                                                           flush: str) -> None:
    s = Standalone(tmp_path / "data", {**SMALL_FILES, "flushDiskType": flush})
    s.start()
    try:
        topic = uniq("Crash")
        create_topic(s.namesrv_addr, topic, 4)
        p = agents.new("producer")
        p.call("producer_start", group=uniq("PG"), namesrv=s.namesrv_addr, timeout_ms=2000)
        p.call("stream_start", topic=topic, prefix="crash", tags="TagA", threads=4)
        p.wait(lambda: sum(1 for e in p.sent_events() if e["ok"]) >= 300, 30, "300 acknowledged sends")
        s.kill()  # mid-stream: some sends are in flight
        p.wait(lambda: any(not e["ok"] for e in p.sent_events()), 30, "the producer to notice the crash")
        p.call("stream_stop", timeout=40)
        acked = {e["key"] for e in p.sent_events() if e["ok"]}
        failed = {e["key"] for e in p.sent_events() if not e["ok"]}
        s.start()
        c = consume(agents, s, "c", uniq("CGcrash"), topic)
        c.wait_messages(lambda ms: acked <= {m["keys"] for m in ms}, 60, f"all {len(acked)} acknowledged messages")
        sentinels_received(p, [c], topic, 4, tags="TagA")
        consumed = without_sentinels(c.messages())
        got = {m["keys"] for m in consumed}
        assert all(body_text(m) == m["keys"] for m in consumed), "a body changed"
        lost = acked - got
        unacked_present = len(got & failed)
        record_property("acked", len(acked))
        record_property("unacked_but_stored", unacked_present)
        print(f"{flush} SIGKILL: acked {len(acked)}, lost {len(lost)}, failed sends {len(failed)} "
              f"of which stored {unacked_present}")
        assert not lost
        assert got <= acked | failed, "messages nobody sent"
    finally:
        try:
            s.stop()
        except RuntimeError:
            pass
