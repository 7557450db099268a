"""CPU per message of the hot paths' pure parts, without sockets (steadier than end-to-end figures on a
shared machine): the broker's decoding of a producer's SEND_MESSAGE_V2 header, its SEND response, and the
push consumer's concurrent consume service (work queue, process queue, offsets; a listener that does
nothing) at a given pull size, a single timer send's rewrite and its response with the recall handle,
a batch of 64 encoded into records (plain and timer messages) and a timer batch's rewrite, the dispatch
columns the append builds for a batch it wrote (plain, and a timer batch parked), the schedule process's
enqueue round over parked timer messages (what it reads of each from the CommitLog and files:
EnqueueFields.chunk_fields and TimerEnqueue.enqueue_chunk, from a store in a temp dir), and the timer store
entering a slot many messages fall due in. CPU seconds of this process (``time.process_time``), best of
``--rounds``.

    .venv/bin/python bench/hot_paths_bench.py [--rounds 5] [--compare bench/out/hot-paths-latest.json]

To compare two trees, run each tree's copy of this file (it puts its own tree's ``src`` first on the path).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import sys
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.broker.processors.send import SendMessageProcessor  # noqa: E402
from tidalmq.client.codec import SendHeaderTemplates  # noqa: E402
from tidalmq.client.message import MessageExt, MessageQueue  # noqa: E402
from tidalmq.client.offset_store import OffsetStore  # noqa: E402
from tidalmq.client.process_queue import ProcessQueue  # noqa: E402
from tidalmq.client.push.consume_concurrently import ConsumeConcurrentlyService  # noqa: E402
from tidalmq.client.push.listener import ListenerRunner  # noqa: E402
from tidalmq.common.message import encode_properties  # noqa: E402
from tidalmq.remoting.command import (  # noqa: E402
    RemotingCommand,
    SerializeType,
    decode_frame_body,
    encode_frame,
    encode_frame_parts,
)
from tidalmq.store.message_store import AppendResult, PutRequest, PutStatus  # noqa: E402


def best_us(fn: Callable[[], object], number: int, rounds: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=rounds, timer=time.process_time)) / number * 1e6


def send_header_decode(rounds: int) -> float:
    """One producer's V2 headers to 8 queues, as its template encodes them, decoded as the broker does."""
    t = SendHeaderTemplates()
    frames = []
    for i in range(8000):
        props = encode_properties({"UNIQ_KEY": f"7F000001ABCDEF{i:010d}", "WAIT": "true"})
        ext = t.encode(group="benchPG_1234abcd", topic="bench_ours_async_1234", queue_id=i % 8, sysflag=0,
                       born_timestamp=1700000000000 + i, flag=0, properties=props, broker_name="broker-a")
        cmd = RemotingCommand(code=310, opaque=i, serialize_type=SerializeType.ROCKETMQ, ext_encoded=ext)
        frames.append(encode_frame(cmd)[4:])

    def run() -> None:
        for f in frames:
            decode_frame_body(f)

    return best_us(run, 1, rounds) / len(frames)


def send_response(rounds: int) -> float:
    """The response to a stored send (SendMessageProcessor._response), encoded for the wire."""
    req = RemotingCommand(code=310, opaque=5, serialize_type=SerializeType.ROCKETMQ)
    put = PutRequest(topic="T", queue_id=3, records=[])
    res = AppendResult(PutStatus.PUT_OK)
    res.msg_id, res.queue_offset = "7F00000100002A9F0000000000000000", 123456
    proc = SendMessageProcessor.__new__(SendMessageProcessor)  # _response reads nothing of the broker's
    wire = (True,) if "wire_only" in inspect.signature(proc._response).parameters else ()
    return best_us(lambda: encode_frame_parts(proc._response(req, put, res, *wire)), 50_000, rounds)


