"""HAService: the master's side of replication (RocketMQ's HAService with its AcceptSocketService and
GroupTransferService). Runs on the broker's event loop.

SYNC_MASTER: a group commit round asks ``transfer(end, done)`` once for all its messages (one wait per
round, not per message); ``done`` gets PUT_OK once enough replicas reported an offset >= ``end``, else
FLUSH_SLAVE_TIMEOUT after syncFlushTimeout. As RocketMQ 5's GroupTransferService, the wait is the same
whether a slave is connected or not: a fresh master's first sends wait for the slave that is about to
report, rather than failing at once (RocketMQ 4's isSlaveOK answered SLAVE_NOT_AVAILABLE then).

"Enough" (``acked_offset``): one slave in static mode (RocketMQ 4's SYNC_MASTER). In controller mode
RocketMQ 5's keys decide, counting the master: with allAckInSyncStateSet every replica of the
SyncStateSet; else inSyncReplicas (with enableAutoInSyncReplicas lowered to the SyncStateSet's size, not
below minInSyncReplicas). RocketMQ acknowledges at once when that count is 1 (its default); TidalMQ keeps
its SYNC_MASTER meaning there and waits for one slave (docs/replication.md).
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tidalmq.ha.config import HAConfig
from tidalmq.ha.connection import HAConnection
from tidalmq.store.api import MessageStore

log = logging.getLogger(__name__)


class TransferStatus(enum.Enum):
    """The outcomes of a SYNC_MASTER wait (RocketMQ's PutMessageStatus values for them)."""

    PUT_OK = "PUT_OK"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


TransferDone = Callable[[TransferStatus], object]


@dataclass(order=True)
class _TransferRequest:
    next_offset: int
    seq: int
    done: TransferDone = field(compare=False)
    timer: asyncio.TimerHandle | None = field(default=None, compare=False)
    finished: bool = field(default=False, compare=False)


class HAService:
    def __init__(self, config: HAConfig, store: MessageStore, sync_flush_timeout_ms: int) -> None:
        self.config = config
        self.store = store
        self.sync_flush_timeout = sync_flush_timeout_ms / 1000.0
        self.host = ""  # bound at start (listen_host)
        self.connections: set[HAConnection] = set()
        # The highest offset any slave has reported (RocketMQ's push2SlaveMaxOffset).
        self.push2slave_max_offset = 0
        self._requests: list[_TransferRequest] = []
        self._seq = itertools.count()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        # Controller mode: the SyncStateSet the group's record names, and this master's replica id in it
        # (None: static mode, where one slave's ack is enough).
        self.sync_state_set: frozenset[int] | None = None
        self.replica_id = 0

    # lifecycle --------------------------------------------------------------------------------
    @property
    def listen_host(self) -> str:
        """Where the HA port binds: haListenHost, else the address the NameServer tells slaves (brokerIP2,
        else brokerIP1). A slave is not authenticated and is sent the whole CommitLog, so the port is not
        opened on every interface as RocketMQ does (docs/replication.md, Security)."""
        c = self.config
        return c.ha_listen_host or c.broker_ip2 or c.broker_ip1

    async def start(self, port: int) -> None:
        self._loop = asyncio.get_running_loop()
        self.host = self.listen_host
        try:
            self._server = await asyncio.start_server(self._accept, self.host, port)
        except OSError as e:
            raise OSError(e.errno, f"HA port {self.host}:{port} cannot be bound ({e.strerror}); haListenHost "
                                   "names the address to bind (docs/replication.md)") from e
        self.port = self._server.sockets[0].getsockname()[1]
        self.store.add_arrival_listener(self._on_arrival)
        log.info("HA: listening for slaves on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        for req in self._requests:
            self._finish(req, TransferStatus.FLUSH_SLAVE_TIMEOUT)
        self._requests.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HAConnection(self, reader, writer)
        log.info("HA: slave %s connected", conn.client_addr)
        self.connections.add(conn)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await conn.run()
        except asyncio.CancelledError:
            # stop() ends it. Returned from, not raised: Python 3.11's start_server asks a cancelled handler
            # task for its exception, which raises, and logs a traceback for every slave at each stop.
            pass
        finally:
            self.connections.discard(conn)
            self._tasks.discard(task)
            log.info("HA: slave %s gone", conn.client_addr)

    # streaming --------------------------------------------------------------------------------
    def _on_arrival(self, arrivals: dict[tuple[str, int], int]) -> None:
        """From whichever thread dispatched: the CommitLog grew, wake the writers."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and self.connections:
            loop.call_soon_threadsafe(self.wake_writers)

    def wake_writers(self) -> None:
        for conn in self.connections:
            conn.wake.set()

    # group transfer ---------------------------------------------------------------------------
    def in_sync_replicas_not_enough(self) -> bool:
        """Controller mode: fewer replicas in sync than minInSyncReplicas (the send is refused, nothing
        stored; RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH). The SyncStateSet counts the master."""
        sss = self.sync_state_set
        return sss is not None and len(sss) < self.config.min_in_sync_replicas

    def set_sync_state_set(self, replica_id: int, members: frozenset[int]) -> None:
        """Controller mode: the record changed; waits the new set satisfies end now."""
        self.replica_id = replica_id
        self.sync_state_set = members
        self._release(self.acked_offset())

    def _all_ack(self) -> bool:
        return self.sync_state_set is not None and self.config.all_ack_in_sync_state_set

    def _set_members(self) -> frozenset[int]:
        sss = self.sync_state_set or frozenset()
        return sss - {self.replica_id}

    def slave_acks_needed(self) -> int:
        """How many slaves must have an offset (when not allAckInSyncStateSet)."""
        c = self.config
        sss = self.sync_state_set
        if sss is None:
            return 1
        need = c.in_sync_replicas
        if c.enable_auto_in_sync_replicas:
            need = max(min(need, len(sss)), c.min_in_sync_replicas)
        return max(1, need - 1)  # the master is one of them; TidalMQ's SYNC_MASTER waits for a slave at least

    def acked_offset(self) -> int:
        """The CommitLog offset enough replicas have: every SyncStateSet member's (allAckInSyncStateSet),
        else the k-th best slave's."""
        if self._all_ack():
            members = self._set_members()
            if not members:
                return 1 << 62
            best: dict[int, int] = {}
            for conn in self.connections:
                rid = conn.replica_id
                if rid in members:
                    best[rid] = max(best.get(rid, -1), conn.slave_ack_offset)
            return min(best.get(m, -1) for m in members)
        k = self.slave_acks_needed()
        if k == 1:
            return self.push2slave_max_offset
        acks = sorted((c.slave_ack_offset for c in self.connections), reverse=True)
        return acks[k - 1] if len(acks) >= k else -1

    def transfer(self, next_offset: int, done: TransferDone) -> None:
        """Call ``done`` (on the loop) once enough replicas have everything before ``next_offset`` (see module doc)."""
        if self.acked_offset() >= next_offset:  # a SyncStateSet of the master alone: at once
            done(TransferStatus.PUT_OK)
            return
        req = _TransferRequest(next_offset, next(self._seq), done)
        assert self._loop is not None
        req.timer = self._loop.call_later(self.sync_flush_timeout, self._finish, req, TransferStatus.FLUSH_SLAVE_TIMEOUT)
        heapq.heappush(self._requests, req)
        self.wake_writers()

    def notify_transfer_some(self, offset: int) -> None:
        if offset > self.push2slave_max_offset:
            self.push2slave_max_offset = offset
        elif self.sync_state_set is None:
            return  # static mode: only the best slave's offset counts, and it did not move
        if self._requests:
            self._release(self.acked_offset())

    def _release(self, acked: int) -> None:
        reqs = self._requests
        while reqs and reqs[0].next_offset <= acked:
            self._finish(heapq.heappop(reqs), TransferStatus.PUT_OK)

    @staticmethod
    def _finish(req: _TransferRequest, status: TransferStatus) -> None:
        if req.finished:
            return
        req.finished = True
        if req.timer is not None:
            req.timer.cancel()
        try:
            req.done(status)
        except Exception:
            log.exception("HA transfer callback failed")

    def runtime_info(self) -> dict[str, str]:
        master_put = self.store.max_phy_offset
        info = {
            "haConnections": str(len(self.connections)),
            "haPush2SlaveMaxOffset": str(self.push2slave_max_offset),
            "haSlaveFallBehind": str(max(0, master_put - self.push2slave_max_offset) if self.connections else -1),
        }
        for i, conn in enumerate(sorted(self.connections, key=lambda c: c.client_addr)):
            who = "" if conn.replica_id is None else f" replica {conn.replica_id}"
            info[f"haSlave{i}"] = f"{conn.client_addr}{who} ack {conn.slave_ack_offset}"
        return info
