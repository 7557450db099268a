"""Drives the lazyfs FUSE daemon (tests/faults/lazyfs.py): mount, power cut, remount.

A power cut is: SIGKILL the broker (the caller does it), then ``PowerCutFs.cut()``: the daemon drops every
page not fsynced (or writes back a random part of them, torn) and exits, and the dead mount is detached.
``mount()`` again brings up a fresh daemon and a fresh kernel cache over what reached the backing dir.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path

DAEMON = Path(__file__).with_name("lazyfs.py")


class PowerCutFs:
    """A lazyfs mount at ``root/mnt`` over ``root/disk``."""

    def __init__(self, root: Path) -> None:
        self.backing = root / "disk"
        self.mountpoint = root / "mnt"
        self.log_path = root / "lazyfs.log"
        self.proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str] = queue.Queue()

    def mount(self, timeout: float = 15.0) -> PowerCutFs:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen([sys.executable, str(DAEMON), str(self.backing), str(self.mountpoint)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        lines: queue.Queue[str] = queue.Queue()
        self._lines = lines
        out = self.proc.stdout
        assert out is not None

        def pump() -> None:
            for x in out:
                lines.put(x)
        threading.Thread(target=pump, daemon=True).start()
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            line = ""
        if line.strip() != "mounted" or not os.path.ismount(self.mountpoint):
            self._kill()
            raise RuntimeError(f"lazyfs did not mount: {line!r}\n{self.log_path.read_text()[-2000:]}")
        return self

    def _ask(self, cmd: str, timeout: float = 30.0) -> dict[str, int]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return json.loads(self._lines.get(timeout=timeout))

    def stats(self) -> dict[str, int]:
        """Dirty (unsynced) pages and files held by the daemon, fsyncs and pages written back so far."""
        return self._ask("stats")

    def cut(self, torn: float = 0.0, seed: int = 0, keep_files: str = "") -> dict[str, int]:
        """The power cut: drop what was not fsynced, after writing back a ``torn`` share of it (some pages
        only partly) and all of it for the files matching the glob ``keep_files`` (a path under the mount,
        e.g. ``*/timerwheel``). Whatever still uses the mount must be dead already. Returns the daemon's
        counts."""
        assert " " not in keep_files
        report = self._ask(f"cut {torn} {seed} {keep_files}".rstrip())
        assert self.proc is not None
        self.proc.wait(10)
        self._detach()
        self._reboot()
        return report

    def _reboot(self) -> None:
        """A power cut is followed by a new boot of the machine. The store's abort file names the boot it
        was written in, and a crash recovered in the same boot is taken for a process crash, whose writes
        the page cache kept (docs/broker.md, "Restart after a crash"): give it the id a new boot would not
        match, as the machine's own reboot would."""
        for abort in self.backing.rglob("abort"):
            if abort.is_file() and abort.stat().st_size:
                abort.write_bytes(b"a-boot-before-the-power-cut")

    def unmount(self) -> None:
        """A clean unmount (nothing is dropped that was written back; unsynced pages are, as at a cut)."""
        if self.proc is not None and self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", str(self.mountpoint)], check=False, capture_output=True)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self._kill()
        self._detach()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._detach()

    def _detach(self) -> None:
        # After the daemon is gone the kernel answers ENOTCONN on the mount until it is detached.
        if os.path.ismount(self.mountpoint) or _is_dead_mount(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=False, capture_output=True)

    def __enter__(self) -> PowerCutFs:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()


def _is_dead_mount(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == 107  # ENOTCONN
    return False


@cache
def unavailable(probe_root: str) -> str | None:
    """Why the harness cannot run here, or None. Checked once: the device, the tools, a trial mount."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None:
        return "fusermount3 missing: run scripts/setup-system.sh as root (apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy or libfuse3 unusable ({e}): pip install -e '.[test]', scripts/setup-system.sh"
    fs = PowerCutFs(Path(probe_root))
    try:
        fs.mount()
    except (RuntimeError, OSError) as e:
        return f"mounting a FUSE filesystem is not permitted here: {str(e)[:300]}"
    fs.unmount()
    return None