def timer_single_send(rounds: int, n: int = 1000) -> tuple[float, float]:
    """What a single timer send costs the broker beyond a plain one: the rewrite that parks it (TimerRewrite,
    its text fast path; the message built for it subtracted) and its response with the recall handle,
    encoded (attach_recall_handle around SendMessageProcessor._response). µs a message."""
    import types

    from tidalmq.broker.message import InnerMessage
    from tidalmq.broker.processors.recall import attach_recall_handle
    from tidalmq.broker.schedule.hooks import TimerRewrite

    far = int(time.time() * 1000) + 3_600_000
    texts = [encode_properties({"UNIQ_KEY": f"{i:032X}", "WAIT": "true", "TIMER_DELIVER_MS": str(far + i)})
             for i in range(n)]
    rewrite = TimerRewrite(400 * 86_400_000, 10)

    def message(text: str) -> InnerMessage:
        return InnerMessage("BenchT", 3, b"body", 0, text, 0, far, b"\x7f\x00\x00\x01", 1234)

    def built() -> None:
        for t in texts:
            message(t)

    def parked() -> None:
        for t in texts:
            rewrite(message(t))

    msgs = [message(t) for t in texts]
    for m in msgs:
        rewrite(m)
    req = RemotingCommand(code=310, opaque=5, serialize_type=SerializeType.ROCKETMQ)
    put = PutRequest(topic="BenchT", queue_id=3, records=[])
    res = AppendResult(PutStatus.PUT_OK)
    res.msg_id, res.queue_offset = "7F00000100002A9F0000000000000000", 123456
    proc = SendMessageProcessor.__new__(SendMessageProcessor)
    wire = (True,) if "wire_only" in inspect.signature(proc._response).parameters else ()
    # attach_recall_handle takes the broker's name (older trees: the broker, of which it reads config.broker_name)
    broker: Any = ("broker-a" if "broker_name" in inspect.signature(attach_recall_handle).parameters
                   else types.SimpleNamespace(config=types.SimpleNamespace(broker_name="broker-a")))

    def answered() -> None:
        for m in msgs:
            attach_recall_handle(broker, req, m, encode_frame_parts)(proc._response(req, put, res, *wire))

    rewrite_us = (best_us(parked, 1, rounds) - best_us(built, 1, rounds)) / n
    return rewrite_us, best_us(answered, 1, rounds) / n


def consume_service(pull: int, rounds: int, n: int = 96_000) -> float:
    """8 queues, pulls of ``pull`` messages each, 20 workers, a coroutine listener of batch 1."""

    class Sender:
        async def send_message_back(self, m: MessageExt, delay_level: int | None = None) -> bool:
            return True

    async def once() -> float:
        mqs = [MessageQueue("T", "a", i) for i in range(8)]
        per = n // len(mqs)
        msgs = {mq: [MessageExt(topic="T", body=b"x", queue_id=mq.queue_id, queue_offset=o, commit_log_offset=o,
                                properties={}, broker_name="a") for o in range(per)] for mq in mqs}
        count = [0]
        done = asyncio.Event()

        async def on(ms: list[MessageExt]) -> None:
            count[0] += len(ms)
            if count[0] >= per * len(mqs):
                done.set()

        svc = ConsumeConcurrentlyService("CG", listener=ListenerRunner(on, thread_max=20, inline=True, name="b"),
                                         sender=Sender(), offset_store=OffsetStore(), workers=20)
        svc.start()
        pqs = {mq: ProcessQueue() for mq in mqs}
        t0 = time.process_time()
        for start in range(0, per, pull):
            for mq in mqs:
                pqs[mq].put(msgs[mq][start:start + pull])
                svc.submit(mq, pqs[mq])
            await asyncio.sleep(0)
        await done.wait()
        took = time.process_time() - t0
        await svc.shutdown(1.0)
        return took / (per * len(mqs)) * 1e6

    return min(asyncio.run(once()) for _ in range(rounds))


