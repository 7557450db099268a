"""``updateBrokerConfig -k messageDelayLevel`` while the broker runs (broker/schedule/delay_table.py): messages
already pending keep the deliver time they were given, new ones use the new table, the change is written to
the broker's config file and reaches a slave, and a table that would queue new messages behind later ones
is refused. Sent and received with TidalMQ's client, the table changed with TidalMQ's mqadmin and Admin."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.helpers import create_topic
from tests.compat.harness import uniq
from tests.ha.support import Slave, master_settings
from tests.mqadmin.support import run_mqadmin
from tests.support import Standalone, wait_for
from tidalmq.client.admin import Admin
from tidalmq.client.admin_data import AdminError
from tidalmq.client.message import Message, MessageExt
from tidalmq.client.producer import Producer
from tidalmq.client.pull_consumer import PullConsumer
from tidalmq.remoting.codes import ResponseCode

SLACK_MS = 1500  # the delay-level service's wake-up and a loaded 2-core machine


class FromFile(Standalone):
    """A standalone started with ``-c FILE`` (the operator's broker.conf)."""

    def __init__(self, data_dir: Path, conf: Path, settings: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, settings)
        self.conf = conf

    def command(self) -> list[str]:
        return [*super().command(), "-c", str(self.conf)]


class SlaveFromFile(Slave):
    def __init__(self, data_dir: Path, namesrv_addr: str, conf: Path) -> None:
        super().__init__(data_dir, namesrv_addr)
        self.conf = conf

    def command(self) -> list[str]:
        return [*super().command(), "-c", str(self.conf)]


def _conf(tmp_path: Path, levels: str) -> Path:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"# the operator's file\nmessageDelayLevel={levels}\n")
    return conf


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FromFile]:
    with FromFile(tmp_path / "data", _conf(tmp_path, request.param)) as s:
        yield s


def now_ms() -> int:
    return int(time.time() * 1000)


def update(s: Standalone, levels: str) -> str:
    """``mqadmin updateBrokerConfig -k messageDelayLevel``: its output, or AssertionError with its error."""
    r = run_mqadmin(s.namesrv_addr, "updateBrokerConfig", "-b", s.broker_addr, "-k", "messageDelayLevel", "-v", levels)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    return r.stdout


async def send(p: Producer, topic: str, body: bytes, level: int) -> int:
    """Sends at ``level``; the time just before (the message's deliver time is at least that plus its delay)."""
    at = now_ms()
    r = await p.send(Message(topic, body, delay_level=level))
    assert r.ok
    return at


async def receive(c: PullConsumer, topic: str, n: int, timeout: float = 30.0) -> list[MessageExt]:
    """The first ``n`` messages of the topic's one queue, long-polled."""
    (mq,) = await c.fetch_queues(topic)
    got: list[MessageExt] = []
    offset = 0
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"{len(got)} of {n} arrived in {timeout}s"
        r = await c.pull(mq, offset, 32, block_timeout=2.0)
        got += r.messages
        offset = r.next_begin_offset
    return got


def arrived(m: MessageExt, sent_at: int, delay_ms: int) -> int:
    """How late ``m`` was stored in its topic against ``sent_at + delay_ms``; fails if early."""
    late = m.store_timestamp - (sent_at + delay_ms)
    assert late >= 0, f"{m.body!r} delivered {-late} ms early"
    return late


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))  # type: ignore[arg-type]


@pytest.mark.parametrize("broker", ["1s 2s"], indirect=True)
def test_new_messages_take_the_new_table_pending_ones_keep_their_time(broker: FromFile) -> None:
    s, topic = broker, uniq("LiveLevels")

    async def scenario() -> None:
        await create_topic(s.namesrv_addr, topic, 1)
        async with Producer(uniq("PID_Live"), s.namesrv_addr) as p, PullConsumer(uniq("CID_Live"), s.namesrv_addr) as c:
            a = await send(p, topic, b"A", 2)  # 2 s, the table it was sent under
            assert update(s, "1s 5s") == f"update broker config success, {s.broker_addr}\n"
            b = await send(p, topic, b"B", 2)  # 5 s
            first, second = await receive(c, topic, 2)
            assert (first.body, second.body) == (b"A", b"B")
            assert arrived(first, a, 2000) < SLACK_MS, "the pending message was moved to the new delay"
            assert arrived(second, b, 5000) < SLACK_MS
            async with Admin(s.namesrv_addr) as admin:
                assert (await admin.broker_config(s.broker_addr))["messageDelayLevel"] == "1s 5s"

    run(scenario())
    # written back in place, the operator's comment kept
    assert s.conf.read_text() == "# the operator's file\nmessageDelayLevel=1s 5s\n"


