"""The harness's own model (docs/broker.md "Power cuts"): what survives a cut and what does not."""

from __future__ import annotations

import mmap
import os

from tests.faults.harness import PowerCutFs

SIZE = 64 * 1024


def test_only_synced_writes_survive_a_cut(power_fs: PowerCutFs) -> None:
    path = power_fs.mountpoint / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, SIZE)
    os.pwrite(fd, b"synced-by-fdatasync", 0)
    os.fdatasync(fd)
    mm = mmap.mmap(fd, SIZE, mmap.MAP_SHARED)
    mm[8192:8205] = b"synced-msync!"
    mm.flush()  # msync(MS_SYNC): reaches lazyfs as write-back + fsync
    mm[16384:16393] = b"unsynced!"  # a store through the mapping, never synced
    os.pwrite(fd, b"unsynced write", 24576)
    assert os.pread(fd, 14, 24576) == b"unsynced write"  # readable through the mount before the cut
    mm.close()
    os.close(fd)  # close is not a sync point
    report = power_fs.cut()
    assert report["dirty_pages"] == 2
    data = (power_fs.backing / "f").read_bytes()
    assert len(data) == SIZE  # metadata (the size) is synchronous
    assert data[:19] == b"synced-by-fdatasync"
    assert data[8192:8205] == b"synced-msync!"
    assert data[16384:16393] == bytes(9)
    assert data[24576:24590] == bytes(14)


def test_torn_cut_writes_back_part_of_the_unsynced_pages(power_fs: PowerCutFs) -> None:
    path = power_fs.mountpoint / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    pages = 64
    os.pwrite(fd, b"\xab" * 4096 * pages, 0)
    os.close(fd)
    report = power_fs.cut(torn=0.5, seed=7)
    data = (power_fs.backing / "f").read_bytes()
    whole = sum(data[i * 4096 : (i + 1) * 4096] == b"\xab" * 4096 for i in range(pages))
    empty = sum(data[i * 4096 : (i + 1) * 4096] == bytes(4096) for i in range(pages))
    partly = pages - whole - empty
    assert (whole, partly) == (report["pages_written_whole"], report["pages_written_partly"])
    assert whole > 0 and partly > 0 and empty > 0
    for i in range(pages):  # a partly written page is a prefix of whole 512-byte sectors
        page = data[i * 4096 : (i + 1) * 4096]
        n = len(page.rstrip(b"\0"))
        assert n % 512 == 0 and page[:n] == b"\xab" * n
