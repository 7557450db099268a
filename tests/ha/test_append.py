"""The slave's store: the master's CommitLog bytes appended at their offsets (no sockets, no threads)."""

from __future__ import annotations

from pathlib import Path

from tidalmq.common.record import encode_record
from tidalmq.ha.frames import Frame, RecordAssembler
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.message_store import DefaultMessageStore, GetStatus, PutRequest, PutStatus

FILE_SIZE = 64 * 1024


def _store(root: Path) -> DefaultMessageStore:
    cfg = MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE_SIZE,
                             mapped_file_size_consume_queue=20 * 1000, message_index_enable=False)
    store = DefaultMessageStore(cfg)
    assert store.load()
    return store


def test_slave_store_rebuilds_the_master_commit_log_from_cut_batches(tmp_path: Path) -> None:
    master, slave = _store(tmp_path / "m"), _store(tmp_path / "s")
    slave.is_slave = True
    try:
        bodies = [bytes([i % 256]) * (300 + i) for i in range(400)]  # ~3 files: BLANKs at two file ends
        for i, body in enumerate(bodies):
            rec = encode_record(topic="T", queue_id=i % 2, body=body, properties="")
            assert master.put_messages([PutRequest("T", i % 2, [rec])])[0].status is PutStatus.PUT_OK
        end = master.max_phy_offset
        assert end > 2 * FILE_SIZE

        # Streamed as a master does: 1000-byte batches, cut anywhere, never across a file's end.
        asm = RecordAssembler(FILE_SIZE, expected=None)
        offset = 0
        while offset < end:
            chunk = master.get_commit_log_data(offset, 1000)
            assert chunk is not None
            run = asm.push(Frame(offset, bytes(chunk)))
            offset += len(chunk)
            if run is not None:
                assert slave.append_to_commit_log(run.offset, run.data, run.store_timestamp)
        assert slave.max_phy_offset == end
        for base in range(0, end, FILE_SIZE):
            n = min(FILE_SIZE, end - base)
            assert bytes(slave.get_commit_log_data(base, n) or b"") == bytes(master.get_commit_log_data(base, n) or b"")

        slave.dispatch()  # the slave's own reput builds its queues
        got = slave.get_message("G", "T", 1, 0, 1000)
        assert got.status is GetStatus.FOUND
        assert got.max_offset == 200 and got.message_count > 0

        # Nothing goes anywhere but at the end; a slave refuses puts.
        tail = encode_record(topic="T", queue_id=0, body=b"x", properties="")
        assert not slave.append_to_commit_log(end - 10, bytes(tail))
        assert not slave.append_to_commit_log(end + 10, bytes(tail))
        assert slave.max_phy_offset == end
        assert slave.put_messages([PutRequest("T", 0, [tail])])[0].status is PutStatus.SERVICE_NOT_AVAILABLE
    finally:
        master.shutdown()
        slave.shutdown()


def test_slave_commit_log_survives_a_restart_at_its_offset(tmp_path: Path) -> None:
    master, slave = _store(tmp_path / "m"), _store(tmp_path / "s")
    try:
        for i in range(10):
            rec = encode_record(topic="T", queue_id=0, body=b"m%d" % i, properties="")
            master.put_messages([PutRequest("T", 0, [rec])])
        data = master.get_commit_log_data(0, FILE_SIZE)
        assert data is not None
        assert slave.append_to_commit_log(0, bytes(data))
        end = slave.max_phy_offset
    finally:
        master.shutdown()
        slave.shutdown()
    again = _store(tmp_path / "s")
    try:
        assert again.max_phy_offset == end  # what it reports to the master when it reconnects
        assert again.get_message("G", "T", 0, 0, 32).message_count == 10
    finally:
        again.shutdown()
