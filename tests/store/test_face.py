"""The store's face: the read API services use, StoreFace's awaitables, the MessageStore protocol the
store implements and everything outside store/ types against, and the rule that nothing outside store/
reaches into ConsumeQueues, mapped files or the CommitLog."""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from tests.store.conftest import put_one, rec
from tidalmq.store.api import MessageStore
from tidalmq.store.async_face import StoreFace
from tidalmq.store.consume_queue import BLANK_SIZE
from tidalmq.store.message_store import DefaultMessageStore, PutRequest

PER_FILE = 64  # small_config: 20 * 64-byte ConsumeQueue files


def fill(store, topic: str, n: int, queue_id: int = 0) -> list[int]:  # noqa: ANN001
    """Append n messages with tags t0..t(n-1); their CommitLog offsets."""
    offs = [put_one(store, topic, queue_id, body=f"m{i}".encode(), tags=f"t{i}").wrote_offset for i in range(n)]
    store.dispatch()
    return offs


def test_queue_range_and_next_queue_offset(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    assert store.queue_range("Face", 0) == (0, 0) and store.next_queue_offset("Face", 0) == 0
    assert not store.has_queue("Face", 0)
    fill(store, "Face", 3)
    assert store.has_queue("Face", 0)
    assert store.queue_range("Face", 0) == (0, 3)
    # Appended, not dispatched: the next queue offset is ahead of the queue's max offset.
    store.put_messages([PutRequest("Face", 0, [rec("Face"), rec("Face")])], dispatch_myself=True)
    assert store.next_queue_offset("Face", 0) == 5
    assert store.queue_range("Face", 0).max_offset == 3
    store.dispatch()
    assert store.queue_range("Face", 0).max_offset == 5


def test_read_queue_entries_point_at_records(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    offs = fill(store, "Face", 5)
    got = store.read_queue("Face", 0, 1, 3)
    assert (got.start, got.next_offset, len(got)) == (1, 4, 3)
    assert got.commit_log_offsets.tolist() == offs[1:4]
    for phys, size, _tag in got.rows():
        msg = store.look_message_by_offset(phys, size)
        assert msg is not None and msg.commit_log_offset == phys
    assert [store.look_message_by_offset(p, s).properties["TAGS"] for p, s, _ in got.rows()] == ["t1", "t2", "t3"]
    entry = store.queue_entry("Face", 0, 4)
    assert entry is not None and entry == store.read_queue("Face", 0, 4, 1).rows()[0] and entry[0] == offs[4]
    assert store.queue_entry("Face", 0, 5) is None  # past the end
    # The entries are copies: writing to them cannot reach the file, and they outlive it.
    assert not np.shares_memory(got.commit_log_offsets, store.read_queue("Face", 0, 1, 3).commit_log_offsets)


def test_read_queue_stops_at_a_file_end_and_rolls_over_a_missing_file(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    fill(store, "Roll", PER_FILE + 10)
    first = store.read_queue("Roll", 0, 60, 100)
    assert (first.start, first.next_offset) == (60, PER_FILE)  # never crosses a ConsumeQueue file
    second = store.read_queue("Roll", 0, first.next_offset, 100)
    assert (second.start, second.next_offset, len(second)) == (PER_FILE, PER_FILE + 10, 10)
    end = store.read_queue("Roll", 0, PER_FILE + 10, 100)
    assert len(end) == 0 and end.next_offset == end.start  # nothing more: the caller stops
    # A reader whose offset lost its file (retention deleting it under the reader) is moved to the next.
    cq = store.find_consume_queue("Roll", 0)
    cq.mfq.remove_files([cq.mfq.files[0]])
    gone = store.read_queue("Roll", 0, 5, 10)
    assert len(gone) == 0 and gone.next_offset == PER_FILE


def test_read_queue_below_min_reads_from_min(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    fill(store, "Min", 3)
    cq = store.find_consume_queue("Min", 0)
    cq.min_logic_offset = 2 * 20  # as retention leaves it
    got = store.read_queue("Min", 0, 0, 10)
    assert (got.start, len(got)) == (2, 1)
    assert store.queue_range("Min", 0) == (2, 3)


def test_queue_offset_at_or_after(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    a = fill(store, "Seek", 4)
    fill(store, "Other", 2)  # interleaved records of another queue do not matter
    b = fill(store, "Seek", 2)
    offs = a + b
    for i, phys in enumerate(offs):
        assert store.queue_offset_at_or_after("Seek", 0, phys) == i
        assert store.queue_offset_at_or_after("Seek", 0, phys - 1) == i
    assert store.queue_offset_at_or_after("Seek", 0, offs[-1] + 1) == 6  # none: the max offset
    assert store.queue_offset_at_or_after("None", 0, 0) == 0


def test_blank_entries_are_shown_as_stored(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    store.put_messages([PutRequest("Gap", 0, [rec("Gap")])])
    store.dispatch()
    cq = store.find_consume_queue("Gap", 0)
    with cq.write_lock:
        cq._fill_blank(1, 3)  # a gap, as a re-dispatch after a crash may leave
    got = store.read_queue("Gap", 0, 0, 10)
    assert got.sizes.tolist()[1:] == [BLANK_SIZE, BLANK_SIZE]


# ------------------------------------------------------------------ StoreFace
def test_wait_reput_completes_when_dispatch_passes_without_blocking_the_loop(make_store) -> None:  # noqa: ANN001
    store = make_store()  # reput thread running
    face = StoreFace(store)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        # Hold back dispatch (the reput thread and everyone else) while the loop waits.
        store.reput._round.acquire()
        try:
            r = store.put_messages([PutRequest("Wait", 0, [rec("Wait")])], dispatch_myself=True)[0]
            end = r.wrote_offset + r.wrote_bytes
            waiting = asyncio.ensure_future(face.wait_reput(end, 10))
            ticks = 0
            for _ in range(10):  # the loop runs other work meanwhile
                await asyncio.sleep(0)
                ticks += 1
            assert ticks == 10 and not waiting.done()
        finally:
            store.reput._round.release()
        await loop.run_in_executor(None, store.dispatch)
        assert await asyncio.wait_for(waiting, 5) is True
        assert store.queue_range("Wait", 0).max_offset == 1
        assert await face.wait_reput(end, 0.01) is True  # already there: at once

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_wait_reput_times_out(make_store) -> None:  # noqa: ANN001
    store = make_store()
    face = StoreFace(store)

    async def scenario() -> None:
        assert await face.wait_reput(store.max_phy_offset + 10_000, 0.05) is False

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_wait_reput_dispatches_a_store_that_is_not_started(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    face = StoreFace(store)
    store.put_messages([PutRequest("Cold", 0, [rec("Cold")])], dispatch_myself=True)

    async def scenario() -> bool:
        return await face.wait_reput(store.max_phy_offset, 5)

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) is True
    assert store.queue_range("Cold", 0).max_offset == 1


def test_flushed_and_run(make_store) -> None:  # noqa: ANN001
    store = make_store(flush_disk_type="SYNC_FLUSH")
    face = StoreFace(store)

    async def scenario() -> None:
        r = await face.run(put_one, store, "Flush")
        assert await face.flushed(r.wrote_offset + r.wrote_bytes) is True
        assert store.commit_log.flushed_where >= r.wrote_offset + r.wrote_bytes

    asyncio.run(asyncio.wait_for(scenario(), 10))


# ------------------------------------------------------------------ the rule
SRC = Path(__file__).resolve().parents[2] / "src" / "tidalmq"
# What only store/ may touch: the CommitLog and its tables, ConsumeQueues and their arrays, mapped files,
# reput, the index service, the checkpoint; and the modules that hold them.
INTERNALS = re.compile(
    r"\.commit_log\b|find_consume_queue\(|consume_queues\(|\.entries\(|\.mfq\b|\.reput\b"
    r"|\.index_service\b|\.checkpoint\b|\.flush_service\b|\.dispatcher\b|\.abort_file\b|store\.(queues|reader|stats)\b"
    r"|tidalmq\.store\.(commit_log|commit_log_scan|commit_log_recovery|commit_log_dispatcher|consume_queue"
    r"|consume_queue_table|message_reader|store_stats|abort_file|mapped_file|reput|flush|index_file|index_service"
    r"|checkpoint|clean)\b"
)


def test_nothing_outside_store_touches_its_internals() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "store":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if INTERNALS.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "use the store's read API (docs/broker.md, The store's face):\n" + "\n".join(offenders)


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    # The scan above must be able to fail: the uses it replaced all match.
    for line in ("cq = self.store.find_consume_queue(TOPIC, 0)", "arr = cq.entries(off, 10)",
                 "self.store.commit_log.topic_queue_table.get(k, 0)", "if store.index_service is None:",
                 "from tidalmq.store.consume_queue import BLANK_SIZE", "n = len(self.store.queues.queues())"):
        assert INTERNALS.search(line), line
    assert not INTERNALS.search("got = store.read_queue(TOPIC, 0, off, 10)")


# ------------------------------------------------------------------ the protocol
def _members(proto: type) -> set[str]:
    return {n for n in (*vars(proto), *proto.__annotations__) if not n.startswith("_")}


def test_the_store_implements_its_protocol_member_by_member(make_store) -> None:  # noqa: ANN001
    store = make_store(start=False)
    members = _members(MessageStore)
    assert {"put_messages", "get_message", "read_queue", "query_message", "runtime_info"} <= members
    missing = sorted(n for n in members if not hasattr(store, n))
    assert not missing, missing
    for name in members:
        declared = vars(MessageStore).get(name)
        if not callable(declared):  # an attribute, or a property
            continue
        ours = inspect.signature(getattr(DefaultMessageStore, name))
        assert list(ours.parameters) == list(inspect.signature(declared).parameters), name


STORE_TYPE = re.compile(r"\bDefaultMessageStore\b")


def test_outside_store_the_store_is_typed_as_its_protocol() -> None:
    """Only the broker, which makes its store, names DefaultMessageStore outside store/; everything else
    types against MessageStore (store/api.py)."""
    naming = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                    if p.relative_to(SRC).parts[0] != "store" and STORE_TYPE.search(p.read_text()))
    assert naming == ["broker/broker_controller.py"]
    made = [line.strip() for line in (SRC / "broker" / "broker_controller.py").read_text().splitlines()
            if STORE_TYPE.search(line) and "import" not in line]
    assert made and all(line.startswith("self.store: MessageStore = DefaultMessageStore(") for line in made), made


@pytest.mark.parametrize("name", ["SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC",
                                  "RMQ_SYS_TRANS_OP_HALF_TOPIC"])
def test_system_topic_names_are_declared_only_in_naming(name: str) -> None:
    decl = re.compile(rf"^\s*\w+\s*(:\s*\w+\s*)?=\s*[\"']{name}[\"']", re.M)
    where = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if decl.search(p.read_text())]
    assert where == ["common/naming.py"]
