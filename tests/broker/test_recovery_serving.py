"""A standalone recovering a large crashed store keeps its NameServer answering, and says ready only once
the broker is."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from bench.recovery_bench import QUEUES, TOPICS, build_crashed_store, rewind_checkpoint

from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient, RemotingConnectError

from ..support import Standalone

FILE_MIB = 64
ANSWER_BOUND_S = 0.5  # a NameServer answer on loopback takes a millisecond; recovery takes seconds


class Probe:
    """GET_BROKER_CLUSTER_INFO to the NameServer, back to back on one connection, from its own thread."""

    def __init__(self, node: Standalone) -> None:
        self.node = node  # its NameServer's address read at each request: a start retried on new ports moves it
        self.answers: list[tuple[float, bool]] = []  # (seconds to answer, a broker was registered)
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    async def _run(self) -> None:
        client = RemotingClient(connect_timeout=1.0)
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    resp = await client.invoke(self.node.namesrv_addr, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO),
                                               ANSWER_BOUND_S * 4)
                except RemotingConnectError:
                    await asyncio.sleep(0.02)  # not bound yet
                    continue
                except Exception as e:  # a timeout: the NameServer did not answer
                    self.failures.append(f"{type(e).__name__}: {e}")
                    client.close_connection(self.node.namesrv_addr)
                    continue
                took = time.monotonic() - t0
                if resp.code != ResponseCode.SUCCESS:
                    self.failures.append(f"code {resp.code} {resp.remark}")
                    continue
                table = fastjson.loads(resp.body_bytes()).get("brokerAddrTable") or {}
                self.answers.append((took, bool(table)))
                await asyncio.sleep(0.01)
        finally:
            await client.close()


async def queued_messages(broker_addr: str) -> int:
    """Entries in the benchmark's queues, as the broker reports them (GET_MAX_OFFSET)."""
    client = RemotingClient()
    try:
        total = 0
        for topic in TOPICS:
            for q in range(QUEUES):
                r = await client.invoke(broker_addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={
                    "topic": topic, "queueId": str(q)}), 5)
                total += int(r.ext_fields["offset"])
        return total
    finally:
        await client.close()


def test_namesrv_answers_while_the_broker_recovers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    n = build_crashed_store(data, 160 << 20, file_mib=FILE_MIB, timeout=120)
    rewind_checkpoint(data, FILE_MIB)  # every queue rebuilt: a recovery of a second or more on this store
    node = Standalone(data, {"mappedFileSizeCommitLog": str(FILE_MIB << 20)})
    with Probe(node) as probe:
        node.start(timeout=120)
        ready = len(probe.answers)
        try:
            # Ready means recovered: every message is back in its queue at once.
            assert asyncio.run(asyncio.wait_for(queued_messages(node.broker_addr), 30)) == n
            # And registered: the NameServer's next answers name the broker.
            deadline = time.monotonic() + 10
            while not any(registered for _, registered in probe.answers[ready:]) and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            node.kill()
    during = [took for took, registered in probe.answers[:ready] if not registered]
    assert not probe.failures, probe.failures[:3]
    assert len(during) >= 5, f"only {len(during)} answers before the broker was ready"
    assert max(took for took, _ in probe.answers) < ANSWER_BOUND_S
    assert any(registered for _, registered in probe.answers[ready:])
