"""CPU per message of the hot paths' pure parts, without sockets (steadier than end-to-end figures on a
shared machine): the broker's decoding of a producer's SEND_MESSAGE_V2 header, its SEND response, and the
push consumer's concurrent consume service (work queue, process queue, offsets; a listener that does
nothing) at a given pull size. CPU seconds of this process (``time.process_time``), best of ``--rounds``.

    .venv/bin/python bench/hot_paths_bench.py [--rounds 5]

To compare two trees, run it with each one's ``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import time
import timeit
from collections.abc import Callable

from tidalmq.broker.processors.send import SendMessageProcessor
from tidalmq.client.codec import SendHeaderTemplates
from tidalmq.client.message import MessageExt, MessageQueue
from tidalmq.client.offset_store import OffsetStore
from tidalmq.client.process_queue import ProcessQueue
from tidalmq.client.push.consume_concurrently import ConsumeConcurrentlyService
from tidalmq.client.push.listener import ListenerRunner
from tidalmq.common.message import encode_properties
from tidalmq.remoting.command import (
    RemotingCommand,
    SerializeType,
    decode_frame_body,
    encode_frame,
    encode_frame_parts,
)
from tidalmq.store.message_store import AppendResult, PutRequest, PutStatus


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

    from tidalmq.broker.controller import BrokerController

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"V2 send header decode (broker):        {send_header_decode(args.rounds):6.2f} µs a header")
    print(f"send response, built and encoded:      {send_response(args.rounds):6.2f} µs a response")
    put_us, get_us = stats_counting(args.rounds)
    print(f"stats counting, a stored send:         {put_us * 1000:6.0f} ns a request")
    print(f"stats counting, a pull:                {get_us * 1000:6.0f} ns a request")
    for pull in (32, 256):
        print(f"consume service, pulls of {pull:<4d}:        {consume_service(pull, args.rounds):6.2f} µs a message")


if __name__ == "__main__":
    main()
