"""The signature worker (docs/acl.md, "Cost"): a child process that says which requests of a chunk carry an
account's signature, and what the broker does when it fails."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidalmq.acl.signature_worker as sw
import tidalmq.acl.validator as validator_module
from tests.acl.test_units import _MIX, _conn, _remark, _signed, _validator, _verdicts
from tidalmq.acl.signature import Hmac, RequestSigner, SessionCredentials
from tidalmq.acl.signature_worker import SignatureWorker, check_frames
from tidalmq.acl.validator import PlainAccessValidator
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand, encode_frame, frames_in
from tidalmq.remoting.transport import Connection

KEYS = {"ak1": "secret-one", "ak2": "secret-two"}


def _frames(cmds: list[RemotingCommand]) -> bytes:
    return b"".join(encode_frame(c) for c in cmds)


def _signed_send(ak: str, body: bytes, secret: str | None = None) -> RemotingCommand:
    ext = {"a": "pg", "b": "topicB"}
    RequestSigner(SessionCredentials(ak, secret or KEYS[ak])).sign(ext, body)
    return RemotingCommand(code=310, ext_fields=ext, body=body)


def test_check_frames_passes_only_requests_signed_by_the_named_account() -> None:
    cmds = [_signed_send("ak1", b"x" * 3000), _signed_send("ak1", b"y", "wrong-secret"), _signed_send("ak2", b"z"),
            RemotingCommand(code=0, flag=1, ext_fields={"AccessKey": "ak1"}), _signed_send("ak1", b"")]
    raw = _frames(cmds)
    assert check_frames(raw, 0, len(raw), "ak1", Hmac(KEYS["ak1"])) == bytes([1, 0, 0, 0, 1])
    assert check_frames(raw, 0, len(raw), "ak1", None) == bytes(5)  # no key of that generation: nothing passes
    # A frame that does not decode ends the verdicts: the caller reads the missing ones as 0.
    cut = raw[:len(encode_frame(cmds[0]))] + (10**6).to_bytes(4, "big") + raw[len(encode_frame(cmds[0])) + 4:]
    assert check_frames(cut, 0, len(cut), "ak1", Hmac(KEYS["ak1"])) == bytes([1])


def test_ring_regions_are_taken_and_freed_in_order() -> None:
    w = SignatureWorker(ring_bytes=100)
    assert w._alloc(100) is None  # never the whole ring: a full ring and an empty one must differ
    job = lambda start, end: sw._Job(0, start, end, None, 0.0)  # noqa: E731
    assert w._alloc(60) == 0
    w._jobs.append(job(0, 60))
    w._tail = 60
    assert w._alloc(40) == 60 and w._alloc(41) is None
    w._jobs.append(job(60, 90))
    w._tail = 90
    w._jobs.popleft()  # the first answered: [0, 60) free again, the ring wraps
    assert w._alloc(59) == 0 and w._alloc(60) is None
    w._jobs.append(job(0, 50))
    w._tail = 50
    assert w._alloc(9) == 50 and w._alloc(10) is None  # up to the oldest region still out


async def _ready(w: SignatureWorker) -> None:
    async def wait() -> None:
        while not w.ready:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), 30)


async def _submit(w: SignatureWorker, acl: object, ak: str, cmds: list[RemotingCommand]) -> bytes | None:
    fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
    assert w.submit(acl, lambda: dict(KEYS), ak, memoryview(_frames(cmds)), fut.set_result)
    return await asyncio.wait_for(fut, 10)


def test_the_child_answers_each_chunk_in_order_with_the_keys_of_its_acl() -> None:
    async def go() -> None:
        w = SignatureWorker(ring_bytes=64 * 1024)
        w.start(asyncio.get_running_loop())
        try:
            await _ready(w)
            acl = object()
            good, bad = _signed_send("ak1", os.urandom(20_000)), _signed_send("ak1", b"b", "wrong-secret")
            loop = asyncio.get_running_loop()
            futs = [loop.create_future() for _ in range(6)]
            for i, fut in enumerate(futs):  # more than the ring holds at once: some wait for room
                chunk = [good, bad] if i % 2 else [bad, good, good]
                while not w.submit(acl, lambda: dict(KEYS), "ak1", memoryview(_frames(chunk)), fut.set_result):
                    await asyncio.sleep(0.001)
            assert await asyncio.gather(*futs) == [bytes([0, 1, 1]), bytes([1, 0])] * 3
            # Another ACL loaded: its keys go to the child before its first chunk.
            KEYS["ak1"] = "secret-new"
            try:
                assert await _submit(w, object(), "ak1", [good, _signed_send("ak1", b"n")]) == bytes([0, 1])
            finally:
                KEYS["ak1"] = "secret-one"
            assert w.failures == 0
        finally:
            w.close()

    asyncio.run(go())


def test_a_dead_child_answers_none_and_a_new_one_starts_later(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sw, "RESTART_AFTER_S", 0.2)

    async def go() -> None:
        w = SignatureWorker(ring_bytes=64 * 1024)
        w.start(asyncio.get_running_loop())
        try:
            await _ready(w)
            first = w.pid
            assert first is not None
            os.kill(first, signal.SIGSTOP)  # it cannot answer; then it dies with the job out
            fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
            assert w.submit(object(), lambda: dict(KEYS), "ak1", memoryview(_frames([_signed_send("ak1", b"x")])),
                            fut.set_result)
            os.kill(first, signal.SIGKILL)
            assert await asyncio.wait_for(fut, 10) is None  # the caller judges the chunk itself
            failed_at = time.monotonic()
            assert w.failures == 1 and not w.ready and w.pid is None
            # Checked inline meanwhile; a submit after RESTART_AFTER_S starts a new child (and is declined).
            deadline = failed_at + 10
            while w.pid is None:
                assert not w.submit(object(), lambda: dict(KEYS), "ak1", memoryview(b""), fut.set_result)
                assert time.monotonic() < deadline, "no new child"
                await asyncio.sleep(0.01)
            assert time.monotonic() - failed_at >= sw.RESTART_AFTER_S
            await _ready(w)
            assert w.pid != first
            assert await _submit(w, object(), "ak1", [_signed_send("ak1", b"x")]) == bytes([1])
        finally:
            w.close()

    asyncio.run(go())


def test_a_child_that_does_not_answer_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sw, "ANSWER_TIMEOUT_S", 0.3)

    async def go() -> None:
        w = SignatureWorker(ring_bytes=64 * 1024)
        w.start(asyncio.get_running_loop())
        try:
            await _ready(w)
            stuck = w.pid
            assert stuck is not None
            os.kill(stuck, signal.SIGSTOP)
            assert await _submit(w, object(), "ak1", [_signed_send("ak1", b"x")]) is None
            assert w.failures == 1 and w.pid is None
            with pytest.raises(ProcessLookupError):  # killed and reaped
                os.kill(stuck, 0)
        finally:
            w.close()

    asyncio.run(go())


class _LaterWorker:
    """SignatureWorker's face, without the process: the chunks' frames are kept and checked by the child's
    own function (check_frames) when the test lets them, or answered None (a failed child)."""

    def __init__(self) -> None:
        self.out: list[tuple[bytes, str, dict[str, str], Callable[[bytes | None], None]]] = []

    def submit(self, acl: object, secrets: Callable[[], dict[str, str]], access_key: str, frames: memoryview,
               deliver: Callable[[bytes | None], None]) -> bool:
        self.out.append((bytes(frames), access_key, secrets(), deliver))
        return True

    def answer(self, fail: bool) -> None:
        raw, ak, keys, deliver = self.out.pop(0)
        deliver(None if fail else check_frames(raw, 0, len(raw), ak, Hmac(keys[ak]) if ak in keys else None))


@settings(max_examples=120, deadline=None)
@given(picks=st.lists(st.integers(0, len(_MIX) - 1), max_size=40), split=st.integers(1, 41),
       host=st.sampled_from(["127.0.0.1", "192.168.1.3", "192.168.0.7"]), lag=st.integers(0, 2),
       fails=st.lists(st.booleans(), min_size=41, max_size=41))
def test_a_chunk_judged_later_gets_the_verdicts_of_its_requests_alone(
        tmp_path_factory: pytest.TempPathFactory, picks: list[int], split: int, host: str, lag: int,
        fails: list[bool]) -> None:
    """judge_later: the chunks a connection's steady stream is read in, their signatures checked by the
    worker (or not: it failed) and answered up to ``lag`` chunks later, others judged at once meanwhile;
    each request gets the verdict of checking it alone."""
    tmp = tmp_path_factory.mktemp("acl")
    alone, later = _validator(tmp), _validator(tmp)
    worker = _LaterWorker()
    later.use_worker(worker)  # type: ignore[arg-type]
    c1, c2 = _conn(host), _conn(host)
    # what the server would have decoded from the wire: a field added after signing stays added
    built = [_MIX[i][1]() for i in picks]  # type: ignore[operator]
    raw = _frames(built)
    cmds = list(frames_in(raw, 0, len(raw)))
    expected = ["response" if c.is_response else _remark(alone(c1, c)) for c in cmds]
    got: dict[int, list[str | None]] = {}
    taken = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validator_module, "_LATER_MIN_BYTES_PER_REQUEST", 0)
        for n, start in enumerate(range(0, len(cmds), split)):
            chunk = cmds[start:start + split]

            def deliver(v: list[tuple[RemotingCommand, RemotingCommand | None] | None], n: int = n,
                        chunk: list[RemotingCommand] = chunk) -> None:
                got[n] = _verdicts(v, chunk)
            if not later.judge_later(c2, chunk, memoryview(_frames(chunk)), deliver):
                got[n] = _verdicts(later.judge_many(c2, chunk), chunk)
            else:
                taken += 1
            while len(worker.out) > lag:
                worker.answer(fails[n])
        while worker.out:
            worker.answer(fails[-1])
    assert [v for n in sorted(got) for v in got[n]] == expected, [_MIX[i][0] for i in picks]


def test_only_a_steady_connection_and_large_requests_go_to_the_worker(tmp_path: Path) -> None:
    v: PlainAccessValidator = _validator(tmp_path)
    worker = _LaterWorker()
    v.use_worker(worker)  # type: ignore[arg-type]
    conn: Connection = _conn("127.0.0.1")
    big = [_signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"}, body=os.urandom(20_000)) for _ in range(3)]
    small = [_signed(RC.SEND_MESSAGE_V2, {"a": "pg", "b": "topicB"}, body=b"x") for _ in range(3)]

    def later(cmds: list[RemotingCommand]) -> bool:
        return v.judge_later(conn, cmds, memoryview(_frames(cmds)), lambda _: None)

    assert not later(big)  # the connection has not signed yet: the first check is the full one
    assert _remark(v(conn, big[0])) is None
    assert not later(small)  # 1 KiB sends: cheaper checked inline
    assert later(big) and len(worker.out) == 1
    white = _conn("192.168.0.7")  # a globally white address: nothing to check
    assert not v.judge_later(white, big, memoryview(_frames(big)), lambda _: None)
    v.use_worker(None)
    assert not later(big)
