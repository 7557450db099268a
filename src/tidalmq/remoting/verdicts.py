"""The server's access validator (ACL, docs/acl.md) run ahead of a connection's requests: they are
decoded and judged up to VALIDATE_AHEAD at a time before any is handled. Interleaved with the send
path, whose working set evicts it, the ACL check cost the broker more than back to back (the figures:
docs/benchmarks.md#security).

A validator with ``judge_many`` judges a chunk at once (what holds for the whole connection is looked up
once, not per request). One with ``judge_later`` may take a chunk and give its verdicts later (the ACL's
signature worker): the requests wait in order, up to AWAITED_CHUNKS chunks of a connection at a time
(ReadBackpressure), and handling resumes when they come."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from tidalmq.remoting.backpressure import VALIDATE_AHEAD, ReadBackpressure
from tidalmq.remoting.command import FrameDecoder, FrameError, RemotingCommand

if TYPE_CHECKING:
    from tidalmq.remoting.transport import Connection

log = logging.getLogger(__name__)

Validator = Callable[["Connection", RemotingCommand], RemotingCommand | None]
Verdict = tuple[RemotingCommand, RemotingCommand | None]
AWAITED = object()  # the verdict of a request in a chunk judged later, until it comes


class VerdictsAhead:
    """Requests judged but not handled yet (reading paused in between), in order. Entries are (request,
    verdict); a chunk judged later waits as [request, AWAITED] lists, filled in when its verdicts come,
    and a frame error met meanwhile waits behind them."""

    def __init__(self, conn: Connection, decoder: FrameDecoder, backpressure: ReadBackpressure,
                 on_verdicts: Callable[[], None]) -> None:
        self.conn = conn
        self.decoder = decoder
        self.backpressure = backpressure
        self.on_verdicts = on_verdicts  # verdicts came: the connection reads and handles again
        self.ahead: deque[Any] = deque()
        self.frame_error: FrameError | None = None

    def judged(self, commands: Generator[RemotingCommand, None, None], validator: Validator
               ) -> Generator[RemotingCommand, None, None]:
        """``commands``, judged by ``validator`` ahead; each yielded with its verdict in ``conn.verdict``
        (the server's dispatch takes it instead of asking the validator again). Judged requests left
        when the caller stops wait in ``ahead``; a frame error comes after the requests decoded before
        it, as it would unbatched."""
        conn, ahead, decoder, bp = self.conn, self.ahead, self.decoder, self.backpressure
        later = getattr(validator, "judge_later", None)
        exhausted = False
        try:
            while True:
                while ahead and ahead[0][1] is not AWAITED:
                    cmd, conn.verdict = ahead.popleft()
                    yield cmd
                if self.frame_error is not None:
                    if ahead:
                        return  # raised once the requests before it are handled
                    error, self.frame_error = self.frame_error, None
                    raise error
                if exhausted or bp.waiting_full(len(ahead)):
                    return
                chunk: list[RemotingCommand] = []
                first = decoder.decoded_to
                try:
                    for cmd in commands:
                        chunk.append(cmd)
                        if len(chunk) == VALIDATE_AHEAD:
                            break
                    else:
                        exhausted = True
                except FrameError as e:
                    self.frame_error = e
                if not chunk:
                    continue
                if later is not None and self.frame_error is None:
                    entries = [[cmd, AWAITED] for cmd in chunk]
                    try:
                        with decoder.frames_view(first, decoder.decoded_to) as frames:
                            taken = later(conn, chunk, frames,
                                          lambda verdicts, e=entries: self._verdicts_in(e, verdicts))
                    except Exception:
                        log.exception("the access validator could not take a chunk: judged now")
                        taken = False
                    if taken:
                        bp.chunk_awaited()
                        ahead.extend(entries)
                        continue
                ahead.extend(zip(chunk, self._judge_now(validator, chunk), strict=True))
        finally:
            conn.verdict = None
            commands.close()

    def _verdicts_in(self, entries: list[list[Any]], verdicts: list[Verdict | None]) -> None:
        """The verdicts on a chunk ``judge_later`` took: its requests are handled, in order."""
        for entry, verdict in zip(entries, verdicts, strict=True):
            entry[1] = verdict
        self.backpressure.verdicts_came()
        self.on_verdicts()

    def _judge_now(self, validator: Validator, chunk: list[RemotingCommand]) -> list[Verdict | None]:
        """The verdict on each request of ``chunk``: (request, refusal or None), or None where the
        validator failed (judged again at dispatch, where a failing check is answered SYSTEM_ERROR) and
        for responses."""
        many = getattr(validator, "judge_many", None)
        if many is not None:
            try:
                return many(self.conn, chunk)
            except Exception:
                return [None] * len(chunk)
        out: list[Verdict | None] = []
        for cmd in chunk:
            try:
                out.append(None if cmd.is_response else (cmd, validator(self.conn, cmd)))
            except Exception:
                out.append(None)
        return out
