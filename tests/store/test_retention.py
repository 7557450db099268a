"""Retention: CommitLog files by age / disk pressure, then ConsumeQueues and the index follow."""

from __future__ import annotations

import logging
import os
import time

from tests.support import wait_for
from tidalmq.store.clean import is_time_to_delete
from tidalmq.store.message_store import GetStatus, PutRequest, PutStatus

from .conftest import FakeIndex, rec


def fill(store, n: int) -> list:  # noqa: ANN001
    res = store.put_messages([PutRequest("RET", 0, [rec("RET", body=b"x" * 1000)]) for _ in range(n)])
    assert all(r.status is PutStatus.PUT_OK for r in res)
    store.wait_reput(store.max_phy_offset, 5)
    store.commit_log.flush(0)
    return res


def age_files(path: str, hours: float) -> None:
    t = time.time() - hours * 3600
    for n in os.listdir(path):
        os.utime(os.path.join(path, n), (t, t))


def test_is_time_to_delete() -> None:
    ms = int(time.mktime((2024, 5, 1, 4, 30, 0, 0, 0, -1)) * 1000)
    assert is_time_to_delete("04", ms)
    assert is_time_to_delete("03;04;05", ms)
    assert not is_time_to_delete("05", ms)
    assert not is_time_to_delete("", ms)


def test_retention_by_reserved_time(make_store, clock) -> None:
    clock.now = int(time.time() * 1000)  # file ages are real mtimes here
    idx = FakeIndex()
    store = make_store(index=idx, file_reserved_time=72, mapped_file_size_consume_queue=20 * 8)
    res = fill(store, 80)  # ~5 CommitLog files of 16 KiB
    cl_dir = store.config.commit_log_path
    n_files = len(store.commit_log.mfq.files)  # on disk there may be one more: the next file, made ahead
    assert n_files >= 5
    # not old enough: nothing happens, even when forced
    assert store.clean_expired_now(force=True) == 0
    # old, but not the hour of delete_when: nothing
    age_files(cl_dir, 100)
    store.config.delete_when = f"{(time.localtime(clock.now / 1000).tm_hour + 1) % 24:02d}"
    assert store.clean_expired_now() == 0
    # the hour has come: all files but the one being written go
    store.config.delete_when = f"{time.localtime(clock.now / 1000).tm_hour:02d}"
    deleted = store.clean_expired_now()
    assert deleted == n_files - 1
    assert len(store.commit_log.mfq.files) == 1
    last = store.commit_log.mfq.files[0]
    made_ahead = f"{last.file_from_offset + last.file_size:020d}"
    assert set(os.listdir(cl_dir)) <= {os.path.basename(last.path), made_ahead}
    min_phy = store.min_phy_offset
    assert min_phy == store.commit_log.mfq.files[0].file_from_offset
    # the ConsumeQueue's min offset follows, old CQ files are gone, the index was told
    min_q = store.get_min_offset_in_queue("RET", 0)
    first_alive = next(i for i, r in enumerate(res) if r.wrote_offset >= min_phy)
    assert min_q == first_alive
    qdir = os.path.join(store.config.consume_queue_path, "RET", "0")
    assert min(int(n) for n in os.listdir(qdir)) // 20 <= min_q
    assert len(os.listdir(qdir)) < 80 // 8
    assert idx.expired_calls and idx.expired_calls[-1] == min_phy
    r = store.get_message("g", "RET", 0, 0, 32)
    assert (r.status, r.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, min_q)
    r = store.get_message("g", "RET", 0, min_q, 32)
    assert r.status is GetStatus.FOUND and r.queue_offsets[0] == min_q
    assert store.get_offset_in_queue_by_time("RET", 0, 0) == min_q
    # still consistent after a restart
    store.shutdown()
    again = make_store(mapped_file_size_consume_queue=20 * 8)
    assert again.get_min_offset_in_queue("RET", 0) == min_q
    assert again.get_max_offset_in_queue("RET", 0) == 80


def test_retention_with_injected_clock(make_store, clock) -> None:
    clock.now = int(time.time() * 1000)
    store = make_store(file_reserved_time=1)
    fill(store, 40)
    n_files = len(store.commit_log.mfq.files)
    assert store.clean_expired_now(force=True) == 0
    clock.now += 2 * 3600 * 1000  # two hours later, files modified "now" have expired
    assert store.clean_expired_now(force=True) == n_files - 1


def test_retention_on_disk_pressure_with_forcible_clean_enabled(make_store) -> None:
    store = make_store(file_reserved_time=72, clean_file_forcibly_enable=True)
    fill(store, 50)
    n_files = len(store.commit_log.mfq.files)
    # cleanFileForciblyEnable=true, over diskSpaceCleanForciblyRatio: files go at once, whatever their
    # age, the hour and whether anyone consumed them (RocketMQ's behaviour)
    store.clean_commit_log.disk_usage = lambda path: 0.86
    assert store.clean_expired_now() == n_files - 1
    assert not store.disk_full
    # over the warning level: the disk is marked full and puts are refused
    store.clean_commit_log.disk_usage = lambda path: 0.95
    store.clean_expired_now()
    assert store.disk_full
    r = store.put_messages([PutRequest("RET", 0, [rec("RET")])])[0]
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
    store.clean_commit_log.disk_usage = lambda path: 0.10
    store.clean_expired_now()
    assert not store.disk_full
    assert store.put_messages([PutRequest("RET", 0, [rec("RET")])])[0].status is PutStatus.PUT_OK


