"""SYNC_MASTER's wait for a slave (GroupTransferService), on one event loop, without a slave process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tests.broker.rawclient import run, send_cmd
from tidalmq.broker.broker_controller import BrokerController
from tidalmq.broker.config import BrokerConfig
from tidalmq.ha.service import HAService, TransferStatus
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.transport import RemotingClient
from tidalmq.store.config import MessageStoreConfig


def _service(gap: int = 1000, timeout_ms: int = 100) -> HAService:
    cfg = BrokerConfig(ha_max_gap_not_in_sync=gap)
    return HAService(cfg, store=None, sync_flush_timeout_ms=timeout_ms)  # type: ignore[arg-type]


class _FakeConnection:
    """A connected slave as far as the wait is concerned (its writer is woken, nothing more)."""

    def __init__(self, replica_id: int | None = None) -> None:
        self.wake = asyncio.Event()
        self.replica_id = replica_id
        self.slave_ack_offset = -1


def _ack(svc: HAService, conn: _FakeConnection, offset: int) -> None:
    conn.slave_ack_offset = offset  # what HAConnection does with a report
    svc.notify_transfer_some(offset)


def _waiter(svc: HAService, end: int) -> asyncio.Future[TransferStatus]:
    fut: asyncio.Future[TransferStatus] = asyncio.get_running_loop().create_future()
    svc.transfer(end, fut.set_result)
    return fut


def test_transfer_answers_by_what_the_slaves_reported() -> None:
    async def scenario() -> None:
        svc = _service()
        svc._loop = asyncio.get_running_loop()
        assert (await _waiter(svc, 10)) is TransferStatus.FLUSH_SLAVE_TIMEOUT  # no slave, syncFlushTimeout passed
        svc.connections.add(_FakeConnection())  # type: ignore[arg-type]
        first, second = _waiter(svc, 100), _waiter(svc, 200)
        svc.notify_transfer_some(150)
        assert (await first) is TransferStatus.PUT_OK and not second.done()
        assert (await second) is TransferStatus.FLUSH_SLAVE_TIMEOUT  # syncFlushTimeout (100 ms) passed
        assert (await _waiter(svc, 150)) is TransferStatus.PUT_OK  # already there
        # haMaxGapNotInSync behind: waited for all the same (RocketMQ 5 checks no gap on this path)
        assert (await _waiter(svc, 150 + 1000)) is TransferStatus.FLUSH_SLAVE_TIMEOUT

    run(scenario(), 10)


def test_fresh_master_waits_for_its_slave_to_report() -> None:
    """A SYNC_MASTER whose slave has not connected yet: the send waits (up to syncFlushTimeout, as RocketMQ
    5's GroupTransferService) and is acknowledged once the slave connects and reports past it, instead of
    SLAVE_NOT_AVAILABLE at once."""

    async def scenario() -> None:
        svc = _service(timeout_ms=5000)
        svc._loop = asyncio.get_running_loop()
        early = _waiter(svc, 100)
        await asyncio.sleep(0)  # the waiter is registered, no slave in sight
        assert not early.done()
        conn = _FakeConnection()
        svc.connections.add(conn)  # type: ignore[arg-type]
        _ack(svc, conn, 100)
        assert (await asyncio.wait_for(early, 2)) is TransferStatus.PUT_OK

    run(scenario(), 10)


def test_one_wait_per_group_commit_round_not_per_message(tmp_path: Path) -> None:
    async def scenario() -> None:
        sc = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1024 * 1024)
        sc.sync_flush_timeout = 300
        bc = BrokerConfig(broker_name="b", listen_port=0, broker_role="SYNC_MASTER", ha_listen_port=0)
        broker = BrokerController(bc, sc, host="127.0.0.1")
        await broker.start()
        client = RemotingClient()
        try:
            svc = broker.replication.ha_service
            assert svc is not None
            calls: list[int] = []
            real = svc.transfer

            def counting(next_offset: int, done: Callable[[TransferStatus], object]) -> None:
                calls.append(next_offset)
                real(next_offset, done)

            svc.transfer = counting  # type: ignore[method-assign]
            resps = await asyncio.gather(*(client.invoke(bc.broker_addr, send_cmd("Round", b"m%d" % i), 10)
                                           for i in range(50)))
            assert [r.code for r in resps] == [ResponseCode.FLUSH_SLAVE_TIMEOUT] * 50  # no slave
            assert 1 <= len(calls) < 50, calls
        finally:
            await client.close()
            await broker.stop()

    run(scenario(), 30)


def test_controller_mode_counts_acks_as_rocketmq_5_keys_say() -> None:
    """allAckInSyncStateSet: every member of the SyncStateSet; inSyncReplicas: that many replicas, the
    master included (with enableAutoInSyncReplicas capped by the set's size, not below
    minInSyncReplicas); minInSyncReplicas: refuse while the set is smaller."""

    async def scenario() -> None:
        svc = HAService(BrokerConfig(all_ack_in_sync_state_set=True, min_in_sync_replicas=2), store=None,  # type: ignore[arg-type]
                        sync_flush_timeout_ms=5000)
        svc._loop = asyncio.get_running_loop()
        two, three = _FakeConnection(2), _FakeConnection(3)
        svc.connections |= {two, three}  # type: ignore[arg-type]
        svc.set_sync_state_set(1, frozenset({1, 2, 3}))
        assert not svc.in_sync_replicas_not_enough()
        waiting = _waiter(svc, 100)
        _ack(svc, two, 150)
        await asyncio.sleep(0)
        assert not waiting.done()  # replica 3, in the set, has not got it
        svc.set_sync_state_set(1, frozenset({1, 2}))  # the master dropped replica 3
        assert (await waiting) is TransferStatus.PUT_OK
        svc.set_sync_state_set(1, frozenset({1}))
        assert svc.in_sync_replicas_not_enough()  # 1 < minInSyncReplicas
        assert (await _waiter(svc, 10_000)) is TransferStatus.PUT_OK  # the master alone: nothing to wait for

        cfg = BrokerConfig(in_sync_replicas=3)
        svc = HAService(cfg, store=None, sync_flush_timeout_ms=5000)  # type: ignore[arg-type]
        svc._loop = asyncio.get_running_loop()
        svc.connections |= {two, three}  # type: ignore[arg-type]
        two.slave_ack_offset = three.slave_ack_offset = -1
        svc.set_sync_state_set(1, frozenset({1, 2, 3}))
        assert svc.slave_acks_needed() == 2
        waiting = _waiter(svc, 100)
        _ack(svc, two, 100)
        await asyncio.sleep(0)
        assert not waiting.done()  # two slaves needed, one has it
        _ack(svc, three, 120)
        assert (await waiting) is TransferStatus.PUT_OK
        cfg.enable_auto_in_sync_replicas = True
        svc.set_sync_state_set(1, frozenset({1, 2}))
        assert svc.slave_acks_needed() == 1  # lowered to the set's size
        cfg.in_sync_replicas = 1
        assert svc.slave_acks_needed() == 1  # RocketMQ would not wait at all; SYNC_MASTER waits for one

    run(scenario(), 10)
