"""Talking to TidalMQ for the Spark source: no pyspark here.

- ``Catalog`` (driver): topics (a list or a pattern), their queues, min/max offsets, offsets by time,
  committing a group's offsets. Blocking calls over the client's sync facade.
- ``read_range`` (executors): the records of one queue's offset range [start, end), pulled in large
  pipelined windows on a connection of its own (one per partition) by an event loop in a helper thread,
  decoded into Arrow record batches by the calling thread.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.client.message import MessageQueue, PullStatus
from tidalmq.client.pull_consumer import PullConsumer, RawPullPipeline
from tidalmq.client.sync import run as run_sync
from tidalmq.common import event_loop
from tidalmq.common import naming as nm
from tidalmq.spark.options import EARLIEST, LATEST, ReadOptions, StartSpec, TidalMQOptionError
from tidalmq.spark.retry import RetriesExhausted, describe, retry_async, retry_sync

QueueKey = tuple[str, str, int]  # topic, broker, queue id


class TidalMQSourceError(RuntimeError):
    """A failure of the tidalmq source that is not about an option (connection, data loss, broker)."""


def _queue_matches(broker: str, qid: int, qkey: str) -> bool:
    """``qkey`` of an option ("broker:qid", or a bare "qid" meaning that id on every broker) names this queue."""
    return qkey_str(broker, qid) == qkey or (qkey.isdigit() and qid == int(qkey))


def qkey_str(broker: str, qid: int) -> str:
    return f"{broker}:{qid}"


def parse_qkey(text: str) -> tuple[str, int]:
    broker, _, qid = text.rpartition(":")
    return broker, int(qid)


def offsets_to_dict(offsets: dict[QueueKey, int]) -> dict[str, dict[str, int]]:
    """The offset JSON Spark checkpoints: ``{topic: {"broker:qid": offset}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, broker, qid), off in sorted(offsets.items()):
        out.setdefault(topic, {})[qkey_str(broker, qid)] = int(off)
    return out


def offsets_from_dict(d: dict[str, dict[str, int]] | None) -> dict[QueueKey, int]:
    out: dict[QueueKey, int] = {}
    for topic, per in (d or {}).items():
        for k, off in per.items():
            broker, qid = parse_qkey(k)
            out[(topic, broker, qid)] = int(off)
    return out


# ---- driver side ------------------------------------------------------------------------------------------