def test_never_deletes_the_file_being_written(make_store, clock) -> None:
    store = make_store(file_reserved_time=0)
    fill(store, 3)
    assert len(store.commit_log.mfq.files) == 1
    clock.now += 10**9
    assert store.clean_expired_now(force=True) == 0
    assert store.get_message("g", "RET", 0, 0, 32).message_count == 3


def test_reading_while_file_is_deleted(make_store, clock) -> None:
    """Views handed out before deletion stay valid (the mapping outlives the file)."""
    store = make_store(file_reserved_time=0)
    fill(store, 40)
    r = store.get_message("g", "RET", 0, 0, 8)
    before = [bytes(b) for b in r.buffers]
    clock.now = int(time.time() * 1000) + 10**9
    assert store.clean_expired_now(force=True) > 0
    assert [bytes(b) for b in r.buffers] == before
    assert store.get_message("g", "RET", 0, 0, 8).status is GetStatus.OFFSET_TOO_SMALL


def test_a_fresh_store_does_not_read_as_a_full_disk(make_store, monkeypatch) -> None:
    from tidalmq.store import clean

    store = make_store()
    seen = []

    def usage(path: str) -> float:
        seen.append(path)
        return clean.disk_partition_space_used_percent(path)

    monkeypatch.setattr(store.clean_commit_log, "disk_usage", usage)
    store.clean_commit_log.is_space_to_delete()
    # Nothing stored yet, but both paths exist, so neither reads as -1 ("full, reclaim space").
    assert seen and all(clean.disk_partition_space_used_percent(p) >= 0 for p in seen)


def test_over_forcible_ratio_keeps_unconsumed_files_and_refuses_writes(make_store, caplog) -> None:
    caplog.set_level(logging.WARNING, "tidalmq.store")
    store = make_store(file_reserved_time=72)  # cleanFileForciblyEnable defaults to false
    res = fill(store, 50)
    files = len(store.commit_log.mfq.files)
    assert files > 3
    consumed = [0]
    store.consumed_commit_log_offset = lambda: (consumed[0], "RET-0 by g")
    store.clean_commit_log.disk_usage = lambda path: 0.86
    # Nothing consumed: nothing deleted, new messages refused with the disk-full answer.
    assert store.clean_expired_now() == 0
    assert len(store.commit_log.mfq.files) == files
    assert store.disk_full and "unconsumed" in store.runtime_info()["diskFullReason"]
    for _ in range(3):
        r = store.put_messages([PutRequest("RET", 0, [rec("RET")])])[0]
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.get_message("g", "RET", 0, 0, 32).message_count > 0  # reads go on
    # Consumed up to the 20th message: only the files wholly below it go.
    consumed[0] = res[20].wrote_offset
    deleted = store.clean_expired_now()
    assert deleted >= 1
    assert store.commit_log.min_offset <= res[20].wrote_offset
    assert store.get_message("g", "RET", 0, 20, 1).message_count == 1
    assert store.disk_full  # what is left is still unconsumed
    # Everything consumed: all but the written file go, and the disk drops below the ratio.
    consumed[0] = store.max_phy_offset
    store.clean_expired_now()
    assert len(store.commit_log.mfq.files) == 1
    store.clean_commit_log.disk_usage = lambda path: 0.40
    store.clean_expired_now()
    assert not store.disk_full
    assert store.put_messages([PutRequest("RET", 0, [rec("RET")])])[0].queue_offset == 50  # no gap
    # One WARN when writes were first refused and one when they were taken again, not one per send or pass.
    warns = [r.getMessage() for r in caplog.records if r.name == "tidalmq.store"]
    assert sum("refusing writes" in m for m in warns) == 1
    assert sum("accepting writes" in m for m in warns) == 1


def test_expired_files_go_over_the_forcible_ratio_even_unconsumed(make_store, clock) -> None:
    store = make_store(file_reserved_time=1)
    fill(store, 50)
    files = len(store.commit_log.mfq.files)
    store.consumed_commit_log_offset = lambda: (0, "RET-0 by g")
    store.clean_commit_log.disk_usage = lambda path: 0.86
    clock.now = int(time.time() * 1000) + 2 * 3600 * 1000  # fileReservedTime (1 h) passed
    assert store.clean_expired_now() == files - 1
    assert not store.runtime_info()["diskFullReason"]


def test_consume_queue_without_space_refuses_writes_then_catches_up(make_store, monkeypatch) -> None:
    from tidalmq.common.fileutil import DiskFullError
    from tidalmq.store.mapped_file import MappedFileQueue

    store = make_store()
    no_space = [True]
    create_file = MappedFileQueue.create_file

    def refusing(self, offset):  # noqa: ANN001, ANN202
        if no_space[0] and self.store_path.startswith(store.config.consume_queue_path):
            raise DiskFullError(28, "no space to reserve (injected)")
        return create_file(self, offset)

    monkeypatch.setattr(MappedFileQueue, "create_file", refusing)
    res = store.put_messages([PutRequest("CQF", 0, [rec("CQF")]) for _ in range(3)])
    assert [r.queue_offset for r in res] == [0, 1, 2]
    wait_for(lambda: "consumequeue" in store.runtime_info()["diskFullReason"], 5, what="disk full noticed")
    # In the CommitLog, not yet queued; new messages are refused meanwhile and take no queue offset.
    assert store.put_messages([PutRequest("CQF", 0, [rec("CQF")])])[0].status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.get_message("g", "CQF", 0, 0, 32).message_count == 0
    no_space[0] = False  # space is back: the reput retries by itself (at most a second later)
    wait_for(lambda: not store.disk_full, 5, what="writes accepted again")
    assert store.get_message("g", "CQF", 0, 0, 32).message_count == 3
    assert store.put_messages([PutRequest("CQF", 0, [rec("CQF")])])[0].queue_offset == 3
