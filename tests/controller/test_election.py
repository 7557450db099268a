"""Election and SyncStateSet rules against a real etcd (broker/controller/replicas_manager.py, controller/replicas.py), with
stand-in brokers: each ReplicasManager ticks by hand and its broker (its replication side too) records what it
was told to do."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.broker.rawclient import run
from tests.controller.support import Etcd
from tidalmq.broker.config import BrokerConfig
from tidalmq.broker.controller.replicas_manager import ReplicasManager
from tidalmq.controller.epoch_file import EpochEntry
from tidalmq.controller.etcd import EtcdClient
from tidalmq.controller.replicas import GroupRecord, Replica, elect


class FakeBroker:
    def __init__(self, root: Path, etcd: Etcd, broker_id: int, max_lag_ms: int = 15000) -> None:
        self.config = BrokerConfig(broker_name="g", broker_id=broker_id, listen_port=10000 + broker_id * 10,
                                   ha_listen_port=10001 + broker_id * 10, enable_controller_mode=True,
                                   controller_etcd_endpoints=etcd.endpoint, sync_state_set_max_lag_ms=max_lag_ms)
        self.store_config = SimpleNamespace(store_path_root_dir=str(root / str(broker_id)))
        self.store = SimpleNamespace(max_phy_offset=0)
        ha_client = SimpleNamespace(master="")
        ha_client.update_master_address = lambda a: setattr(ha_client, "master", a)
        slave_sync = SimpleNamespace(master="")
        slave_sync.update_master_addr = lambda a: setattr(slave_sync, "master", a)
        self.ha_client, self.slave_sync = ha_client, slave_sync
        self.ha_service = None  # the master's HAService: the SyncStateSet is published to it
        self.promoted = 0
        self.fenced = 0

    async def become_master(self) -> None:
        self.promoted += 1

    def fence(self) -> None:  # BrokerReplication's
        self.fenced += 1

    def manager(self) -> ReplicasManager:
        return ReplicasManager(self.config, self.store, self.store_config.store_path_root_dir,
                               self, self.become_master)  # type: ignore[arg-type]


def _group(tmp_path: Path, etcd: Etcd, n: int, **kw: Any) -> list[tuple[FakeBroker, ReplicasManager]]:
    out = []
    for i in range(1, n + 1):
        b = FakeBroker(tmp_path, etcd, i, **kw)
        out.append((b, b.manager()))
    return out


async def _tick_until(managers: list[ReplicasManager], cond: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        for m in managers:
            await m.tick()
        await asyncio.sleep(0.05)


def test_first_master_sync_state_set_shrink_and_election_from_it(tmp_path: Path, etcd: Etcd) -> None:
    async def scenario() -> None:
        (b1, m1), (b2, m2), (b3, m3) = _group(tmp_path, etcd, 3, max_lag_ms=400)
        await m1.tick()  # no record yet: the first to ask is master of epoch 1
        assert m1.is_master and b1.promoted == 1 and m1.record is not None
        assert (m1.record.master_epoch, m1.record.sync_state_set) == (1, frozenset({1}))
        await m2.tick()
        await m3.tick()
        assert not m2.is_master and b2.ha_client.master == "127.0.0.1:10011"  # follows the record's master
        assert b3.slave_sync.master == "127.0.0.1:10010"
        # Caught up (same CommitLog end): the master lets both into the SyncStateSet.
        await _tick_until([m2, m3, m1], lambda: m1.record is not None and m1.record.sync_state_set == {1, 2, 3},
                          "SyncStateSet {1,2,3}")
        # Broker 3 stops catching up while 1 and 2 move on: out of the set after syncStateSetMaxLagMs.
        b1.store.max_phy_offset = b2.store.max_phy_offset = 5000
        await _tick_until([m2, m3, m1], lambda: m1.record is not None and m1.record.sync_state_set == {1, 2},
                          "broker 3 dropped from the SyncStateSet")
        sse = m1.record.sync_state_set_epoch
        # The master dies (its lease gone). 3 is not in the set: never elected; 2 is.
        await m1.etcd.lease_revoke(m1.lease)
        await m3.tick()
        assert not m3.is_master and b3.promoted == 0
        await m2.tick()
        assert not m2.is_master  # the master seen gone once: every replica publishes a fresh offset first
        await _tick_until([m2], lambda: m2.is_master, "broker 2 elected")
        assert b2.promoted == 1 and m2.record is not None
        assert m2.record.master_epoch == 2 and m2.record.sync_state_set == {2}
        assert m2.record.sync_state_set_epoch == sse + 1
        assert list(m2.record.epochs) == [EpochEntry(1, 0), EpochEntry(2, 5000)]
        assert m2.epoch_file.entries == list(m2.record.epochs)  # persisted with the term
        await m3.tick()
        assert b3.ha_client.master == "127.0.0.1:10021"  # follows the new master
        # The old master comes back alive: it is no longer master and must not take writes; with a
        # longer CommitLog than the new master's (a divergent tail) it is still never in sync.
        m1.lease = 0
        b1.store.max_phy_offset = 9000
        await m1.tick()
        assert b1.fenced == 1 and not m1.is_master
        for _ in range(3):
            await m2.tick()
            await m1.tick()
        assert m2.record is not None and 1 not in m2.record.sync_state_set
        # Broker 3 follows epoch 2 and catches up: it joins.
        b3.store.max_phy_offset = 5000
        await _tick_until([m3, m2], lambda: m2.record is not None and m2.record.sync_state_set == {2, 3},
                          "broker 3 back in the SyncStateSet")

    run(scenario(), 60)


def test_two_candidates_racing_for_one_term_one_wins(tmp_path: Path, etcd: Etcd) -> None:
    """Both see the master gone and both qualify by their own view: etcd's revision compare lets one
    transaction through; the other's fails and it follows."""
    async def scenario() -> None:
        client = EtcdClient(etcd.endpoint)
        key = "/race/record"
        rec = GroupRecord(1, "a:1", "a:2", 1, frozenset({1, 2, 3}), 1, (EpochEntry(1, 0),))
        from tidalmq.controller.etcd import mod_revision_is, put_op
        assert await client.txn([mod_revision_is(key, 0)], [put_op(key, rec.encode())])
        kv = await client.get(key)
        assert kv is not None
        # Each candidate thinks it is the best (stale views of the other's offset).
        r2, r3 = Replica(2, "b:1", "b:2", 100), Replica(3, "c:1", "c:2", 100)
        won2 = elect(rec, {2: r2, 3: Replica(3, "c:1", "c:2", 50)}, r2)
        won3 = elect(rec, {3: r3, 2: Replica(2, "b:1", "b:2", 50)}, r3)
        assert won2 is not None and won3 is not None
        results = await asyncio.gather(
            client.txn([mod_revision_is(key, kv.mod_revision)], [put_op(key, won2.encode())]),
            client.txn([mod_revision_is(key, kv.mod_revision)], [put_op(key, won3.encode())]))
        assert sorted(results) == [False, True]
        final = await client.get(key)
        assert final is not None
        record = GroupRecord.decode(final.value)
        assert record.master_epoch == 2 and record.master_broker_id == (2 if results[0] else 3)

    run(scenario(), 30)


