"""ReplicasManager: one broker's side of controller mode, an asyncio task on the broker's loop.

Each tick (a third of the lease TTL) it renews its lease, publishes its ``alive/<brokerId>`` key (address,
HA address, CommitLog end) under that lease, reads the group's keys and acts on the ``record``:

- no record: it creates one naming itself master of epoch 1 (a transaction that holds only if the key
  still does not exist);
- the record names another master whose lease is gone: it tries ``elect`` (replicas.py), a transaction
  that holds only if the record is still the one it read (its mod revision), and promotes itself;
- the record names it master: it moves the SyncStateSet by the replicas' lag, by the same kind of
  transaction; had it restarted, it first starts a new term;
- the record names another live master: it follows it (HA client and SlaveSynchronize) — or, if it was
  master itself, it stops taking writes (it has been replaced; a restart rejoins it as a slave).

Every change to the record is one etcd transaction comparing the revision read: two replicas cannot both
win a term, whatever their timing. That is where consensus comes from; nothing here votes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tidalmq.controller.epoch_file import EpochFile, consistent_offset
from tidalmq.controller.etcd import EtcdClient, EtcdError, mod_revision_is, put_op
from tidalmq.controller.replicas import (
    CatchUpTracker,
    GroupRecord,
    Replica,
    alter_sync_state_set,
    elect,
    first_master,
    group_prefix,
    new_term,
)

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.replication import BrokerReplication
    from tidalmq.store.api import MessageStore

log = logging.getLogger(__name__)


class ReplicasManager:
    def __init__(self, config: BrokerConfig, store: MessageStore, store_path_root_dir: str,
                 replication: BrokerReplication, promote: Callable[[], Awaitable[None]]) -> None:
        """``replication``: the broker's HA side, told whom to follow and fenced when replaced; ``promote``:
        makes the broker master (BrokerController.become_master)."""
        self.config = config
        self.store = store
        self.replication = replication
        self.promote = promote
        cfg = config
        self.broker_id = cfg.broker_id  # the replica's own id; the NameServer sees 0 while it is master
        self.etcd = EtcdClient(cfg.controller_etcd_endpoints)
        self.prefix = group_prefix(cfg.broker_cluster_name, cfg.broker_name)
        self.record_key = self.prefix + "record"
        self.alive_key = f"{self.prefix}alive/{self.broker_id}"
        self.ttl = cfg.controller_lease_ttl_seconds
        self.max_lag_s = cfg.sync_state_set_max_lag_ms / 1000.0
        self.epoch_file = EpochFile(store_path_root_dir)
        self.lease = 0
        self.record: GroupRecord | None = None
        self.record_revision = 0
        self.is_master = False
        self.fenced = False  # was master, another was elected: takes no writes until restarted
        self.tracker = CatchUpTracker()
        self.truncated_bytes = 0
        self.last_renewed = time.monotonic()
        self.master_gone_since: float | None = None
        self.stopping = False

    # start-up ---------------------------------------------------------------------------------
    async def prepare(self) -> None:
        """Before the store loads: the group's record as etcd has it now (None for a new group)."""
        self.epoch_file.load()
        await self._read_record()

    def truncate_divergent_tail(self) -> None:
        """Between the store's load and start (an executor thread): cut what this replica wrote in a term
        the group's history does not have past where that term ended (AutoSwitchHAClient's truncation)."""
        store = self.store
        local_max = store.max_phy_offset
        if self.record is None or self.record.master_broker_id == self.broker_id:
            return
        cut = consistent_offset(self.epoch_file.entries, list(self.record.epochs), local_max)
        if cut < local_max and store.truncate_to(cut):
            self.truncated_bytes = local_max - cut
            log.warning("controller: CommitLog truncated from %d to %d (epoch %d's history ends there)",
                        local_max, cut, self.record.master_epoch)
        self.epoch_file.replace(list(self.record.epochs))

    # the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        period = self.ttl / 3.0
        while True:
            try:
                await self.tick()
                self.last_renewed = time.monotonic()
            except (EtcdError, ValueError, KeyError) as e:
                log.warning("controller: %s", e)
                if self.is_master and time.monotonic() - self.last_renewed > self.ttl:
                    # etcd unreachable past the TTL: another replica may be master by now.
                    self._fence("etcd unreachable for longer than the lease TTL")
            await asyncio.sleep(period)

    async def tick(self) -> None:
        if self.stopping:
            return  # the broker stops: no new lease after the revoke
        if not self.lease or not await self.etcd.lease_keepalive(self.lease):
            if self.lease and self.is_master:
                # Our lease expired while we were master: another may be elected from now on.
                self._fence("its lease expired")
            self.lease = await self.etcd.lease_grant(self.ttl)
        me = self.me()
        await self.etcd.put(self.alive_key, me.encode(), self.lease)
        alive = await self._read_group()
        record = self.record
        if record is None:
            await self._try_write(first_master(me), promote=True)
        elif record.master_broker_id == self.broker_id:
            if not self.is_master and not self.fenced:
                # Named master from before a restart: a new term, starting at this CommitLog's end.
                await self._try_write(new_term(record, me), promote=True)
            elif self.is_master:
                self._publish_sync_state_set()
                await self._alter_sync_state_set(record, alive)
        else:
            if self.is_master:
                self._fence(f"broker {record.master_broker_id} is master of epoch {record.master_epoch}")
            # Elect only once the master has been seen gone for a whole tick: by then every replica has
            # published the CommitLog end it kept (nothing arrives from a dead master), and the choice
            # of the most complete one is not made on a stale figure.
            if record.master_broker_id in alive:
                self.master_gone_since = None
            elif self.master_gone_since is None:
                self.master_gone_since = time.monotonic()
            settled = self.master_gone_since is not None and \
                time.monotonic() - self.master_gone_since >= self.ttl / 3.0
            # A fenced old master may hold a divergent tail: it rejoins through a restart, never by election.
            won = elect(record, alive, me) if settled and not self.fenced else None
            if won is not None:
                await self._try_write(won, promote=True)
            elif record.master_broker_id in alive and not self.fenced:
                self._follow(record)

    def me(self) -> Replica:
        c = self.config
        return Replica(self.broker_id, c.broker_addr, c.ha_server_addr, self.store.max_phy_offset,
                       self.epoch_file.last_epoch)

    async def _read_record(self) -> None:
        kv = await self.etcd.get(self.record_key)
        self.record = None if kv is None else GroupRecord.decode(kv.value)
        self.record_revision = 0 if kv is None else kv.mod_revision

    async def _read_group(self) -> dict[int, Replica]:
        alive: dict[int, Replica] = {}
        self.record, self.record_revision = None, 0
        for kv in await self.etcd.get_prefix(self.prefix):
            if kv.key == self.record_key:
                self.record, self.record_revision = GroupRecord.decode(kv.value), kv.mod_revision
            elif kv.key.startswith(self.prefix + "alive/"):
                r = Replica.decode(kv.value)
                alive[r.broker_id] = r
        return alive

    async def _try_write(self, new: GroupRecord, *, promote: bool) -> bool:
        """Replace the record read (revision compared), and on success act on the new one."""
        ok = await self.etcd.txn([mod_revision_is(self.record_key, self.record_revision)],
                                 [put_op(self.record_key, new.encode())])
        if not ok:
            return False  # another replica moved first: the next tick reads what it wrote
        await self._read_record()
        if promote and not self.is_master and self.record is not None and \
                self.record.master_broker_id == self.broker_id:
            self.epoch_file.replace(list(self.record.epochs))
            log.warning("controller: elected master of %s, epoch %d, SyncStateSet %s", self.prefix,
                        self.record.master_epoch, sorted(self.record.sync_state_set))
            self.is_master = True
            await self.promote()
        self._publish_sync_state_set()
        return True

    def _publish_sync_state_set(self) -> None:
        """The HAService waits for the SyncStateSet's replicas (allAckInSyncStateSet, minInSyncReplicas)."""
        ha = self.replication.ha_service
        r = self.record
        if self.is_master and ha is not None and r is not None and r.master_broker_id == self.broker_id:
            ha.set_sync_state_set(self.broker_id, r.sync_state_set)

    async def _alter_sync_state_set(self, record: GroupRecord, alive: dict[int, Replica]) -> None:
        now = time.monotonic()
        self.tracker.sample(now, self.store.max_phy_offset, self.max_lag_s * 2)
        for i, r in alive.items():
            if i != self.broker_id and r.epoch == record.master_epoch:
                self.tracker.report(i, r.max_phy_offset)
        others = set(alive) - {self.broker_id}
        new = alter_sync_state_set(record, self.tracker.in_sync(others, now, self.max_lag_s))
        if new is not None and await self._try_write(new, promote=False):
            log.info("controller: SyncStateSet %s -> %s", sorted(record.sync_state_set), sorted(new.sync_state_set))

    def _follow(self, record: GroupRecord) -> None:
        b = self.replication
        if b.ha_client is not None:
            b.ha_client.update_master_address(record.master_ha_address)
        if b.slave_sync is not None:
            b.slave_sync.update_master_addr(record.master_address)
        if [tuple(e) for e in self.epoch_file.entries] != [tuple(e) for e in record.epochs]:
            local_max = self.store.max_phy_offset
            if consistent_offset(self.epoch_file.entries, list(record.epochs), local_max) < local_max:
                # Ahead of the new master's history while running: only a restart truncates (the store
                # must be stopped for that); until then this replica takes nothing from it.
                log.error("controller: this replica's CommitLog diverges from epoch %d's: restart it to "
                          "truncate and rejoin", record.master_epoch)
                if b.ha_client is not None:
                    b.ha_client.update_master_address("")
                return
            self.epoch_file.replace(list(record.epochs))

    def _fence(self, why: str) -> None:
        log.error("controller: no longer master (%s): refusing writes; restart to rejoin as a slave", why)
        self.is_master = False
        self.fenced = True
        self.replication.fence()

    async def stop(self) -> None:
        self.stopping = True
        if self.lease:
            try:
                await self.etcd.lease_revoke(self.lease)  # the others need not wait out the TTL
            except EtcdError as e:
                log.warning("controller: lease revoke failed: %s", e)

    def runtime_info(self) -> dict[str, str]:
        r = self.record
        info = {"controllerMode": "true", "controllerBrokerId": str(self.broker_id),
                "controllerIsMaster": str(self.is_master).lower(),
                "controllerTruncatedBytes": str(self.truncated_bytes)}
        if r is not None:
            info.update({"controllerMasterBrokerId": str(r.master_broker_id),
                         "controllerMasterEpoch": str(r.master_epoch),
                         "controllerSyncStateSet": ",".join(map(str, sorted(r.sync_state_set))),
                         "controllerSyncStateSetEpoch": str(r.sync_state_set_epoch)})
        return info