def stats_counting(rounds: int) -> tuple[float, float]:
    """The broker's counting of one stored send and of one pull (BrokerController.stats_put / stats_get):
    what the send and pull paths pay per request for the statistics (broker/stats.py where the tree has it)."""
    from collections import defaultdict

    from tidalmq.broker.broker_controller import BrokerController

    b = BrokerController.__new__(BrokerController)
    b.put_counts, b.put_bytes, b.get_counts, b.get_bytes = (defaultdict(int) for _ in range(4))  # older trees
    try:
        from tidalmq.broker.stats import BrokerStats
        b.stats = BrokerStats("DefaultCluster")
    except ImportError:
        pass
    res = AppendResult(PutStatus.PUT_OK)
    res.wrote_bytes = 300
    put = BrokerController.stats_put
    get = BrokerController.stats_get
    with_group = "group" in inspect.signature(get).parameters
    put_us = best_us(lambda: put(b, "bench_topic", 1, res), 200_000, rounds)
    if with_group:
        get_us = best_us(lambda: get(b, "bench_group", "bench_topic", 32, 9600), 200_000, rounds)
    else:
        get_us = best_us(lambda: get(b, "bench_topic", 32, 9600), 200_000, rounds)  # type: ignore[call-arg]
    return put_us, get_us


@contextlib.contextmanager
def _temp_store(**config: Any) -> Iterator[tuple[str, Any]]:
    """A started DefaultMessageStore in a temp dir (64 MiB CommitLog files, ``config`` set on its
    MessageStoreConfig), and the dir; shut down after."""
    import tempfile

    from tidalmq.store.config import MessageStoreConfig
    from tidalmq.store.message_store import DefaultMessageStore

    with tempfile.TemporaryDirectory(prefix="tidalmq-hotpaths-") as tmp:
        store = DefaultMessageStore(MessageStoreConfig(store_path_root_dir=f"{tmp}/store",
                                                       mapped_file_size_commit_log=64 << 20, **config))
        assert store.load()
        store.start()
        try:
            yield tmp, store
        finally:
            store.shutdown()


def store_pull(rounds: int, pull: int = 32, n: int = 32_768, raised: bool = False) -> float:
    """The store's read of one pull (DefaultMessageStore.get_message, no filter) of ``pull`` messages at the
    broker's default caps (32 messages / 256 KiB), or ``raised`` to 2,048 / 4 MiB, over one queue of ``n``
    100-byte messages: µs a pull."""
    from tidalmq.common.record import encode_record

    caps = {"max_transfer_count_on_message_in_memory": 2048,
            "max_transfer_bytes_on_message_in_memory": 4 << 20} if raised else {}
    with _temp_store(**caps) as (_tmp, store):
        recs = [encode_record(topic="BenchPull", queue_id=0, body=b"b" * 100, properties={"UNIQ_KEY": f"{i:032X}"},
                              born_timestamp=1, born_port=1, store_port=10911) for i in range(n)]
        for k in range(0, n, 512):
            res = store.put_messages([PutRequest("BenchPull", 0, recs[k:k + 512])])
            assert all(r.status == PutStatus.PUT_OK for r in res)
        assert store.wait_reput(store.max_phy_offset, 30)

        def read_all() -> None:
            off = 0
            while off < n:
                got = store.get_message("bench", "BenchPull", 0, off, pull)
                off = got.next_begin_offset

        return best_us(read_all, 1, rounds) / (n / pull)