def test_no_election_while_the_master_lives_or_from_outside_the_set() -> None:
    rec = GroupRecord(1, "a:1", "a:2", 4, frozenset({1, 2}), 7, (EpochEntry(4, 0),))
    r1, r2, r3 = (Replica(i, f"h{i}:1", f"h{i}:2", 10) for i in (1, 2, 3))
    assert elect(rec, {1: r1, 2: r2, 3: r3}, r2) is None  # master alive
    assert elect(rec, {2: r2, 3: r3}, r3) is None  # 3 is not in the SyncStateSet
    ahead = Replica(3, "h3:1", "h3:2", 99)
    rec3 = GroupRecord(1, "a:1", "a:2", 4, frozenset({1, 2, 3}), 7, (EpochEntry(4, 0),))
    assert elect(rec3, {2: r2, 3: ahead}, r2) is None  # 3 has more of the CommitLog: 3's turn
    won = elect(rec3, {2: r2, 3: ahead}, ahead)
    assert won is not None and (won.master_broker_id, won.master_epoch) == (3, 5)
    assert won.epochs[-1] == EpochEntry(5, 99)


def test_a_master_restarted_before_its_lease_ran_out_starts_a_new_term(tmp_path: Path, etcd: Etcd) -> None:
    async def scenario() -> None:
        (b1, m1), (b2, m2) = _group(tmp_path, etcd, 2)
        await m1.tick()
        assert m1.is_master and m1.record is not None and m1.record.master_epoch == 1
        b1.store.max_phy_offset = 700
        # The process restarts (a new manager, a new lease) while etcd still names it master.
        again = b1.manager()
        await again.prepare()
        await again.tick()
        assert again.is_master and again.record is not None
        assert again.record.master_epoch == 2 and list(again.record.epochs) == [EpochEntry(1, 0), EpochEntry(2, 700)]
        await m2.tick()
        assert not m2.is_master and b2.ha_client.master == "127.0.0.1:10011"
        b2.store.max_phy_offset = 700  # caught up in epoch 2: back in the SyncStateSet
        await _tick_until([m2, again], lambda: again.record is not None and again.record.sync_state_set == {1, 2},
                          "SyncStateSet {1,2}")
        # A graceful stop revokes the lease, and the stopped manager renews nothing: broker 2 takes over
        # well before the 3 s TTL of a lease left to expire.
        await m2.etcd.lease_revoke(m1.lease)  # the first incarnation's lease, which nothing renews
        t0 = time.monotonic()
        await again.stop()
        await _tick_until([again, m2], lambda: m2.is_master, "broker 2 elected after the stop", timeout=5)
        assert time.monotonic() - t0 < 3.0
        assert m2.record is not None and m2.record.master_epoch == 3

    run(scenario(), 30)
