"""The back-pressure of a server's connection as a state object, without sockets: events in (requests
handled or deferred, the write buffer full or drained, a turn of the loop ended, verdicts awaited or
come), decisions out (stop handling this turn; pause or resume reading, each said once)."""

from __future__ import annotations

from tidalmq.remoting.backpressure import NEW_TURN, PAUSE, RESUME, STOP, ReadBackpressure


def test_a_turns_share_stops_handling_pauses_reading_and_the_next_turn_resumes_it() -> None:
    bp = ReadBackpressure(turn_bytes=1000)
    assert bp.handled(400) == NEW_TURN  # the turn's first request: its end is to be scheduled
    assert bp.handled(400) == 0
    assert bp.decide(0) is None  # reading, as it was
    assert bp.handled(400) == STOP  # 1,203 bytes counted: the share is used up
    assert bp.decide(0) == PAUSE
    assert bp.decide(0) is None  # said once
    assert bp.turn_ended() is True  # requests were left for this turn
    assert bp.decide(0) == RESUME
    assert bp.turn_ended() is False  # a turn that used no share leaves nothing
    assert bp.handled(0) == NEW_TURN


def test_a_full_write_buffer_stops_handling_at_once_until_it_drains() -> None:
    bp = ReadBackpressure()
    bp.write_paused()
    assert not bp.may_handle
    assert bp.handled(10) == NEW_TURN | STOP
    assert bp.decide(0) == PAUSE
    assert bp.turn_ended() is False  # the turn's share is not why it stopped
    assert bp.decide(0) is None  # still paused: the buffer is full
    bp.write_resumed()
    assert bp.may_handle
    assert bp.decide(0) == RESUME


def test_pending_requests_pause_at_the_limit_and_resume_at_half_of_it() -> None:
    bp = ReadBackpressure()
    assert bp.deferred(9, limit=10) is False
    assert bp.deferred(10, limit=10) is True
    assert bp.deferred(11, limit=10) is False  # already full: nothing new to decide
    assert bp.decide(0) == PAUSE
    assert bp.handled(1) & STOP
    assert bp.deferred_done(6, limit=10) is False
    assert bp.decide(0) is None
    assert bp.deferred_done(5, limit=10) is True
    assert bp.decide(0) == RESUME


def test_awaited_verdicts_pause_reading_by_chunks_or_by_requests_held() -> None:
    bp = ReadBackpressure(awaited_chunks=2, held_max=100)
    bp.chunk_awaited()
    assert not bp.waiting_full(held=99)
    assert bp.decide(99) is None
    assert bp.waiting_full(held=100)  # one chunk awaited, and enough decoded behind it
    assert bp.decide(100) == PAUSE
    assert bp.decide(10) == RESUME  # handled down below the mark
    bp.chunk_awaited()
    assert bp.waiting_full(held=0)  # two chunks awaited
    assert bp.decide(0) == PAUSE
    bp.verdicts_came()
    assert bp.decide(0) == RESUME
    bp.verdicts_came()
    assert not bp.waiting_full(held=1000)  # none awaited: what is held is handled as it comes


def test_reading_resumes_only_when_no_cause_is_left() -> None:
    bp = ReadBackpressure(turn_bytes=10)
    bp.handled(20)
    bp.write_paused()
    bp.deferred(4, limit=4)
    assert bp.decide(0) == PAUSE
    bp.turn_ended()
    assert bp.decide(0) is None
    bp.write_resumed()
    assert bp.decide(0) is None
    bp.deferred_done(2, limit=4)
    assert bp.decide(0) == RESUME