def timer_enqueue_read(rounds: int, n: int = 4096) -> tuple[float, float]:
    """The schedule process's enqueue round over ``n`` parked timer messages (1 KiB bodies, the properties
    park_batch writes): µs a message to read their fields from the CommitLog (one round's worth at a time,
    as enqueue_round reads them), and to read and file them chunk by chunk (enqueue_chunk)."""
    import numpy as np

    from tidalmq.common import message as mc
    from tidalmq.common.naming import TIMER_TOPIC
    from tidalmq.common.record import encode_record
    from tidalmq.schedule.timer_enqueue import ENQUEUE_BATCH, ENQUEUE_MIN
    from tidalmq.schedule.timer_service import TimerMessageService

    with _temp_store() as (tmp, store):
        far = int(time.time() * 1000) + 3_600_000
        recs = [encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"b" * 1024, properties={
            "WAIT": "true", mc.TIMER_DELIVER_MS: str(far + i), mc.UNIQ_KEY: f"{i:032X}",
            mc.REAL_TOPIC: "BenchEnq", mc.REAL_QID: str(i % 4), mc.TIMER_OUT_MS: str(far + i)},
            born_timestamp=1, born_port=1, store_port=10911) for i in range(n)]
        for k in range(0, n, 64):
            res = store.put_messages([PutRequest(TIMER_TOPIC, 0, recs[k:k + 64])])
            assert all(r.status == PutStatus.PUT_OK for r in res)
        assert store.wait_reput(store.max_phy_offset, 30)
        got = store.read_queue(TIMER_TOPIC, 0, 0, n)
        phys, sizes = np.asarray(got.commit_log_offsets), np.asarray(got.sizes).astype(np.int32)
        deliver = np.asarray(got.tags_codes)  # each message's deliver time, as the round reads it
        svc = TimerMessageService(store, Path(tmp) / "store", precision_ms=10)

        def fields() -> None:
            for k in range(0, n, ENQUEUE_BATCH):
                part = slice(k, k + ENQUEUE_BATCH)
                svc.fields.chunk_fields(phys[part], sizes[part], deliver[part])

        def filed() -> None:
            for k in range(0, n, ENQUEUE_MIN):
                entries: list[np.ndarray] = []
                svc.enqueue.enqueue_chunk(phys[k:k + ENQUEUE_MIN], sizes[k:k + ENQUEUE_MIN],  # type: ignore[arg-type]
                                   deliver[k:k + ENQUEUE_MIN], None, 0, 1 << 62, entries)
                if (k + ENQUEUE_MIN) % ENQUEUE_BATCH == 0:
                    svc.enqueue.add_column_counts()  # the round's per-topic counts, as enqueue_round adds them

        return best_us(fields, 1, rounds) / n, best_us(filed, 1, rounds) / n


def _batch_bodies(batches: int, size: int, timer: bool, body_size: int = 1024) -> list[bytes]:
    """SEND_BATCH_MESSAGE bodies of ``size`` messages of ``body_size`` bytes, each with a UNIQ_KEY and, with
    ``timer``, a TIMER_DELIVER_MS one to two hours ahead."""
    import random
    import struct

    far = int(time.time() * 1000) + 3_600_000
    rnd = random.Random(7)
    body = b"x" * body_size

    def batch(base: int) -> bytes:
        parts = []
        for i in range(size):
            props = b"UNIQ_KEY\x01%032X\x02" % (base + i)
            if timer:
                props += b"TIMER_DELIVER_MS\x01%d\x02" % (far + rnd.randrange(3_600_000))
            total = 20 + len(body) + 2 + len(props)
            parts.append(struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(props)) + props)
        return b"".join(parts)

    return [batch(k * size) for k in range(batches)]


def _encode_kw() -> dict[str, object]:
    from tidalmq.broker.processors.send import BATCH_FORBIDDEN_PROPERTIES

    return {"topic": "BenchT", "queue_id": 1, "sysflag": 0, "born_timestamp": 1, "born_host": b"\x7f\0\0\1",
            "born_port": 1, "store_host": b"\x7f\0\0\1", "store_port": 10911,
            "forbidden_properties": BATCH_FORBIDDEN_PROPERTIES}


