"""When a server's connection stops and resumes reading from its peer: a state object without I/O, as
h11 keeps a connection's state (events in, decisions out). ``Connection`` reports what happened (its
write buffer filled or drained, a request was handled or deferred, a turn of the loop ended, the ACL's
verdicts on a chunk were awaited or came) and carries out the decisions (stop handling requests this
turn, pause or resume reading); tests/remoting/test_backpressure.py drives it without a socket.

Reading pauses while any of these holds:

* the transport's write buffer is over its high-water mark (a peer that does not read its responses);
* serverChannelMaxPendingRequests of the connection's requests wait for their answers (held pulls, group
  commits), until half of them are answered;
* the turn's share is used up: a connection's requests handled in one turn of the event loop are
  limited to about one read's worth of body bytes (``TURN_BYTES``), so that those handled so far are
  stored and answered before the rest, which waits for the next turn. Without it a pipelining client's
  whole window was handled and answered as one burst, and the client, refilling its window only then,
  left the broker idle until the next burst (docs/benchmarks.md, "A turn's share");
* enough requests wait behind the access validator's verdicts to come (``AWAITED_CHUNKS`` chunks, or
  ``HELD_MAX`` requests behind one).
"""

from __future__ import annotations

TURN_BYTES = 256 * 1024
# Requests decoded and judged by the server's access validator (ACL) together, before any of them is
# handled: back to back, the validator's code and tables stay warm (remoting/verdicts.py).
VALIDATE_AHEAD = 128
# Chunks of a connection whose verdicts the validator gives later (judge_later) at a time: while one is
# checked the next is read and handed over; past this, reading pauses until a verdict comes.
AWAITED_CHUNKS = 2
HELD_MAX = 2 * VALIDATE_AHEAD  # requests decoded while a verdict is awaited, at most (about)

# What ``handled`` tells the connection, as bits: schedule the end of this turn (its first request), and
# stop handling requests for now.
NEW_TURN = 1
STOP = 2
# What ``decide`` tells it to do with reading; None: nothing changes.
PAUSE = "pause"
RESUME = "resume"


class ReadBackpressure:
    __slots__ = ("write_full", "pending_full", "turn_used", "turn_full", "awaited", "reading_paused",
                 "turn_bytes", "awaited_chunks", "held_max")

    def __init__(self, turn_bytes: int = TURN_BYTES, awaited_chunks: int = AWAITED_CHUNKS,
                 held_max: int = HELD_MAX) -> None:
        self.turn_bytes = turn_bytes
        self.awaited_chunks = awaited_chunks
        self.held_max = held_max
        self.write_full = False  # the transport's write buffer is over its high-water mark
        self.pending_full = False  # too many requests of the connection wait for their answers
        self.turn_used = 0  # body bytes (plus one a request) of the requests handled in this turn
        self.turn_full = False  # this turn's share is handled: the rest waits for the next
        self.awaited = 0  # chunks whose verdicts the access validator gives later
        self.reading_paused = False

    # events -----------------------------------------------------------------------------------
    def write_paused(self) -> None:
        self.write_full = True

    def write_resumed(self) -> None:
        self.write_full = False

    def handled(self, size: int) -> int:
        """A request with ``size`` body bytes was handled: NEW_TURN when it is the turn's first, STOP
        when no more may be handled now."""
        step = 0 if self.turn_used else NEW_TURN
        self.turn_used += size + 1
        if self.write_full or self.pending_full:
            return step | STOP
        if self.turn_used >= self.turn_bytes:
            self.turn_full = True
            return step | STOP
        return step

    def turn_ended(self) -> bool:
        """A new turn of the loop: True when the last one's share was used up (requests wait)."""
        self.turn_used = 0
        if not self.turn_full:
            return False
        self.turn_full = False
        return True

    def deferred(self, pending: int, limit: int) -> bool:
        """A request will be answered later, ``pending`` of them now: True when that fills the limit."""
        if pending >= limit and not self.pending_full:
            self.pending_full = True
            return True
        return False

    def deferred_done(self, pending: int, limit: int) -> bool:
        """A deferred request was answered: True when that frees the connection (half the limit left)."""
        if self.pending_full and pending <= limit // 2:
            self.pending_full = False
            return True
        return False

    def chunk_awaited(self) -> None:
        self.awaited += 1

    def verdicts_came(self) -> None:
        self.awaited -= 1

    # decisions --------------------------------------------------------------------------------
    @property
    def may_handle(self) -> bool:
        """Whether requests may be handled (what the peer sent is not held back by its own lag)."""
        return not (self.write_full or self.pending_full)

    def waiting_full(self, held: int) -> bool:
        """Enough requests wait behind a verdict to come (``held`` judged and not handled yet): decode
        no more, read no more, until it comes."""
        return self.awaited >= self.awaited_chunks or (self.awaited > 0 and held >= self.held_max)

    def decide(self, held: int) -> str | None:
        """PAUSE or RESUME reading when that changes, None otherwise (``held``: as for waiting_full)."""
        pause = self.write_full or self.pending_full or self.turn_full or self.waiting_full(held)
        if pause == self.reading_paused:
            return None
        self.reading_paused = pause
        return PAUSE if pause else RESUME
