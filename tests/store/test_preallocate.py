"""The next CommitLog file is made ahead by a background thread (RocketMQ's AllocateMappedFileService):
a put that rolls over never reserves a file itself, and a file made ahead survives restarts and crashes
as an empty last file."""

from __future__ import annotations

import os
import threading
import time

from tidalmq.store.mapped_file import MappedFileQueue
from tidalmq.store.message_store import PutRequest, PutStatus

from .conftest import crash, rec

FILE = 16 * 1024  # small_config's CommitLog file size
BODY = b"x" * 1000


def put(store, n: int) -> list:  # noqa: ANN001
    res = store.put_messages([PutRequest("PRE", 0, [rec("PRE", body=BODY)]) for _ in range(n)])
    assert all(r.status is PutStatus.PUT_OK for r in res)
    return res


def wait_for(cond, timeout: float = 5.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_rolling_over_takes_the_file_made_ahead(make_store, monkeypatch) -> None:
    creators: list[tuple[str, int]] = []
    real = MappedFileQueue.create_file

    def spy(self, offset):  # noqa: ANN001, ANN202
        if "commitlog" in self.store_path:  # ConsumeQueues make their (small) files inline
            creators.append((threading.current_thread().name, offset))
        return real(self, offset)

    monkeypatch.setattr(MappedFileQueue, "create_file", spy)
    store = make_store()
    cl_dir = store.config.commit_log_path
    put(store, 1)
    # the first file is made by the put itself; the second follows in the background
    wait_for(lambda: os.path.exists(os.path.join(cl_dir, f"{FILE:020d}")))
    put(store, 60)  # ~4 files: three roll-overs
    assert len(store.commit_log.mfq.files) >= 4
    wait_for(lambda: len(creators) == len(store.commit_log.mfq.files) + 1)
    first, *ahead = creators
    assert first == ("MainThread", 0)
    assert {name for name, _ in ahead} == {"AllocateMappedFileService"}
    assert [off for _, off in ahead] == [FILE * i for i in range(1, len(ahead) + 1)]
    # the data reads back across the files
    store.wait_reput(store.max_phy_offset, 5)
    got = store.get_message("g", "PRE", 0, 0, 61)
    assert got.message_count == 32  # one pull's worth; the rest below
    assert store.get_max_offset_in_queue("PRE", 0) == 61


def test_a_file_made_ahead_is_not_data(make_store) -> None:
    store = make_store()
    put(store, 3)
    mfq = store.commit_log.mfq
    wait_for(lambda: os.path.exists(os.path.join(store.config.commit_log_path, f"{FILE:020d}")))
    assert len(mfq.files) == 1
    assert store.max_phy_offset == mfq.files[0].wrote_position
    assert store.min_phy_offset == 0


def test_restart_and_crash_with_a_file_made_ahead(make_store, tmp_path) -> None:
    root = str(tmp_path / "store")
    store = make_store(root=root)
    res = put(store, 20)  # the second file is being written, the third made ahead
    cl_dir = store.config.commit_log_path
    third = os.path.join(cl_dir, f"{2 * FILE:020d}")
    wait_for(lambda: os.path.exists(third))
    end = store.max_phy_offset
    store.shutdown()
    assert os.path.exists(third)  # kept on disk for the next start
    store = make_store(root=root)
    assert store.max_phy_offset == end
    assert len(store.commit_log.mfq.files) == 2  # the empty third file is not data
    wait_for(lambda: os.path.exists(third))  # and it is made ahead again for the first roll-over
    more = put(store, 20)  # rolls over into fresh files
    store.wait_reput(store.max_phy_offset, 5)
    assert store.get_max_offset_in_queue("PRE", 0) == 40
    wait_for(lambda: len(os.listdir(cl_dir)) == len(store.commit_log.mfq.files) + 1)
    end = store.max_phy_offset
    crash(store)
    store = make_store(root=root)
    assert store.max_phy_offset == end
    store.wait_reput(store.max_phy_offset, 5)
    assert store.get_max_offset_in_queue("PRE", 0) == 40
    last = more[-1]
    r = store.get_message("g", "PRE", 0, 39, 1)
    assert r.message_count == 1 and res[0].wrote_offset == 0 and last.wrote_offset < end
