"""Scheduled delivery with the official 4.x client (rocketmq==0.4.4, C++ core): delay levels and timer
properties arrive in their window and never before; a TIMER_DEL_UNIQKEY message cancels."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.harness import require_official_client

require_official_client()

from tests.compat.harness import (  # noqa: E402
    ClientAgent,
    create_topic,
    msg,
    sentinels_received,
    uniq,
    without_sentinels,
)
from tests.support import Standalone  # noqa: E402


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Standalone]:
    s = Standalone(tmp_path / "data", {"messageDelayLevel": "1s 2s", "timerPrecisionMs": "10",
                                       "mappedFileSizeCommitLog": str(16 * 1024 * 1024)})
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_levels_timers_and_cancel_with_the_official_client(broker: Standalone, tmp_path: Path) -> None:
    s = broker
    topic = uniq("TimerC")
    create_topic(s.namesrv_addr, topic, 4)
    p = ClientAgent("producer", tmp_path)
    c = ClientAgent("consumer", tmp_path)
    try:
        c.call("consumer_start", cid="c", group=uniq("CGtimer"), topic=topic, namesrv=s.namesrv_addr,
               props=["REAL_TOPIC", "TIMER_ENQUEUE_MS", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_OUT_MS"])
        p.call("producer_start", group=uniq("PGtimer"), namesrv=s.namesrv_addr)
        t0 = int(time.time() * 1000)
        specs = [
            msg(topic, "lvl", keys="lvl", props={"DELAY": "2"}),  # what setDelayTimeLevel(2) sends
            msg(topic, "abs", keys="abs", props={"TIMER_DELIVER_MS": str(t0 + 1500)}),
            msg(topic, "sec", keys="sec", props={"TIMER_DELAY_SEC": "1"}),
            msg(topic, "gone", keys="gone", props={"TIMER_DELIVER_MS": str(t0 + 2500)}),
            msg(topic, "now", keys="now", props={"TIMER_DELIVER_MS": str(t0 - 1000)}),
        ]
        results = p.call("send", mode="sync", messages=specs)
        assert all(r["status"] == "OK" for r in results), results
        gone_id = results[3]["msg_id"]
        cancel = p.call("send", mode="sync", collect_errors=True, messages=[msg(topic, "cancel", props={
            "TIMER_DEL_UNIQKEY": f"{topic}+{gone_id}", "TIMER_DELIVER_MS": str(t0 + 2500)})])
        assert cancel[0]["status"] == "OK", cancel
        again = p.call("send", mode="sync", collect_errors=True, messages=[msg(topic, "cancel", props={
            "TIMER_DEL_UNIQKEY": f"{topic}+{gone_id}"})])
        # Refused (QUERY_NOT_FOUND, "already cancelled"); the C++ client retries and reports "No route info".
        assert again[0]["status"] == "ERROR", again
        got = c.wait_messages(lambda ms: {"lvl", "abs", "sec", "now"} <= {m["keys"] for m in ms}, 20, "4 messages")
        # due a second after "gone", one in each queue: once they are in, "gone" would have come before them
        sentinels_received(p, [c], topic, 4, props={"TIMER_DELIVER_MS": str(t0 + 3500)})
        got = without_sentinels(c.messages())
        keys = sorted(m["keys"] for m in got)
        assert keys == ["abs", "lvl", "now", "sec"], keys
        at = {m["keys"]: m["store_timestamp"] for m in got}
        assert at["abs"] >= t0 + 1500 and at["lvl"] >= t0 + 2000 and at["sec"] >= t0 + 1000, (at, t0)
        assert at["abs"] < t0 + 1500 + 1500 and at["lvl"] < t0 + 2000 + 1500
        assert at["now"] < t0 + 1000
        assert {m["props"]["REAL_TOPIC"] for m in got if m["keys"] != "now"} == {topic}
        # As RocketMQ's timer: a delivered timer message keeps TIMER_DELIVER_MS and TIMER_OUT_MS (its deliver
        # time); not a relative request (TIMER_DELAY_SEC); a delivered delay level keeps none
        props = {m["keys"]: m["props"] for m in got}
        assert props["abs"]["TIMER_DELIVER_MS"] == props["abs"]["TIMER_OUT_MS"] == str(t0 + 1500), props["abs"]
        assert not props["sec"]["TIMER_DELAY_SEC"] and int(props["sec"]["TIMER_OUT_MS"]) >= t0 + 1000, props["sec"]
        assert not any(props["lvl"][k] for k in ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_OUT_MS")), props["lvl"]
    finally:
        p.close()
        c.close()
