"""The TimerStore against a reference model (a dict and a sort) over random enqueue / cancel / advance /
commit / reopen sequences, with delays in the past, within the wheel and several horizons beyond it."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidalmq.schedule import TimerStore, make_entries

from .conftest import Clock

SLOT, PRECISION, SLOTS = 100, 10, 20  # a 2 s horizon, so 10 s delays roll several times

REVOLUTION = SLOT * SLOTS

deltas = st.integers(-3_000, 10_000).map(lambda x: x - x % 5)  # coarse, so equal deliver times happen
# A deliver time in its slot's last tick rounds up into the next slot: the pop that releases it also moves
# the cursor on (the state that once wedged the wheel after a lull).
last_tick = st.integers(0, 3 * SLOTS).map(lambda k: ("last_tick", k))
row = st.tuples(st.one_of(deltas, last_tick), st.integers(0, 3))
# Steps within a revolution, and lulls longer than one (the cursor must catch up over an empty wheel).
step = st.one_of(st.integers(0, 2_500), st.integers(REVOLUTION, 4 * REVOLUTION))
op = st.one_of(
    st.tuples(st.just("enqueue"), st.lists(row, max_size=12), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 1_000), st.integers(0, 3)),
    st.tuples(st.just("advance"), step, st.sampled_from([1, 3, 1_000_000])),
    # Commit the first k popped (k past the end: all of them), checkpoint now or not, as the service does.
    st.tuples(st.just("commit"), st.integers(0, 5), st.booleans()),
    st.tuples(
        st.just("reopen"),
    ),
)


def deliver_at(now: int, d: int | tuple[str, int]) -> int:
    if isinstance(d, tuple):  # the last tick of the k-th slot from now
        return (now // SLOT + d[1]) * SLOT + SLOT - PRECISION // 2
    return now + d


class Model:
    def __init__(self) -> None:
        self.pending: dict[int, tuple[int, int]] = {}  # offset -> (effective deliver_ms, uhash)
        self.markers: set[tuple[int, int]] = set()
        self.popped: list[tuple[int, int, int]] = []  # popped, not committed: (deliver_ms, offset, uhash)
        self.offset = 0  # next CommitLog offset

    def due(self, now: int, limit: int) -> list[tuple[int, int]]:
        cutoff = now // PRECISION * PRECISION
        for off, (d, h) in list(self.pending.items()):
            if (d, h) in self.markers:
                del self.pending[off]
        return sorted((d, off) for off, (d, _) in self.pending.items() if d <= cutoff)[:limit]

    def take(self, got: list[tuple[int, int]]) -> None:
        for d, off in got:
            self.popped.append((d, off, self.pending.pop(off)[1]))


def pairs(a) -> list[tuple[int, int]]:
    return [(int(d), int(f)) for d, f in zip(a["deliver_ms"], a["offset"], strict=True)]


programs = st.lists(op, min_size=4, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_store_matches_model(ops: list[tuple]) -> None:
    run_against_model(ops)


@pytest.mark.slow
@settings(max_examples=3_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_store_matches_model_long(ops: list[tuple]) -> None:
    run_against_model(ops)


def run_against_model(ops: list[tuple]) -> None:
    clock = Clock()
    m = Model()
    with tempfile.TemporaryDirectory() as root:

        def fresh() -> TimerStore:
            s = TimerStore(
                root,
                precision_ms=PRECISION,
                slot_ms=SLOT,
                wheel_slots=SLOTS,
                clock=clock,
                records_per_segment=16,
            )
            s.load()
            return s

        s = fresh()
        batches: list = []
        for o in ops:
            kind = o[0]
            if kind == "enqueue":
                _, rows, replay = o
                if replay and batches:
                    # A replay of an earlier batch (the caller re-reading the CommitLog): all duplicates.
                    e, end = batches[len(batches) // 2]
                    assert s.enqueue(e, end).accepted == 0
                    continue
                cursor_ms = s.read_cursor[0]
                offs = list(range(m.offset, m.offset + len(rows)))
                m.offset += len(rows) + 1
                e = make_entries(
                    deliver_ms=[deliver_at(clock.now, d) for d, _ in rows],
                    offset=offs,
                    uhash=[h for _, h in rows],
                    size=1,
                )
                batches.append((e, m.offset))
                s.enqueue(e, m.offset)
                for (d, h), off in zip(rows, offs, strict=True):
                    m.pending[off] = (max(deliver_at(clock.now, d), cursor_ms), h)
            elif kind == "cancel":
                _, pick, h = o
                live = sorted(m.pending.items())
                if live:
                    d, h = live[pick % len(live)][1]
                else:
                    d = clock.now + pick
                expect = d >= s.read_cursor[0]
                assert s.cancel(d, h) == expect
                if expect:
                    m.markers.add((d, h))
            elif kind == "advance":
                _, dt, limit = o
                clock.now += dt
                had_uncommitted = bool(m.popped)
                got = pairs(s.pop_due(clock.now, limit))
                want = m.due(clock.now, limit)
                # Exact, except that the store may stop short while pops stay uncommitted for a revolution.
                assert got == want[: len(got)]
                if len(got) < len(want):
                    assert had_uncommitted or got
                m.take(got)
            elif kind == "commit":
                _, k, sync = o
                k = min(k, len(m.popped))
                if k:
                    d, off, _ = m.popped[k - 1]
                    s.commit_delivered((d, off), sync=sync)
                    del m.popped[:k]
            else:
                s.close()
                s = fresh()
                for d, off, h in m.popped:  # popped but not committed: delivered again
                    m.pending[off] = (d, h)
                m.popped.clear()
        # Drain, committing as the broker's timer service does (the last popped key, the checkpoint written
        # later): everything pending comes out, once, in order.
        clock.now += 60_000
        s.commit_delivered()
        m.popped.clear()
        got = []
        while True:
            step = pairs(s.pop_due(clock.now))
            if not step:
                break
            got += step
            s.commit_delivered(step[-1], sync=False)
        s.commit_delivered(s.committed_cursor, sync=True)
        assert got == m.due(clock.now, 1 << 60)
        assert s.pending_count() == 0
        # After a lull longer than a revolution the wheel still releases new timers.
        clock.now += 2 * REVOLUTION + PRECISION
        assert len(s.pop_due(clock.now)) == 0
        deliver = clock.now + PRECISION
        s.enqueue(make_entries(deliver_ms=[deliver], offset=[m.offset], size=1), m.offset + 1)
        clock.now = -(-deliver // PRECISION) * PRECISION
        assert pairs(s.pop_due(clock.now)) == [(deliver, m.offset)]
        s.close()