def batch_encode_and_park(rounds: int, batches: int = 200, size: int = 64) -> tuple[float, float, float]:
    """What a SEND_BATCH_MESSAGE of ``size`` 1 KiB messages costs the event loop before its append:
    encode_batch_records (with its property checks and the dispatch's properties read) for messages
    carrying a UNIQ_KEY alone, the same for timer messages (a TIMER_DELIVER_MS each), and the timer
    batch's rewrite after it (TimerRewrite.park_batch). µs a message."""
    from tidalmq.broker.schedule.hooks import TIMER_REQUEST_PROPERTIES, TimerRewrite
    from tidalmq.common.record_batch import encode_batch_records

    kw = _encode_kw()
    rewrite = TimerRewrite(400 * 86_400_000, 10)
    plain = _batch_bodies(batches, size, timer=False)
    timer = _batch_bodies(batches, size, timer=True)

    def encoded(bodies: list[bytes], park: bool) -> None:
        for b in bodies:
            records = encode_batch_records(b, **kw)
            if records.carries(TIMER_REQUEST_PROPERTIES) and park:
                rewrite.park_batch(records, "BenchT", 1)

    n = batches * size
    plain_us = best_us(lambda: encoded(plain, False), 1, rounds) / n
    timer_us = best_us(lambda: encoded(timer, False), 1, rounds) / n
    return plain_us, timer_us, best_us(lambda: encoded(timer, True), 1, rounds) / n - timer_us


def batch_dispatch_columns(rounds: int, batches: int = 50, size: int = 64) -> tuple[float, float]:
    """The dispatch columns the append builds for a batch it just wrote (CommitLogScan.keep_preread: what
    the reput files in the ConsumeQueue and the index without reading the records back), for a plain
    batch of ``size`` and for a timer batch parked in the timer topic. µs a message."""
    import tempfile

    from tidalmq.broker.schedule.hooks import TimerRewrite
    from tidalmq.common.naming import TIMER_TOPIC
    from tidalmq.common.record_batch import encode_batch_records
    from tidalmq.store.commit_log import CommitLog
    from tidalmq.store.config import MessageStoreConfig

    kw = _encode_kw()
    rewrite = TimerRewrite(400 * 86_400_000, 10)
    plain = [encode_batch_records(b, **kw) for b in _batch_bodies(batches, size, timer=False)]  # type: ignore[arg-type]
    parked = [encode_batch_records(b, **kw) for b in _batch_bodies(batches, size, timer=True)]  # type: ignore[arg-type]
    for records in parked:
        rewrite.park_batch(records, "BenchT", 1)
    with tempfile.TemporaryDirectory(prefix="tidalmq-hotpaths-") as tmp:
        log = CommitLog(MessageStoreConfig(store_path_root_dir=tmp, mapped_file_size_commit_log=1 << 20), clock=lambda: 0)

        scan = log.scan

        def columns(topic: str, batch: list) -> None:  # type: ignore[type-arg]
            for records in batch:
                scan.keep_preread(topic, 1 if topic != TIMER_TOPIC else 0, records, 0, records.nbytes, 1)
            scan._preread.clear()

        n = batches * size
        return (best_us(lambda: columns("BenchT", plain), 5, rounds) / n,
                best_us(lambda: columns(TIMER_TOPIC, parked), 5, rounds) / n)


