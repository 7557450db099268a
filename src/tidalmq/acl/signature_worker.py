"""ACL signatures checked in a child process, beside the broker's event loop (docs/acl.md, "Cost").

ACL 1.0 signs every request's body, so its check is one HMAC-SHA1 over everything a client sends: on a
broker with one event loop that hash ran on the loop, the broker's busiest core. ``SignatureWorker``
starts a child process (``main`` here), which checks, for a chunk of requests read together
from one connection, whether each is signed by the account the loop names, and answers one byte a
request. The loop's part is a copy of the chunk's frames into a ring both processes map, one message
out and one back; the loop still decides everything else (permissions, and every request the child did
not pass takes the whole check there), so a wrong, late or missing answer can cost time, never let a
request through.

Parent and child share an anonymous memfd ring and a SOCK_SEQPACKET socket pair (whole messages, never
part of one). Parent to child: KEYS (the accounts' secrets of one loaded ACL, in the ring) and JOB (a
ring region of whole frames and the access key to check them for). Child to parent: READY once, then one
answer per JOB in order (the job's number and a verdict byte a frame). The child ends when the socket
closes: it dies with the broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mmap
import os
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tidalmq.acl.signature import ACCESS_KEY, SIGNATURE, Hmac
from tidalmq.remoting.command import FLAG_RESPONSE, FrameError, frames_in

log = logging.getLogger(__name__)

RING_BYTES = 8 * 1024 * 1024  # frames waiting for their answers; a chunk that does not fit is checked inline
# No answer to the oldest job for this long: the child is taken as stuck. A healthy one answers in well
# under a millisecond a job (at most the ring's 8 MiB wait: ~5 ms of hashing), and a send that waits
# longer than waitTimeMillsInSendQueue (200 ms) in all is refused as "broker busy".
ANSWER_TIMEOUT_S = 0.1
RESTART_AFTER_S = 5.0  # after a failure, checks run inline for this long before a new child is tried
_HEAD = struct.Struct("<cIQQQ")  # kind, key generation, job number, ring offset, length (+ access key)
_ANSWER = struct.Struct("<Q")  # job number (+ a verdict byte a frame)
_READY = b"READY"
_KEYS, _JOB = b"K", b"J"
_MESSAGE_MAX = 64 * 1024  # an answer: 8 bytes and a byte a frame of one chunk
# Not ``-m``: the package imports this module first (runpy warns of that).
_CHILD = "import sys; from tidalmq.acl.signature_worker import main; sys.exit(main(sys.argv[1:]))"

Deliver = Callable[[bytes | None], None]


@dataclass(slots=True)
class _Job:
    number: int
    start: int
    end: int
    deliver: Deliver | None  # None for KEYS
    sent_at: float


class SignatureWorker:
    """The broker's side: ``submit`` a chunk's frames for an access key, get its verdicts later (on the
    event loop) through ``deliver``: a byte a frame, 1 where the frame is a request signed by that key's
    secret, or None when the child failed (the caller checks the chunk itself)."""

    def __init__(self, ring_bytes: int = RING_BYTES) -> None:
        self.ring_bytes = ring_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._ring: mmap.mmap | None = None
        self._ready = False
        self._jobs: deque[_Job] = deque()
        self._tail = 0  # ring offset after the newest job's region
        self._numbers = 0
        self._generation = 0
        self._keys_for: object | None = None  # the loaded ACL whose keys the child has (or is sent next)
        self._keys_due: bytes | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._retry_at = 0.0
        self.failures = 0

    # lifecycle --------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the child (on the event loop that will submit to it). Until it says READY, ``submit``
        declines and the caller checks inline."""
        self._loop = loop
        self._spawn()

    def _spawn(self) -> None:
        assert self._loop is not None
        ring_fd = os.memfd_create("tidalmq-acl-ring", os.MFD_CLOEXEC)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            os.ftruncate(ring_fd, self.ring_bytes)
            self._ring = mmap.mmap(ring_fd, self.ring_bytes)
            cmd = [sys.executable, "-c", _CHILD, str(theirs.fileno()), str(ring_fd), str(self.ring_bytes)]
            self._proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(), ring_fd), stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        except BaseException:
            mine.close()
            if self._ring is not None:
                self._ring.close()
                self._ring = None
            raise
        finally:
            theirs.close()
            os.close(ring_fd)
        mine.setblocking(False)
        self._sock = mine
        self._ready = False
        self._keys_for = None
        self._loop.add_reader(mine.fileno(), self._on_answers)

    def close(self) -> None:
        self._stop_child(kill=False)
        self._fail_jobs()

    def _stop_child(self, *, kill: bool) -> None:
        """Close its socket (it exits when it reads the end); a failed one is killed at once, not waited
        for on the event loop."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        sock, self._sock = self._sock, None
        if sock is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(sock.fileno())
            sock.close()  # the child reads the end of its socket and exits
        proc, self._proc = self._proc, None
        if proc is not None:
            if kill:
                proc.kill()
            try:
                proc.wait(1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        self._ready = False

    def _fail_jobs(self) -> None:
        """Every job still out is answered None (checked by its caller), later on the loop: a failure met
        inside ``submit`` must not run a connection's processing from within itself."""
        jobs, self._jobs = self._jobs, deque()
        self._tail = 0
        for job in jobs:
            if job.deliver is not None and self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon(job.deliver, None)

    def _fail(self, why: str) -> None:
        self.failures += 1
        log.error("ACL signature worker failed (%s): signatures are checked on the event loop for the next "
                  "%g s, then a new worker is started", why, RESTART_AFTER_S)
        self._stop_child(kill=True)
        self._fail_jobs()
        self._retry_at = time.monotonic() + RESTART_AFTER_S

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return None if proc is None else proc.pid

    @property
    def ready(self) -> bool:
        return self._ready

    # submitting -------------------------------------------------------------------------------
    def submit(self, acl: object, secrets: Callable[[], dict[str, str]], access_key: str,
               frames: memoryview, deliver: Deliver) -> bool:
        """Have the child check ``frames`` (whole frames of one connection, laid end to end) for
        ``access_key`` under the loaded ACL ``acl`` (``secrets`` gives its keys by access key, asked when
        the child does not have them yet). True: ``deliver`` is called once, later, on the loop. False:
        nothing was taken (no child ready, the ring or the socket full); check the chunk now."""
        if not self._ready:
            if self._sock is None and self._loop is not None and time.monotonic() >= self._retry_at:
                try:
                    self._spawn()
                except OSError as e:
                    self._fail(f"cannot start: {e}")
            return False
        if acl is not self._keys_for:
            self._generation += 1
            self._keys_for = acl
            self._keys_due = json.dumps(secrets()).encode("utf-8")
        if self._keys_due is not None and not self._put(_KEYS, b"", self._keys_due, None):
            return False
        return self._put(_JOB, access_key.encode("utf-8"), frames, deliver)

    def _put(self, kind: bytes, tail: bytes, data: bytes | memoryview, deliver: Deliver | None) -> bool:
        n = len(data)
        at = self._alloc(n)
        if at is None:
            return False
        ring, sock = self._ring, self._sock
        assert ring is not None and sock is not None
        ring[at:at + n] = data
        self._numbers += 1
        try:
            sock.send(_HEAD.pack(kind, self._generation, self._numbers, at, n) + tail)
        except BlockingIOError:
            self._numbers -= 1
            return False
        except OSError as e:
            self._fail(f"cannot write to it: {e}")
            return False
        if kind == _KEYS:
            self._keys_due = None
        self._tail = at + n
        now = time.monotonic()
        self._jobs.append(_Job(self._numbers, at, at + n, deliver, now))
        if self._timer is None:
            assert self._loop is not None
            self._timer = self._loop.call_later(ANSWER_TIMEOUT_S, self._check_answered)
        return True

    def _alloc(self, n: int) -> int | None:
        """Where n bytes go in the ring, or None: regions are freed in the order they were taken."""
        if not self._jobs:
            return 0 if n < self.ring_bytes else None
        head, tail = self._jobs[0].start, self._tail
        if tail > head:  # free: [tail, end) and [0, head)
            if tail + n <= self.ring_bytes:
                return tail
            return 0 if n < head else None
        return tail if tail + n < head else None  # wrapped: free [tail, head)

    # answers ----------------------------------------------------------------------------------
    def _on_answers(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                msg = sock.recv(_MESSAGE_MAX)
            except BlockingIOError:
                return
            except OSError as e:
                self._fail(f"cannot read from it: {e}")
                return
            if not msg:
                self._fail("it exited" if self._proc is None or self._proc.poll() is not None else "it closed")
                return
            if not self._ready:
                if msg != _READY:
                    self._fail("it did not start as expected")
                    return
                self._ready = True
                continue
            (number,) = _ANSWER.unpack_from(msg)
            job = self._jobs.popleft() if self._jobs else None
            if job is None or job.number != number:
                self._fail("answers out of order")
                return
            if not self._jobs:
                self._tail = 0
            if job.deliver is not None:
                try:
                    job.deliver(msg[_ANSWER.size:])
                except Exception:
                    log.exception("handling a signature worker's answer failed")
            sock = self._sock

    def _check_answered(self) -> None:
        self._timer = None
        if not self._jobs:
            return
        waited = time.monotonic() - self._jobs[0].sent_at
        if waited >= ANSWER_TIMEOUT_S:
            self._fail(f"no answer in {ANSWER_TIMEOUT_S:g} s")
            return
        assert self._loop is not None
        self._timer = self._loop.call_later(ANSWER_TIMEOUT_S - waited, self._check_answered)


# the child ------------------------------------------------------------------------------------
def check_frames(ring: mmap.mmap | bytes, start: int, end: int, access_key: str, mac: Hmac | None) -> bytes:
    """A verdict byte for each whole frame in ``ring[start:end]``: 1 for a request whose AccessKey is
    ``access_key`` and whose Signature is ``mac``'s over it (as PlainAccessValidator checks it), else 0.
    Frames after one that does not decode get no byte (their caller reads a missing byte as 0)."""
    out = bytearray()
    try:
        with memoryview(ring) as view:
            commands = frames_in(view, start, end)
            for cmd in commands:
                ext = cmd.ext_fields
                sig = ext.get(SIGNATURE)
                ok = (mac is not None and not cmd.flag & FLAG_RESPONSE and sig is not None
                      and ext.get(ACCESS_KEY) == access_key and mac.verify(ext, cmd.body, sig))
                out.append(ok)
            commands.close()  # no frame of it left holding the view
    except FrameError:
        pass
    return bytes(out)


def _serve(sock: socket.socket, ring: mmap.mmap) -> None:
    sock.send(_READY)
    macs: dict[str, Hmac] = {}
    generation = -1
    while True:
        msg = sock.recv(_MESSAGE_MAX)
        if not msg:
            return
        kind, gen, number, at, n = _HEAD.unpack_from(msg)
        if kind == _KEYS:
            macs = {ak: Hmac(sk) for ak, sk in json.loads(ring[at:at + n]).items()}
            generation = gen
            verdicts = b""
        else:
            ak = msg[_HEAD.size:].decode("utf-8")
            verdicts = check_frames(ring, at, at + n, ak, macs.get(ak) if gen == generation else None)
        sock.sendall(_ANSWER.pack(number) + verdicts)


def main(argv: list[str]) -> int:
    fd, ring_fd, size = (int(a) for a in argv)
    sock = socket.socket(fileno=fd)
    ring = mmap.mmap(ring_fd, size)
    try:
        _serve(sock, ring)
    except (BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass
    return 0