class Catalog:
    """Queues and offsets of the topics a query reads (driver side; blocking)."""

    def __init__(self, opts: ReadOptions, *, loaded: bool = False) -> None:
        """``loaded``: the query's topics were found at ``load()``, so a NameServer that knows one of them no
        more is taken as not knowing it *yet* (a NameServer restarted before its brokers re-registered:
        1-2 s for a standalone, up to the brokers' 30 s heartbeat on a cluster) and asked again until
        ``retryDeadlineMs``; at ``load()`` itself an unknown topic fails at once."""
        self.opts = opts
        self.loaded = loaded
        self._consumer = PullConsumer(opts.pull_group, opts.nameserver, pull_timeout=opts.pull_timeout_s)
        self._consumer._instance.request_timeout = opts.request_timeout_s
        self._started = False

    def _run(self, coro):
        return run_sync(coro, timeout=max(30.0, self.opts.request_timeout_s * 6))

    def _call(self, make: Callable[[], Awaitable[Any]], what: str) -> Any:
        """``make()``'s result, retried through a blip (``RetryPolicy``); a lasting failure raises
        ``TidalMQSourceError`` naming ``what`` and the cause."""
        try:
            return retry_sync(lambda: self._run(make()), self.opts.retry, what)
        except RetriesExhausted as e:
            raise TidalMQSourceError(str(e)) from e.__cause__

    def start(self) -> Catalog:
        if not self._started:
            self._run(self._consumer.start())
            self._started = True
        return self

    def close(self) -> None:
        if self._started:
            self._started = False
            try:
                self._run(self._consumer.shutdown())
            except Exception:  # closing is best effort
                pass

    def __enter__(self) -> Catalog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # topics and queues --------------------------------------------------------------------------------
    def check_nameserver(self) -> None:
        """Fail with a clear message when no NameServer answers."""
        from tidalmq.remoting.codes import RequestCode as RC

        inst = self._consumer._instance
        try:
            self._call(lambda: inst.invoke_namesrv(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), "asking for its topics")
        except MQBrokerError as e:  # something answered, but not as a NameServer
            raise TidalMQOptionError(f"option 'nameserver': {e.remark}") from None
        except TidalMQSourceError as e:
            raise TidalMQSourceError(f"option 'nameserver': no TidalMQ NameServer answers at {self.opts.nameserver}: "
                                     f"{e}") from e.__cause__

    def check_filter(self, topic: str) -> None:
        """A SQL92 subscription is checked by the topic's brokers (CHECK_CLIENT_CONFIG, as a push consumer
        does at start): a broker without enablePropertyFilter, or a bad expression, fails at load()."""
        from tidalmq.client import codec
        from tidalmq.common import fastjson
        from tidalmq.remoting.codes import RequestCode as RC

        o = self.opts
        if o.sub_expression_type == "TAG":
            return
        inst = self._consumer._instance
        route = inst.routes.get(topic)
        addrs = sorted({a for a in (route.master_addr(qd["brokerName"]) for qd in route.queue_datas) if a}) \
            if route is not None else []
        sub = codec.Subscription.build(topic, o.sub_expression, 0, o.sub_expression_type)
        body = fastjson.dumpb({"clientId": inst.client_id, "group": o.pull_group, "subscriptionData": sub.to_json()})
        for addr in addrs:
            try:
                self._call(functools.partial(inst.invoke_ok, addr, RC.CHECK_CLIENT_CONFIG, body=body),
                           f"checking the {o.sub_expression_type} filter with broker {addr}")
            except MQBrokerError as e:
                raise TidalMQOptionError(f"option 'subExpression': the broker {addr} refused the "
                                         f"{o.sub_expression_type} filter {o.sub_expression!r} on topic {topic!r}: "
                                         f"{e.remark}") from None

    def topics(self) -> list[str]:
        if self.opts.topics:
            return list(self.opts.topics)
        return self._matching_topics()

    def _matching_topics(self) -> list[str]:
        from tidalmq.common import fastjson
        from tidalmq.remoting.codes import RequestCode as RC

        inst = self._consumer._instance
        resp = self._call(lambda: inst.invoke_namesrv(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
                          f"option 'nameserver': asking the NameServer at {self.opts.nameserver} for its topics")
        names = fastjson.loads(resp.body_bytes()).get("topicList", [])
        pat = re.compile(self.opts.topic_pattern or "")
        return sorted(t for t in names if pat.fullmatch(t) and not nm.is_system_topic(t)
                      and not t.startswith((nm.RETRY_GROUP_TOPIC_PREFIX, nm.DLQ_GROUP_TOPIC_PREFIX)))

    def queues(self, topic: str) -> list[MessageQueue]:
        from tidalmq.remoting.codes import ResponseCode

        inst = self._consumer._instance

        async def lookup() -> Any:
            route = await inst.update_route(topic)
            if (route is None or not route.queue_datas) and self.loaded:
                raise MQClientError(ResponseCode.TOPIC_NOT_EXIST, f"the NameServer has no route of topic {topic!r} "
                                    "(yet: its brokers have not registered it since it restarted?)")
            return route

        route = self._call(lookup, f"option 'nameserver': asking {self.opts.nameserver} for the route of topic "
                           f"{topic!r}")
        if route is None or not route.queue_datas:
            raise TidalMQOptionError(f"topic {topic!r} does not exist on the NameServer {self.opts.nameserver} "
                                     "(create it with `mqadmin updateTopic` or write to it first)")
        return route.subscribe_queues()

    def all_queues(self, *, strict: bool = True) -> list[MessageQueue]:
        """The queues of every topic read. ``strict``: a missing topic of a ``topic`` list raises (a pattern
        just matches nothing yet)."""
        out: list[MessageQueue] = []
        for t in self.topics():
            try:
                out += self.queues(t)
            except TidalMQOptionError:
                if strict and self.opts.topics:
                    raise
        if self.opts.assign:
            out = self._assigned(out)
        return out

    def _assigned(self, queues: list[MessageQueue]) -> list[MessageQueue]:
        """Kafka's ``assign``: only the named queues; a named queue that does not exist is an error."""
        kept: list[MessageQueue] = []
        for topic, wanted in self.opts.assign.items():
            mine = [q for q in queues if q.topic == topic]
            for qk in wanted:
                hits = [q for q in mine if _queue_matches(q.broker_name, q.queue_id, qk)]
                if not hits:
                    raise TidalMQOptionError(f"option 'assign': topic {topic!r} has no queue {qk!r} (queues: "
                                             f"{sorted(qkey_str(q.broker_name, q.queue_id) for q in mine)})")
                kept += [q for q in hits if q not in kept]
        return kept

    # offsets ------------------------------------------------------------------------------------------
    def _gather(self, make: Callable[[MessageQueue], Awaitable[Any]], queues: list[MessageQueue], what: str) -> list:
        async def go() -> list:
            return list(await asyncio.gather(*(make(q) for q in queues)))

        return self._call(go, what)

    def min_max(self, queues: list[MessageQueue]) -> dict[QueueKey, tuple[int, int]]:
        c = self._consumer
        mins = self._gather(c.min_offset, queues, "reading the queues' first offsets from the broker")
        maxs = self._gather(c.max_offset, queues, "reading the queues' end offsets from the broker")
        return {(q.topic, q.broker_name, q.queue_id): (lo, hi) for q, lo, hi in zip(queues, mins, maxs, strict=True)}

    def by_timestamp(self, queues: list[MessageQueue], ts_ms: int) -> dict[QueueKey, int]:
        offs = self._gather(lambda q: self._consumer.seek_by_timestamp(q, ts_ms), queues,
                            f"searching the queues' offsets at timestamp {ts_ms}")
        return {(q.topic, q.broker_name, q.queue_id): o for q, o in zip(queues, offs, strict=True)}

    def resolve(self, spec: StartSpec, queues: list[MessageQueue], bounds: dict[QueueKey, tuple[int, int]],
                option: str) -> dict[QueueKey, int]:
        """Concrete offsets of every queue for ``spec`` (JSON entries not given: ``default_for_missing``)."""
        if spec.kind == "earliest":
            return {k: lo for k, (lo, _hi) in bounds.items()}
        if spec.kind == "latest":
            return {k: hi for k, (_lo, hi) in bounds.items()}
        if spec.kind == "timestamp":
            return self.by_timestamp(queues, spec.timestamp_ms)
        out: dict[QueueKey, int] = {}
        known = {(q.topic, q.broker_name, q.queue_id): q for q in queues}
        for topic, per in spec.queues.items():
            for qk, off in per.items():
                matches = [k for k in known if k[0] == topic and _queue_matches(k[1], k[2], qk)]
                if not matches:
                    raise TidalMQOptionError(f"option {option!r}: topic {topic!r} has no queue {qk!r} (queues: "
                                             f"{sorted(qkey_str(k[1], k[2]) for k in known if k[0] == topic)})")
                if spec.kind == "timestamps":  # Kafka's *ByTimestamp: the value is a time, not an offset
                    out.update(self.by_timestamp([known[k] for k in matches], off))
                    continue
                for k in matches:
                    lo, hi = bounds[k]
                    out[k] = lo if off == EARLIEST else hi if off == LATEST else off
        for k, (lo, hi) in bounds.items():  # queues the JSON does not name: earliest for a start, latest for an end
            out.setdefault(k, lo if option == "startingOffsets" else hi)
        return out

    def commit(self, offsets: dict[QueueKey, int]) -> None:
        c = self._consumer
        items = list(offsets.items())

        async def go() -> None:
            await asyncio.gather(*(c.commit(MessageQueue(t, b, q), off) for (t, b, q), off in items))

        self._call(go, f"committing the offsets of group {self.opts.pull_group}")


# ---- executor side ------------------------------------------------------------------------------------------

@dataclass
class RangeSpec:
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    new_queue: bool = False  # a queue that appeared mid-stream: skipping to its minimum is not data loss


_DONE = object()


def read_range(opts: ReadOptions, spec: RangeSpec, *, rows_per_batch: int = 8192,
               schema=None) -> Iterator:
    """Arrow record batches of the records with ``start <= queueOffset < end`` of one queue."""
    from tidalmq.spark.records import Columns

    if spec.end <= spec.start:
        return
    out: queue.Queue = queue.Queue(maxsize=max(2, opts.pull_pipeline * 2))
    stop = threading.Event()
    t = threading.Thread(target=_pump_thread, args=(opts, spec, out, stop), name="tidalmq-spark-pull", daemon=True)
    t.start()
    cols = Columns(spec.broker, schema)
    tag_set = opts.tag_set
    try:
        while True:
            item = out.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            body, lo, hi = item
            cols.add_body(body, lo, hi, tag_set)
            if len(cols) >= rows_per_batch:
                yield cols.take()
        if len(cols):
            yield cols.take()
    finally:
        stop.set()
        while t.is_alive():  # unblock a pump waiting on a full queue
            try:
                out.get_nowait()
            except queue.Empty:
                t.join(0.05)


def _pump_thread(opts: ReadOptions, spec: RangeSpec, out: queue.Queue, stop: threading.Event) -> None:
    def put(item: object) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    try:
        event_loop.run(_pump(opts, spec, put, stop))
        put(_DONE)
    except BaseException as e:  # noqa: BLE001 - handed to the reading thread
        put(e)


async def _pump(opts: ReadOptions, spec: RangeSpec, put, stop: threading.Event) -> None:
    consumer = PullConsumer(opts.pull_group, opts.nameserver, pull_timeout=opts.pull_timeout_s)
    consumer._instance.request_timeout = opts.request_timeout_s
    try:
        await retry_async(consumer.start, opts.retry, f"connecting to the NameServer at {opts.nameserver}")
    except RetriesExhausted as e:
        raise TidalMQSourceError(str(e)) from e.__cause__
    mq = MessageQueue(spec.topic, spec.broker, spec.queue_id)
    pending: deque[tuple[int, int, asyncio.Future]] = deque()
    try:
        pipe = await _pipeline(consumer, opts, mq)
        window, depth = opts.pull_batch_size, opts.pull_pipeline
        nxt = spec.start
        while (nxt < spec.end or pending) and not stop.is_set():
            while nxt < spec.end and len(pending) < depth:
                hi = min(spec.end, nxt + window)
                pending.append((nxt, hi, _request(consumer, opts, spec, mq, pipe, nxt, hi)))
                nxt = hi
            lo, hi, fut = pending.popleft()
            bodies, cap = await _answered(consumer, opts, spec, mq, pipe, lo, hi, fut, pending)
            window, depth = _resize(opts, window, depth, cap)
            for item in bodies:
                put(item)  # blocks this loop when the reader is behind: that is the back-pressure
    finally:
        for _lo, _hi, p in pending:
            p.cancel()
        await consumer.shutdown()


async def _pipeline(consumer: PullConsumer, opts: ReadOptions, mq: MessageQueue) -> RawPullPipeline | None:
    """The queue's pipelined pulls; None where its broker cannot be found yet (every window then goes
    through ``_window``, which retries)."""
    try:
        return await consumer.raw_pipeline(mq, opts.sub_expression, expression_type=opts.sub_expression_type)
    except MQClientError:
        return None


def _request(consumer: PullConsumer, opts: ReadOptions, spec: RangeSpec, mq: MessageQueue,
             pipe: RawPullPipeline | None, lo: int, hi: int) -> asyncio.Future[Any]:
    """The pull of [lo, hi) as one request on the open connection (the future of its response), or, with no
    open connection, ``_window``'s task for it (which connects, retries, and pulls the window whole)."""
    fut: asyncio.Future[Any] | None = pipe.send(lo, hi - lo) if pipe is not None else None
    return fut if fut is not None else asyncio.ensure_future(_window(consumer, opts, spec, mq, lo, hi))


async def _answered(consumer: PullConsumer, opts: ReadOptions, spec: RangeSpec, mq: MessageQueue,
                    pipe: RawPullPipeline | None, lo: int, hi: int, fut: asyncio.Future,
                    pending: deque[tuple[int, int, asyncio.Future]]) -> tuple[list[tuple[bytes, int, int]], int | None]:
    """The bodies of [lo, hi) from ``fut``, and the most messages the broker answered a pull with where that
    was less than asked (its cap), else None. A window answered in part has its rest asked for at once, in
    pulls of what the first one brought, ahead of the windows in flight (``pending``); anything but records
    found (an error, a timeout, a lost connection, nothing readable yet) goes to ``_window``, which knows
    what each means."""
    if isinstance(fut, asyncio.Task):  # _window's own: its errors are the read's
        bodies = await fut
        return bodies, _window_cap(bodies)
    assert pipe is not None
    try:
        res = pipe.result(await fut, lo)
    except Exception:  # noqa: BLE001 - _window pulls the window again, with the retries and the errors' meaning
        res = None
    if res is not None and res.status == PullStatus.FOUND and lo < res.next_begin_offset:
        nb = res.next_begin_offset
        if nb >= hi:
            return [(res.body, lo, hi)], None
        step = nb - lo
        # At most as many pulls as may be in flight, the last one for all that is left (answered in part in
        # its turn): a window of large messages answered one at a time does not become a pull each at once.
        starts = list(range(nb, hi, step))[:_MAX_PULLS_IN_FLIGHT]
        for a, b in reversed(list(zip(starts, [*starts[1:], hi], strict=True))):
            pending.appendleft((a, b, _request(consumer, opts, spec, mq, pipe, a, b)))
        return [(res.body, lo, nb)], step
    bodies = await _window(consumer, opts, spec, mq, lo, hi)
    return bodies, _window_cap(bodies)


def _window_cap(bodies: list[tuple[bytes, int, int]]) -> int | None:
    """The broker's cap as ``_window``'s pulls show it: the first one's advance, where it took several."""
    return bodies[1][1] - bodies[0][1] if len(bodies) > 1 else None


_MAX_PULLS_IN_FLIGHT = 32


def _resize(opts: ReadOptions, window: int, depth: int, cap: int | None) -> tuple[int, int]:
    """A broker that answers a pull with fewer messages than asked caps a pull below ``pullBatchSize``
    (RocketMQ's ``maxTransferCountOnMessageInMemory``, 32 by default): windows of that size, more of them
    in flight (as many offsets as ``pullBatchSize`` x ``pullPipeline``, at most 32 pulls), so that a broker
    left at its defaults is read about as fast as one whose caps were raised."""
    if cap is None or cap >= window:
        return window, depth
    return cap, max(depth, min(_MAX_PULLS_IN_FLIGHT, opts.pull_batch_size * opts.pull_pipeline // cap))


async def _window(consumer: PullConsumer, opts: ReadOptions, spec: RangeSpec, mq: MessageQueue, lo: int,
                  hi: int) -> list[tuple[bytes, int, int]]:
    """Pull [lo, hi) completely (several pulls when the broker caps one), in order."""
    out: list[tuple[bytes, int, int]] = []
    off = lo
    stalls = 0
    deadline = time.monotonic() + opts.pull_timeout_s * 3
    while off < hi:
        where = f"pulling {spec.topic} {spec.broker}:{spec.queue_id} at offset {off}"
        try:  # a broker restart mid-read: tried again on a new connection until the deadline
            res = await retry_async(functools.partial(consumer.pull_raw, mq, off, hi - off, opts.sub_expression,
                                                      expression_type=opts.sub_expression_type),
                                    opts.retry, where, counted=False)
        except RetriesExhausted as e:
            raise TidalMQSourceError(str(e)) from e.__cause__
        except MQClientError as e:
            raise TidalMQSourceError(f"{where} failed: {describe(e)}") from None
        if res.status == PullStatus.FOUND:
            out.append((res.body, off, hi))
        elif res.status == PullStatus.OFFSET_ILLEGAL:
            if off < res.min_offset:  # retention deleted what we were to read
                if opts.fail_on_data_loss and not spec.new_queue:
                    raise TidalMQSourceError(
                        f"data loss: offsets {off}..{min(hi, res.min_offset) - 1} of topic {spec.topic} queue "
                        f"{spec.broker}:{spec.queue_id} were deleted by retention (the queue now starts at "
                        f"{res.min_offset}); set failOnDataLoss=false to skip them")
                off = min(hi, res.min_offset)
                continue
            if opts.fail_on_data_loss:
                raise TidalMQSourceError(
                    f"data loss: offset {off} of topic {spec.topic} queue {spec.broker}:{spec.queue_id} is beyond the "
                    f"queue's end ({res.max_offset}); was the topic deleted and re-created? set failOnDataLoss=false "
                    "to skip")
            return out
        nb = res.next_begin_offset
        if nb > off:
            off = nb
            stalls = 0
            continue
        # Nothing readable at ``off`` although it was below the queue's end when planned: a ConsumeQueue entry
        # being written; wait a little.
        stalls += 1
        if time.monotonic() > deadline:
            if opts.fail_on_data_loss:
                raise TidalMQSourceError(
                    f"offset {off} of topic {spec.topic} queue {spec.broker}:{spec.queue_id} is not readable "
                    f"(status {res.status.value}, queue {res.min_offset}..{res.max_offset}); set "
                    "failOnDataLoss=false to skip")
            return out
        await asyncio.sleep(min(0.2, 0.005 * stalls))
    return out
