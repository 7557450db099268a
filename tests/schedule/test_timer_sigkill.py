"""SIGKILL of the broker during a stream of timer sends and again during deliveries: every acknowledged timer
message is delivered, none early; duplicates are counted."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from pathlib import Path

from tests.broker.rawclient import pull_cmd, runtime_info, send_cmd
from tests.schedule.test_timer_broker import decode_all
from tests.support import Standalone
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.transport import RemotingClient

TOPIC = "TimerKill"
QUEUES = 4


async def stream(addr: str, acked: dict[str, int], seconds: float, delay_ms: tuple[int, int], lanes: int = 8) -> None:
    """Send timer messages from ``lanes`` concurrent senders for ``seconds``; record the acknowledged ones."""
    c = RemotingClient()
    stop = time.monotonic() + seconds

    async def lane() -> None:
        while time.monotonic() < stop:
            u = uuid.uuid4().hex.upper()
            now = int(time.time() * 1000)
            if random.random() < 0.25:  # a delay level (1 s) among the timer messages
                u = "L" + u
                deliver, props = now + 1000, {"DELAY": "1", "UNIQ_KEY": u}
            else:
                deliver = now + random.randint(*delay_ms)
                props = {"TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": u}
            cmd = send_cmd(TOPIC, f"{deliver}:{u}".encode(), queue_id=random.randrange(QUEUES), props=props)
            try:
                r = await c.invoke(addr, cmd, 2)
            except Exception:
                await asyncio.sleep(0.05)  # the broker is gone
                continue
            if r.code == ResponseCode.SUCCESS:
                acked[u] = deliver

    try:
        await asyncio.gather(*(lane() for _ in range(lanes)))
    finally:
        await c.close()


async def drain(addr: str) -> list:
    c = RemotingClient()
    out = []
    try:
        for q in range(QUEUES):
            off = 0
            while True:
                r = await c.invoke(addr, pull_cmd(TOPIC, q, off, max_nums=32), 5)
                if r.code != ResponseCode.SUCCESS:
                    break
                msgs = decode_all(r.body_bytes())
                out += msgs
                off += len(msgs)
        info = await runtime_info(c, addr)
    finally:
        await c.close()
    return out, info  # type: ignore[return-value]


def test_sigkill_during_sends_and_deliveries_loses_nothing(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "data", {"timerPrecisionMs": "10", "messageDelayLevel": "1s 2s", "mappedFileSizeCommitLog": str(16 * 1024 * 1024)})
    s.start()
    acked: dict[str, int] = {}
    try:
        async def phase1() -> None:
            # Kill mid-stream: messages due 1.5-3 s later are parked, some in flight.
            sender = asyncio.create_task(stream(s.broker_addr, acked, 1.5, (1500, 3000)))
            await asyncio.sleep(1.0)
            await asyncio.get_running_loop().run_in_executor(None, s.kill)
            await sender

        asyncio.run(phase1())
        n1 = len(acked)
        assert n1 > 50, "too few sends to mean anything"
        s.start()

        async def phase2() -> None:
            # Deliveries are under way (phase 1's messages fall due, and these): kill in the middle of them.
            sender = asyncio.create_task(stream(s.broker_addr, acked, 1.2, (100, 800)))
            await asyncio.sleep(1.0)
            await asyncio.get_running_loop().run_in_executor(None, s.kill)
            await sender

        asyncio.run(phase2())
        s.start()
        # Drain until every acknowledged message has been delivered (or 15 s past the last one's due time).
        deadline = max(acked.values()) / 1000 + 15
        while True:
            msgs, info = asyncio.run(drain(s.broker_addr))
            if {m.properties.get("UNIQ_KEY") for m in msgs} >= acked.keys() or time.time() > deadline:
                break
            time.sleep(0.2)
    finally:
        s.stop()
    got = Counter(m.properties.get("UNIQ_KEY") for m in msgs)
    missing = [u for u in acked if u not in got]
    dups_timer = sum(n - 1 for u, n in got.items() if n > 1 and not u.startswith("L"))
    dups_level = sum(n - 1 for u, n in got.items() if n > 1 and u.startswith("L"))
    early = [m for m in msgs if m.store_timestamp < int(m.body.split(b":")[0])]
    levels = sum(1 for u in acked if u.startswith("L"))
    print(f"acked {len(acked)} ({n1} before the first kill; {levels} delay-level), delivered {len(msgs)}, "
          f"duplicates: timer {dups_timer}, delay level {dups_level}; early {len(early)}; broker: "
          f"timer.duplicatesSkipped {info.get('timer.duplicatesSkipped')} timer.redelivered {info.get('timer.redelivered')}")
    assert not missing, f"{len(missing)} acknowledged scheduled messages lost"
    assert not early, f"{len(early)} delivered early"
    assert dups_timer <= int(info.get("timer.redelivered", "0")), "unreported timer duplicates"
