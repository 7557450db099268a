"""A FUSE passthrough that loses what was not fsynced, the way a power cut does (after Jepsen's LazyFS).

Run as ``python -m tests.faults.lazyfs BACKING MOUNTPOINT``; driven by ``tests.faults.harness.LazyFs``.

The model:
- Data: write() goes into a per-inode page cache held in this process (4 KiB pages over the backing
  file's content). read() answers the backing file with the cached pages laid over it. fsync/fdatasync
  of a file writes that file's cached pages to the backing file; close does not. A power cut ("cut" on
  stdin) discards every page not yet written back, optionally after writing a random subset of them,
  some only partly (whole 512-byte sectors), to model torn writes; then the process exits at once, the
  kernel aborts the mount and the caller unmounts it.
- Stores through a MAP_SHARED mapping reach us as write() requests only when the kernel writes the page
  back: at msync/fsync/fdatasync (the kernel writes dirty pages back before it sends FUSE_FSYNC) or at
  its own writeback. Pages still dirty in the kernel at the cut are lost with it, as they would be.
- Metadata is synchronous: create, unlink, rename, mkdir, truncate, fallocate and the file size grown
  by a write reach the backing directory at once and survive every cut (a file whose size grew but whose
  data was not synced reads back as zeros there). So the harness cannot show a lost directory entry or
  rename; it shows lost and torn file data.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import random
import sys
import threading
from dataclasses import dataclass, field

import mfusepy

PAGE = 4096
SECTOR = 512


@dataclass
class _Inode:
    fd: int  # our own O_RDWR descriptor on the backing file, for write-back
    name: str  # its path under the mount when first written (for ``cut``'s pattern)
    dirty: dict[int, bytearray] = field(default_factory=dict)  # page number -> the page's 4 KiB

    def page(self, n: int) -> bytearray:
        p = self.dirty.get(n)
        if p is None:
            p = bytearray(os.pread(self.fd, PAGE, n * PAGE).ljust(PAGE, b"\0"))
            self.dirty[n] = p
        return p

    def write_back(self, pages: dict[int, bytearray], upto: dict[int, int] | None = None) -> None:
        size = os.fstat(self.fd).st_size
        for n in sorted(pages):
            end = min(PAGE, size - n * PAGE, (upto or {}).get(n, PAGE))
            if end > 0:
                os.pwrite(self.fd, memoryview(pages[n])[:end], n * PAGE)


class LazyFs(mfusepy.Operations):
    use_ns = True

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        # Not "lock": that name is FUSE's POSIX-lock operation, which mfusepy would route here.
        self._mutex = threading.Lock()
        self.inodes: dict[int, _Inode] = {}
        self.fsyncs = 0
        self.pages_synced = 0

    def init(self, path):
        print("mounted", flush=True)  # the harness waits for this line

    # ---- helpers
    def _p(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _inode(self, fd: int, path: str) -> _Inode:
        ino = os.fstat(fd).st_ino
        node = self.inodes.get(ino)
        if node is None:
            node = self.inodes[ino] = _Inode(os.dup(fd), path or "")
        return node

    def _drop(self, ino: int) -> None:
        node = self.inodes.pop(ino, None)
        if node is not None:
            os.close(node.fd)

    def _truncated(self, ino: int, length: int) -> None:
        node = self.inodes.get(ino)
        if node is None:
            return
        for n in [n for n in node.dirty if n * PAGE >= length]:
            del node.dirty[n]
        tail = node.dirty.get(length // PAGE)
        if tail is not None:
            tail[length % PAGE :] = bytes(PAGE - length % PAGE)

    # ---- metadata: straight to the backing directory
    def getattr(self, path, fh=None):
        st = os.fstat(fh) if fh is not None else os.lstat(self._p(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_blocks")
        attrs = {k: getattr(st, k) for k in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path, amode):
        if not os.access(self._p(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._p(path))]

    def mkdir(self, path, mode):
        os.mkdir(self._p(path), mode)
        return 0

    def rmdir(self, path):
        os.rmdir(self._p(path))
        return 0

    def unlink(self, path):
        with self._mutex:
            st = os.lstat(self._p(path))
            os.unlink(self._p(path))
            if st.st_nlink <= 1:
                self._drop(st.st_ino)
        return 0

    def rename(self, old, new):
        with self._mutex:
            try:
                replaced = os.lstat(self._p(new))
            except FileNotFoundError:
                replaced = None
            os.rename(self._p(old), self._p(new))
            if replaced is not None and replaced.st_nlink <= 1:
                self._drop(replaced.st_ino)
        return 0

    def chmod(self, path, mode):
        os.chmod(self._p(path), mode)
        return 0

    def utimens(self, path, times=None):
        os.utime(self._p(path), ns=times)
        return 0

    def statfs(self, path):
        sv = os.statvfs(self._p(path))
        return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                            "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def truncate(self, path, length, fh=None):
        with self._mutex:
            if fh is not None:
                os.ftruncate(fh, length)
                ino = os.fstat(fh).st_ino
            else:
                os.truncate(self._p(path), length)
                ino = os.lstat(self._p(path)).st_ino
            self._truncated(ino, length)
        return 0

    def fallocate(self, path, mode, offset, size, fh):
        if mode != 0:
            raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
        os.posix_fallocate(fh, offset, size)
        return 0

    # ---- files
    def _open(self, path: str, flags: int, mode: int = 0o644) -> int:
        # Always read-write: the kernel writes back mapped pages through any descriptor of the file.
        # O_APPEND is the kernel's business (it sends the offset), O_TRUNC ours.
        flags = (flags & ~(os.O_ACCMODE | os.O_APPEND)) | os.O_RDWR
        with self._mutex:
            fd = os.open(self._p(path), flags, mode)
            if flags & os.O_TRUNC:
                self._truncated(os.fstat(fd).st_ino, 0)
        return fd

    def open(self, path, flags):
        return self._open(path, flags)

    def create(self, path, mode, fi=None):
        return self._open(path, (fi or 0) | os.O_CREAT, mode)

    def release(self, path, fh):
        with self._mutex:
            if os.fstat(fh).st_nlink == 0:  # unlinked: its pages can never be read again
                self._drop(os.fstat(fh).st_ino)
            os.close(fh)
        return 0

    def flush(self, path, fh):
        return 0  # close() is not a sync point

    def read(self, path, size, offset, fh):
        with self._mutex:
            data = bytearray(os.pread(fh, size, offset))
            node = self.inodes.get(os.fstat(fh).st_ino)
            if node is not None and node.dirty:
                end = offset + len(data)
                for n in range(offset // PAGE, (end + PAGE - 1) // PAGE):
                    page = node.dirty.get(n)
                    if page is not None:
                        a, b = max(offset, n * PAGE), min(end, (n + 1) * PAGE)
                        data[a - offset : b - offset] = page[a - n * PAGE : b - n * PAGE]
            return bytes(data)

    def write(self, path, data, offset, fh):
        with self._mutex:
            end = offset + len(data)
            if os.fstat(fh).st_size < end:
                os.ftruncate(fh, end)  # the size is metadata: durable at once (see the module docstring)
            node = self._inode(fh, path)
            mv = memoryview(data)
            for n in range(offset // PAGE, (end + PAGE - 1) // PAGE):
                a, b = max(offset, n * PAGE), min(end, (n + 1) * PAGE)
                if b - a == PAGE:
                    node.dirty[n] = bytearray(mv[a - offset : b - offset])
                else:
                    node.page(n)[a - n * PAGE : b - n * PAGE] = mv[a - offset : b - offset]
            return len(data)

    def fsync(self, path, datasync, fh):
        with self._mutex:
            node = self.inodes.get(os.fstat(fh).st_ino)
            self.fsyncs += 1
            if node is not None and node.dirty:
                node.write_back(node.dirty)
                self.pages_synced += len(node.dirty)
                node.dirty.clear()
        return 0

    def fsyncdir(self, path, datasync, fh):
        return 0  # metadata is synchronous already

    # ---- the power cut
    def stats(self) -> dict[str, int]:
        return {"dirty_pages": sum(len(n.dirty) for n in self.inodes.values()),
                "dirty_files": sum(1 for n in self.inodes.values() if n.dirty),
                "fsyncs": self.fsyncs, "pages_synced": self.pages_synced}

    def cut(self, torn: float, seed: int, keep_files: str = "") -> dict[str, int]:
        """Write back a random ``torn`` share of the dirty pages, some of them only partly, and every dirty
        page of the files whose path matches the glob ``keep_files`` (the kernel may write back any dirty
        page before a crash, in any order); drop the rest. Holds the lock to the end: the caller exits the
        process with it held, so nothing gets in between."""
        self._mutex.acquire()
        report = self.stats()
        rng = random.Random(seed)
        whole = partial = 0
        for node in self.inodes.values():
            if keep_files and fnmatch.fnmatch(node.name, keep_files):
                node.write_back(node.dirty)
                whole += len(node.dirty)
                continue
            keep = {n: p for n, p in node.dirty.items() if rng.random() < torn}
            upto = {n: rng.randrange(1, PAGE // SECTOR) * SECTOR for n in keep if rng.random() < 0.5}
            node.write_back(keep, upto)
            partial += len(upto)
            whole += len(keep) - len(upto)
        report.update(pages_written_whole=whole, pages_written_partly=partial)
        return report


def _control(fs: LazyFs) -> None:
    """Commands on stdin, one a line: ``stats`` or ``cut TORN SEED [GLOB]`` (answers a JSON line on stdout)."""
    for line in sys.stdin:
        cmd = line.split()
        if cmd[:1] == ["stats"]:
            with fs.lock:
                print(json.dumps(fs.stats()), flush=True)
        elif cmd[:1] == ["cut"]:
            print(json.dumps(fs.cut(float(cmd[1]), int(cmd[2]), cmd[3] if len(cmd) > 3 else "")), flush=True)
            os._exit(0)
    os._exit(0)  # the harness went away: cut without writing anything back


def main() -> None:
    backing, mountpoint = sys.argv[1], sys.argv[2]
    fs = LazyFs(backing)
    threading.Thread(target=_control, args=(fs,), daemon=True).start()
    # No direct_io (the broker maps its files MAP_SHARED) and no kernel write-back cache: every write()
    # reaches us at once and the kernel keeps no dirty copy of written (unmapped) data.
    # hard_remove: no .fuse_hidden files in the broker's directories when it deletes an open file.
    mfusepy.FUSE(fs, mountpoint, foreground=True, nothreads=False, hard_remove=True, fsname="lazyfs")


if __name__ == "__main__":
    main()
