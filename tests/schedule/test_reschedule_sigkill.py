"""Reschedules survive a SIGKILL of the broker: killed in the middle of a stream of them (timer messages and
delay-level ones, earlier and later), restarted, every message is delivered exactly once; one whose
reschedule was acknowledged at its new time, never before it and never at its old time; one whose reschedule
was not acknowledged at one of the two. And the state a kill between a delay-level reschedule's two writes
leaves (delayReschedule.json names the message, no copy was stored): the message goes out at its old time."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

from tests.client.helpers import create_topic
from tests.compat.harness import uniq
from tests.schedule.test_reschedule import now_ms, once_each, receive_until
from tests.support import Standalone, wait_for
from tidalmq.client.admin import Admin
from tidalmq.client.message import Message
from tidalmq.client.producer import Producer
from tidalmq.client.pull_consumer import PullConsumer

OLD_MS = 15_000  # every message's first delivery time, from t0: later than a kill and a restart take
N = 24  # messages of each kind


def test_sigkill_in_a_stream_of_reschedules(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "data", {"messageDelayLevel": "1s 3s 15s"})
    s.start()
    topic = uniq("ReschedKill")
    sent: dict[str, tuple[bytes, int]] = {}  # msg id -> (body, its first deliver time)
    acked: dict[str, int] = {}  # msg id -> the new deliver time, acknowledged
    asked: dict[str, int] = {}
    rng = random.Random()
    t0 = now_ms()
    try:
        async def before_kill() -> None:
            await create_topic(s.namesrv_addr, topic, 1)
            async with Producer(uniq("PID_K"), s.namesrv_addr, retry_times_when_send_failed=0) as p:
                for i in range(N):
                    r = await p.send(Message(topic, f"timer-{i}".encode(), deliver_time_ms=t0 + OLD_MS))
                    sent[r.msg_id] = (f"timer-{i}".encode(), t0 + OLD_MS)
                    r = await p.send(Message(topic, f"level-{i}".encode(), delay_level=3))
                    sent[r.msg_id] = (f"level-{i}".encode(), t0 + OLD_MS)
                kill_after = rng.randint(N // 2, N + N // 2)

                async def lane(ids: list[str]) -> None:
                    for mid in ids:
                        new = t0 + (rng.randint(4000, 7000) if rng.random() < 0.6 else rng.randint(18_000, 20_000))
                        asked[mid] = new
                        try:
                            await p.reschedule(topic, mid, deliver_time_ms=new, timeout=3)
                        except Exception:
                            return  # the broker is gone
                        acked[mid] = new
                        if len(acked) == kill_after:
                            s.kill()  # SIGKILL, whatever the other lanes are doing

                ids = list(sent)
                rng.shuffle(ids)
                await asyncio.gather(*(lane(ids[k::4]) for k in range(4)))

        asyncio.run(asyncio.wait_for(before_kill(), 60))
        s.kill()
        assert len(acked) >= N // 2, "the kill came before the reschedules it is about"
        s.start()

        async def after_restart() -> list:
            async with Producer(uniq("PID_K"), s.namesrv_addr) as p:
                await p.send(Message(topic, b"sentinel", deliver_time_ms=t0 + 21_000))
            async with PullConsumer(uniq("CID_K"), s.namesrv_addr) as c:
                return await receive_until(c, topic, b"sentinel", timeout=60)

        got = once_each(asyncio.run(asyncio.wait_for(after_restart(), 90)))
    finally:
        s.kill()
    by_body = {body: mid for mid, (body, _) in sent.items()}
    assert set(got) - {b"sentinel"} == set(by_body), "a message was lost"
    for body, m in got.items():
        if body == b"sentinel":
            continue
        mid = by_body[body]
        old = sent[mid][1]
        if mid in acked:
            new = acked[mid]
            assert m.store_timestamp >= new, f"{body!r} delivered before its new time"
            if new < old:
                assert m.store_timestamp < old, f"{body!r} delivered at its old time, not its new one"
        else:  # in flight or never asked: either time, never before the earlier
            assert m.store_timestamp >= min(old, asked.get(mid, old)), f"{body!r} delivered early"
    print(f"{len(acked)} reschedules acknowledged of {len(asked)} asked before the kill, {len(sent)} messages")


def test_a_delay_level_reschedule_cut_between_its_two_writes_leaves_the_message_as_it_was(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "data", {"messageDelayLevel": "1s 5s"})
    s.start()
    topic = uniq("ReschedCut")
    try:
        async def send() -> tuple[int, list]:
            await create_topic(s.namesrv_addr, topic, 1)
            async with Producer(uniq("PID_C"), s.namesrv_addr) as p:
                t = now_ms()
                r = await p.send(Message(topic, b"cut", delay_level=2))
            async with Admin(s.namesrv_addr) as admin:
                for _ in range(50):  # indexed by reput within moments
                    parked = await admin.scheduled_messages(topic, r.msg_id)
                    if parked:
                        return t, [r.msg_id, parked[0].commit_log_offset, parked[0].queue_offset]
                    await asyncio.sleep(0.1)
            raise AssertionError("the parked message was never indexed")

        t, (mid, phys, qoff) = asyncio.run(send())
        (cfg_dir,) = (p.parent for p in s.data_dir.rglob("topics.json"))
        wait_for(lambda: topic in (cfg_dir / "topics.json").read_text(), 10, what="the topic persisted")
        s.kill()
        # What the broker had written when killed after the journal and before the copy.
        journal = cfg_dir / "delayReschedule.json"
        journal.write_text(json.dumps({"moves": [{"level": 2, "phys": phys, "queueOffset": qoff, "topic": topic,
                                                  "uniq": mid}]}))
        s.start()

        async def arrives() -> None:
            async with PullConsumer(uniq("CID_C"), s.namesrv_addr) as c:
                (m,) = await receive_until(c, topic, b"cut")
                assert m.msg_id == mid and m.store_timestamp >= t + 5000

        asyncio.run(asyncio.wait_for(arrives(), 60))
        # rewritten at start, before the level's delivery: the entry had no copy behind it
        assert json.loads(journal.read_text())["moves"] == []
    finally:
        s.stop()
