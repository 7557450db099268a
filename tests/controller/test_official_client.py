"""The official 4.x client (``rocketmq==0.4.4``, C++ core) across a controller-mode failover: what its
producer had acknowledged is consumed from the new master, which it finds through the NameServer's route
(brokerId 0 at the new address) and sends to again (a failed send makes it fetch the route at once)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.compat.harness import require_official_client

require_official_client()

from tests.broker.rawclient import run  # noqa: E402
from tests.compat.conftest import Agents  # noqa: E402
from tests.compat.harness import (  # noqa: E402
    AgentError,
    by_key,
    create_topic,
    msg,
    send_acknowledged,
    uniq,
    wait_route,
)
from tests.controller.support import Etcd  # noqa: E402
from tests.controller.test_failover import Replica, _master  # noqa: E402
from tests.ha.support import NameServer, wait_info  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402

pytestmark = pytest.mark.compat


async def _find_master(replicas: list[Replica], wait_sync_state_set: bool) -> Replica:
    client = RemotingClient()
    try:
        m = await _master(client, replicas, 30)
        if wait_sync_state_set:
            await wait_info(client, m.broker_addr, "SyncStateSet {1,2,3}",
                            lambda t: t.get("controllerSyncStateSet") == "1,2,3", 30)
        return m
    finally:
        await client.close()


def test_the_official_client_sends_and_consumes_across_a_failover(tmp_path: Path, etcd: Etcd) -> None:
    topic = uniq("CtlFailover")
    agents = Agents(tmp_path)
    with NameServer(tmp_path / "ns") as ns:
        replicas = [Replica(tmp_path / f"r{i}", ns.namesrv_addr, i, etcd) for i in (1, 2, 3)]
        try:
            for r in replicas:
                r.start()
            old = run(_find_master(replicas, True), 60)
            create_topic(ns.namesrv_addr, topic)
            wait_route(ns.namesrv_addr, topic)
            p = agents.new("producer")
            p.call("producer_start", group=uniq("PG"), namesrv=ns.namesrv_addr)
            sent = send_acknowledged(p, [msg(topic, f"a{i}", keys=f"a{i}") for i in range(40)])
            acked = {f"a{i}" for i, r in enumerate(sent) if r is not None and r["status"] == "OK"}
            assert len(acked) == 40, sent[:3]

            old.kill()
            new = run(_find_master([r for r in replicas if r is not old], False), 60)
            # The producer keeps sending; once its route names the new master, sends are acknowledged.
            deadline = time.monotonic() + 60
            i = 0
            while time.monotonic() < deadline:
                answer: dict[str, Any] | None
                try:
                    answer = p.call("send", mode="sync", messages=[msg(topic, f"b{i}", keys=f"b{i}")], timeout=40)[0]
                except AgentError:  # the C++ client raises while its route names only the dead master
                    answer = None
                if answer is not None and answer["status"] == "OK":
                    acked.add(f"b{i}")
                    break
                i += 1
                time.sleep(0.5)
            assert any(k.startswith("b") for k in acked), "no send acknowledged by the new master in 60 s"

            c = agents.new("consumer")
            c.call("consumer_start", cid="c1", group=uniq("CG"), topic=topic, namesrv=ns.namesrv_addr,
                   expr="*", model="CLUSTERING", props=[], orderly=False)
            got = c.wait_messages(lambda ms: acked <= {m["keys"] for m in ms}, 60,
                                  f"every acknowledged message, from the new master {new.broker_addr}")
            assert acked <= set(by_key(got))
        finally:
            agents.close_all()
            for r in replicas:
                r.kill()