@pytest.mark.parametrize("broker", ["1s 6s"], indirect=True)
def test_a_table_that_overtakes_pending_messages_is_refused(broker: FromFile) -> None:
    s, topic = broker, uniq("LiveRefused")

    async def scenario() -> None:
        await create_topic(s.namesrv_addr, topic, 1)
        async with Producer(uniq("PID_Live"), s.namesrv_addr) as p, PullConsumer(uniq("CID_Live"), s.namesrv_addr) as c:
            held = await send(p, topic, b"held", 2)  # due in 6 s
            with pytest.raises(AssertionError) as refused:
                update(s, "1s 2s")  # new level-2 messages would be due before it, behind it in its queue
            err = str(refused.value)
            assert f"CODE: {ResponseCode.SYSTEM_ERROR} " in err and "delay level 2 (6s) holds messages due until" in err, err
            assert "add 2s as a new level" in err, err
            async with Admin(s.namesrv_addr) as admin:
                with pytest.raises(AdminError) as by_client:
                    await admin.update_broker_config(s.broker_addr, {"messageDelayLevel": "1s 3s"})
                assert by_client.value.code == ResponseCode.SYSTEM_ERROR
                assert (await admin.broker_config(s.broker_addr))["messageDelayLevel"] == "1s 6s"
                # Longer, or a new level: accepted while the message waits.
                await admin.update_broker_config(s.broker_addr, {"messageDelayLevel": "1s 6s 2s"})
            quick = await send(p, topic, b"quick", 3)
            first, second = await receive(c, topic, 2)
            assert (first.body, second.body) == (b"quick", b"held")
            assert arrived(first, quick, 2000) < SLACK_MS and arrived(second, held, 6000) < SLACK_MS

    run(scenario())
    assert s.conf.read_text() == "# the operator's file\nmessageDelayLevel=1s 6s 2s\n"


@pytest.mark.parametrize("broker", ["1s 3s"], indirect=True)
def test_a_dropped_level_is_still_delivered_across_a_sigkill(broker: FromFile) -> None:
    """Level 2 is dropped while a message waits in it, then the broker is killed: restarted with the file's
    one-level table, the message still goes out at the time it was given, and a DELAY=2 sent after the
    change went out at the new maximum, level 1."""
    s, topic = broker, uniq("LiveDropped")

    async def before_kill() -> tuple[int, int]:
        await create_topic(s.namesrv_addr, topic, 1)
        async with Producer(uniq("PID_Live"), s.namesrv_addr) as p:
            kept = await send(p, topic, b"kept", 2)  # due in 3 s
            update(s, "1s")
            capped = await send(p, topic, b"capped", 2)  # above the maximum: level 1
        return kept, capped

    async def after_restart(kept: int, capped: int) -> None:
        async with PullConsumer(uniq("CID_Live"), s.namesrv_addr) as c:
            got = {m.body: m for m in await receive(c, topic, 2)}
        assert set(got) == {b"kept", b"capped"}
        arrived(got[b"kept"], kept, 3000)
        arrived(got[b"capped"], capped, 1000)
        assert got[b"capped"].properties.get("DELAY") is None and got[b"kept"].properties.get("TIMER_OUT_MS") is None

    times: list[int] = []
    run(_collect(before_kill(), times))
    s.kill()
    assert s.conf.read_text() == "# the operator's file\nmessageDelayLevel=1s\n"
    s.start()
    run(after_restart(*times))


async def _collect(coro: object, into: list[int]) -> None:
    into.extend(await coro)  # type: ignore[misc]


def test_a_slave_takes_its_masters_table(tmp_path: Path) -> None:
    """The slave's metadata sync (every 10 s) brings the master's new table; the slave applies it and writes
    it to its own config file."""
    levels = "1s 5s 1d"
    with Standalone(tmp_path / "m", master_settings("ASYNC_MASTER")) as master, \
            SlaveFromFile(tmp_path / "s", master.namesrv_addr, _conf(tmp_path, "1s 5s")) as slave:
        update(master, levels)

        async def slave_levels() -> str:
            async with Admin(master.namesrv_addr) as admin:
                return (await admin.broker_config(slave.broker_addr))["messageDelayLevel"]

        wait_for(lambda: asyncio.run(slave_levels()) == levels, 30, 0.5, "the slave's messageDelayLevel")
        assert slave.conf.read_text() == f"# the operator's file\nmessageDelayLevel={levels}\n"
