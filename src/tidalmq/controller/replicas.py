"""A broker group's replica state as kept in etcd (RocketMQ 5's ReplicasInfoManager / SyncStateInfo), and
the pure rules that change it: who may be elected (ElectMasterRequest) and how the master shrinks or
expands its SyncStateSet (AlterSyncStateSetRequest). The manager applies them through etcd transactions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from tidalmq.controller.epoch_file import EpochEntry


def group_prefix(cluster: str, broker_name: str) -> str:
    return f"/tidalmq/controller/{cluster}/{broker_name}/"


@dataclass(frozen=True)
class GroupRecord:
    """The ``record`` key: the group's master and its term, and which replicas are in sync."""

    master_broker_id: int
    master_address: str
    master_ha_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    # The group's history: the CommitLog offset at which each master term began.
    epochs: tuple[EpochEntry, ...] = field(default=())

    def encode(self) -> bytes:
        return json.dumps({
            "masterBrokerId": self.master_broker_id, "masterAddress": self.master_address,
            "masterHaAddress": self.master_ha_address, "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch,
            "epochs": [list(e) for e in self.epochs],
        }).encode()

    @classmethod
    def decode(cls, raw: bytes) -> GroupRecord:
        d: dict[str, Any] = json.loads(raw)
        return cls(int(d["masterBrokerId"]), str(d["masterAddress"]), str(d["masterHaAddress"]),
                   int(d["masterEpoch"]), frozenset(int(i) for i in d["syncStateSet"]),
                   int(d["syncStateSetEpoch"]), tuple(EpochEntry(int(e), int(s)) for e, s in d.get("epochs", [])))


@dataclass(frozen=True)
class Replica:
    """An ``alive/<brokerId>`` key, held by the replica's lease: gone when the replica stops renewing it."""

    broker_id: int
    broker_addr: str
    ha_server_addr: str
    max_phy_offset: int
    # The last epoch in the replica's epoch file: a replica counts as caught up only in the master's
    # own epoch (a length compared across terms says nothing: an old master's divergent tail is long).
    epoch: int = 0

    def encode(self) -> bytes:
        return json.dumps({"brokerId": self.broker_id, "brokerAddr": self.broker_addr,
                           "haServerAddr": self.ha_server_addr, "maxPhyOffset": self.max_phy_offset,
                           "epoch": self.epoch}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Replica:
        d = json.loads(raw)
        return cls(int(d["brokerId"]), str(d["brokerAddr"]), str(d["haServerAddr"]), int(d["maxPhyOffset"]),
                   int(d.get("epoch", 0)))


def first_master(me: Replica) -> GroupRecord:
    """The group's first record: the first replica to ask is master of epoch 1, alone in sync."""
    return GroupRecord(me.broker_id, me.broker_addr, me.ha_server_addr, 1, frozenset({me.broker_id}), 1,
                       (EpochEntry(1, me.max_phy_offset),))


def elect(record: GroupRecord, alive: dict[int, Replica], me: Replica) -> GroupRecord | None:
    """The record naming ``me`` master of the next epoch, or None when ``me`` must not be elected.

    Only when the master's lease is gone, and only a replica in the SyncStateSet (what the master
    acknowledged was on them): of those alive, the one with the most CommitLog (ties: the lowest id),
    so that it holds every message another candidate could hold. Its term starts at its CommitLog's end;
    the SyncStateSet becomes itself alone, and grows again as the others catch up."""
    if record.master_broker_id in alive or me.broker_id not in record.sync_state_set:
        return None
    candidates = [r for i, r in alive.items() if i in record.sync_state_set]
    if not candidates:
        return None
    best = max(candidates, key=lambda r: (r.max_phy_offset, -r.broker_id))
    if best.broker_id != me.broker_id:
        return None
    return new_term(record, me)


def new_term(record: GroupRecord, me: Replica) -> GroupRecord:
    """``me`` master of the next epoch, from its CommitLog's end, alone in the SyncStateSet (elected, or
    named master before a restart)."""
    epoch = record.master_epoch + 1
    return GroupRecord(me.broker_id, me.broker_addr, me.ha_server_addr, epoch, frozenset({me.broker_id}),
                       record.sync_state_set_epoch + 1, record.epochs + (EpochEntry(epoch, me.max_phy_offset),))


def alter_sync_state_set(record: GroupRecord, in_sync: set[int]) -> GroupRecord | None:
    """The master's new SyncStateSet (itself and ``in_sync``), or None when it is unchanged."""
    wanted = frozenset(in_sync | {record.master_broker_id})
    if wanted == record.sync_state_set:
        return None
    return replace(record, sync_state_set=wanted, sync_state_set_epoch=record.sync_state_set_epoch + 1)


class CatchUpTracker:
    """The master's view of each replica's lag (RocketMQ's lastCaughtUpTimestamp): a replica caught up at
    the latest time the master's CommitLog end was at or below what the replica now reports."""

    def __init__(self) -> None:
        self._samples: list[tuple[float, int]] = []  # (time, master's max offset), oldest first
        self.last_caught_up: dict[int, float] = {}

    def sample(self, now: float, master_max: int, keep_s: float) -> None:
        self._samples.append((now, master_max))
        while len(self._samples) > 1 and self._samples[0][0] < now - keep_s:
            self._samples.pop(0)

    def report(self, broker_id: int, offset: int) -> None:
        for t, master_max in reversed(self._samples):
            if master_max <= offset:
                self.last_caught_up[broker_id] = max(self.last_caught_up.get(broker_id, 0.0), t)
                return

    def in_sync(self, alive: set[int], now: float, max_lag_s: float) -> set[int]:
        return {i for i in alive if now - self.last_caught_up.get(i, float("-inf")) <= max_lag_s}