def timer_batch_append(rounds: int, messages: int = 51_200) -> tuple[float, float]:
    """The CommitLog's append of parked timer batches (CommitLog.put: patched, written, their ids; the
    dispatch columns it keeps dropped after each round): W2's batches of 512 messages with 100-byte bodies,
    and batches of 64 with 1 KiB ones. µs a message."""
    import tempfile

    from tidalmq.broker.schedule.hooks import TimerRewrite
    from tidalmq.common.naming import TIMER_TOPIC
    from tidalmq.common.record_batch import encode_batch_records
    from tidalmq.store.commit_log import CommitLog
    from tidalmq.store.config import MessageStoreConfig

    kw = _encode_kw()
    rewrite = TimerRewrite(400 * 86_400_000, 10)
    out = []
    for size, body_size in ((512, 100), (64, 1024)):
        parked = [encode_batch_records(b, **kw) for b in _batch_bodies(messages // size, size, True, body_size)]  # type: ignore[arg-type]
        for records in parked:
            rewrite.park_batch(records, "BenchT", 1)
        with tempfile.TemporaryDirectory(prefix="tidalmq-hotpaths-") as tmp:
            cfg = MessageStoreConfig(store_path_root_dir=tmp, mapped_file_size_commit_log=1 << 30)
            log = CommitLog(cfg, clock=lambda: 0)

            def appended(log: CommitLog = log, parked: list = parked) -> None:  # type: ignore[type-arg]
                for records in parked:
                    log.put([PutRequest(TIMER_TOPIC, 0, records)], wake_reput=False)
                log.scan._preread.clear()

            try:
                out.append(best_us(appended, 1, rounds) / messages)
            finally:
                log.close()
    return out[0], out[1]


def timer_enqueue_rounds(rounds: int, n: int = 32_768) -> float:
    """The schedule process's enqueue rounds (TimerEnqueue.enqueue_round: read, filed into the
    timer store, counted) over ``n`` parked timer messages shaped as W2's (100-byte bodies, deliver times
    one minute to one hour ahead, one real topic), from a fresh timer store each time. µs a message."""
    import random

    from tidalmq.common import message as mc
    from tidalmq.common.naming import TIMER_TOPIC
    from tidalmq.common.record import encode_record
    from tidalmq.schedule.timer_service import TimerMessageService

    rnd = random.Random(11)
    now = int(time.time() * 1000)
    with _temp_store() as (tmp, store):
        for k in range(0, n, 512):
            recs = []
            for i in range(k, min(n, k + 512)):
                d = str(now + rnd.randrange(60_000, 3_600_000))
                recs.append(encode_record(topic=TIMER_TOPIC, queue_id=0, body=b"b" * 100, properties={
                    mc.TIMER_DELIVER_MS: d, mc.UNIQ_KEY: f"{i:032X}", mc.REAL_TOPIC: "BenchW2",
                    mc.REAL_QID: str(i % 4), mc.TIMER_OUT_MS: d}, born_timestamp=1, born_port=1, store_port=10911))
            assert all(r.status == PutStatus.PUT_OK for r in store.put_messages([PutRequest(TIMER_TOPIC, 0, recs)]))
        assert store.wait_reput(store.max_phy_offset, 30)
        best = float("inf")
        for r in range(rounds):
            svc = TimerMessageService(store, Path(tmp) / f"timer-{r}", precision_ms=10)
            svc.load()
            t0 = time.process_time()
            while svc.enqueue.enqueue_round():
                pass
            best = min(best, time.process_time() - t0)
            assert svc.timer.pending_count() == n
            svc.shutdown()
        return best / n * 1e6


def timer_slot_entry(rounds: int) -> float:
    """The timer store entering a slot (TimerStore.pop_due across a slot boundary: the slot's chain
    walked, its records gathered, sorted, cancels applied): ms a slot that ~10,000 messages fall due in,
    filed by 150 enqueue batches of 1,024 whose deliver times spread over 10 such slots and 3,000 far
    ones (as W2's 10,000 due/s window is filed). Best of ``rounds`` stores, each slot's entry timed."""
    import tempfile

    import numpy as np

    from tidalmq.schedule.entries import make_entries
    from tidalmq.schedule.timer_store import TimerStore

    t0 = 1_800_000_000_000
    best = float("inf")
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="tidalmq-hotpaths-") as tmp:
            clock = [t0]
            store = TimerStore(tmp, precision_ms=10, clock=lambda c=clock: c[0])
            store.load()
            rng = np.random.default_rng(7)
            end = 0
            for _ in range(150):
                due = np.concatenate([t0 + 2000 + rng.integers(0, 10_000, 700), t0 + 60_000 + rng.integers(0, 3_000_000, 324)])
                rng.shuffle(due)
                offsets = end + np.arange(len(due)) * 300
                end = int(offsets[-1]) + 300
                store.enqueue(make_entries(deliver_ms=due, offset=offsets, size=300), end)
            per_slot = []
            for slot in range(10):
                clock[0] = t0 + 2000 + slot * 1000 + 999
                t = time.process_time()
                store.pop_due(clock[0])
                per_slot.append(time.process_time() - t)
                store.commit_delivered(sync=False)
            best = min(best, sorted(per_slot)[len(per_slot) // 2] * 1000)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compare", help="a previous bench/out/hot-paths-*.json to compare with")
    args = ap.parse_args()
    print_machine()
    r: dict[str, float] = {}
    r["send_header_decode_us"] = send_header_decode(args.rounds)
    print(f"V2 send header decode (broker):        {r['send_header_decode_us']:6.2f} µs a header")
    r["send_response_us"] = send_response(args.rounds)
    print(f"send response, built and encoded:      {r['send_response_us']:6.2f} µs a response")
    r["timer_rewrite_us"], r["timer_send_response_us"] = timer_single_send(args.rounds)
    print(f"timer single send, rewrite:            {r['timer_rewrite_us']:6.2f} µs a message")
    print(f"timer single send, response + handle:  {r['timer_send_response_us']:6.2f} µs a response")
    put_us, get_us = stats_counting(args.rounds)
    r["stats_put_ns"], r["stats_get_ns"] = put_us * 1000, get_us * 1000
    print(f"stats counting, a stored send:         {put_us * 1000:6.0f} ns a request")
    print(f"stats counting, a pull:                {get_us * 1000:6.0f} ns a request")
    for pull in (32, 256):
        r[f"consume_pull{pull}_us"] = consume_service(pull, args.rounds)
        print(f"consume service, pulls of {pull:<4d}:        {r[f'consume_pull{pull}_us']:6.2f} µs a message")
    r["store_pull32_us"] = store_pull(args.rounds)
    print(f"store read of a pull of 32 (defaults): {r['store_pull32_us']:6.2f} µs a pull")
    r["store_pull1024_raised_us"] = store_pull(args.rounds, pull=1024, raised=True) / 1024
    print(f"store read of a pull of 1024 (raised): {r['store_pull1024_raised_us']:6.2f} µs a message")
    r["batch64_encode_us"], r["timer_batch64_encode_us"], r["timer_batch64_park_us"] = batch_encode_and_park(args.rounds)
    print(f"batch of 64 encoded (UNIQ_KEY only):   {r['batch64_encode_us']:6.2f} µs a message")
    print(f"timer batch of 64 encoded:             {r['timer_batch64_encode_us']:6.2f} µs a message")
    print(f"timer batch of 64, parked after that:  {r['timer_batch64_park_us']:6.2f} µs a message")
    r["batch64_columns_us"], r["timer_batch64_columns_us"] = batch_dispatch_columns(args.rounds)
    print(f"batch of 64, its append's columns:     {r['batch64_columns_us']:6.2f} µs a message")
    print(f"timer batch of 64 parked, the same:    {r['timer_batch64_columns_us']:6.2f} µs a message")
    r["timer_batch512_append_us"], r["timer_batch64_append_us"] = timer_batch_append(args.rounds)
    print(f"timer batch of 512 (100 B) appended:   {r['timer_batch512_append_us']:6.2f} µs a message")
    print(f"timer batch of 64 (1 KiB) appended:    {r['timer_batch64_append_us']:6.2f} µs a message")
    r["timer_enqueue_fields_us"], r["timer_enqueue_filed_us"] = timer_enqueue_read(args.rounds)
    print(f"timer enqueue, fields read (a round):  {r['timer_enqueue_fields_us']:6.2f} µs a message")
    print(f"timer enqueue, read and filed (chunks):{r['timer_enqueue_filed_us']:6.2f} µs a message")
    r["timer_enqueue_rounds_us"] = timer_enqueue_rounds(args.rounds)
    print(f"timer enqueue rounds (W2-shaped):      {r['timer_enqueue_rounds_us']:6.2f} µs a message")
    r["timer_slot_entry_ms"] = timer_slot_entry(args.rounds)
    print(f"timer slot entry, ~10,000 due in it:   {r['timer_slot_entry_ms']:6.2f} ms a slot (median of 10)")
    print(f"saved {save('hot-paths', r)}")
    compare(args.compare, r)


if __name__ == "__main__":
    main()
