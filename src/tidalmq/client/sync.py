"""A thin synchronous facade: the asyncio clients driven from plain threads.

Every facade runs its client on one shared background event loop (a daemon thread) and blocks the
caller until the coroutine is done::

    from tidalmq.client.sync import Producer, Message
    with Producer("PG", "127.0.0.1:9876") as p:
        print(p.send(Message("TopicTest", b"hello")).msg_id)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from tidalmq.client import admin as _admin
from tidalmq.client import pop_consumer as _pop
from tidalmq.client import producer as _producer
from tidalmq.client import pull_consumer as _pull
from tidalmq.client import push_consumer as _push
from tidalmq.client import transaction_producer as _transaction_producer
from tidalmq.client.message import (
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    SendResult,
    TransactionSendResult,
)
from tidalmq.client.selector import MessageQueueSelector

T = TypeVar("T")
__all__ = ["Admin", "Message", "PopConsumer", "Producer", "PullConsumer", "PushConsumer", "TransactionProducer", "run"]

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="tidalmq-client-loop", daemon=True).start()
            _loop = loop
        return _loop


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run a coroutine on the facade's event loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result(timeout)


class Producer:
    """Blocking twin of :class:`tidalmq.client.Producer` (same arguments)."""

    _cls: type[_producer.Producer] = _producer.Producer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._p = self._make(*args, **kwargs)

    def _make(self, *args: Any, **kwargs: Any) -> _producer.Producer:
        return self._cls(*args, **kwargs)

    @property
    def aio(self) -> _producer.Producer:
        """The asyncio producer underneath (runs on the facade's loop)."""
        return self._p

    def start(self) -> None:
        run(self._p.start())

    def shutdown(self) -> None:
        run(self._p.shutdown())

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def send(self, msg: Message, *, queue: MessageQueue | None = None, selector: MessageQueueSelector | None = None,
             arg: Any = None, timeout: float | None = None) -> SendResult:
        return run(self._p.send(msg, queue=queue, selector=selector, arg=arg, timeout=timeout))

    def send_orderly(self, msg: Message, sharding_key: Any, *, timeout: float | None = None) -> SendResult:
        return run(self._p.send_orderly(msg, sharding_key, timeout=timeout))

    def send_async(self, msg: Message, callback: _producer.SendCallback | None = None, *,
                   timeout: float | None = None) -> concurrent.futures.Future[SendResult]:
        """Returns a ``concurrent.futures.Future``; ``callback(result, error)`` runs on the loop thread."""

        async def go() -> SendResult:
            return await self._p.send_async(msg, callback, timeout=timeout)

        return asyncio.run_coroutine_threadsafe(go(), _background_loop())

    def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        run(self._p.send_oneway(msg, queue=queue))

    def send_batch(self, msgs: Sequence[Message], *, timeout: float | None = None) -> SendResult:
        return run(self._p.send_batch(msgs, timeout=timeout))

    def cancel_scheduled(self, result: SendResult) -> SendResult:
        return run(self._p.cancel_scheduled(result))

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return run(self._p.fetch_publish_queues(topic))


class TransactionProducer(Producer):
    """Blocking twin of :class:`tidalmq.client.TransactionProducer`."""

    _cls = _transaction_producer.TransactionProducer

    def send_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        p = self._p
        assert isinstance(p, _transaction_producer.TransactionProducer)
        return run(p.send_in_transaction(msg, arg))


class PushConsumer:
    """Blocking twin of :class:`tidalmq.client.PushConsumer`; plain-function listeners run in its pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._c = _push.PushConsumer(*args, **kwargs)

    @property
    def aio(self) -> _push.PushConsumer:
        return self._c

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self._c.subscribe(topic, expression)

    def register_listener(self, listener: _push.MessageListener, orderly: bool | None = None) -> None:
        self._c.register_listener(listener, orderly)

    def start(self) -> None:
        run(self._c.start())

    def shutdown(self) -> None:
        run(self._c.shutdown())

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class PullConsumer:
    """Blocking twin of :class:`tidalmq.client.PullConsumer`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._c = _pull.PullConsumer(*args, **kwargs)

    def start(self) -> None:
        run(self._c.start())

    def shutdown(self) -> None:
        run(self._c.shutdown())

    def __enter__(self) -> PullConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return run(self._c.fetch_queues(topic))

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = "*") -> PullResult:
        return run(self._c.pull(mq, offset, max_nums, expression))

    def pull_range(self, mq: MessageQueue, start: int, end: int, expression: str = "*") -> list[MessageExt]:
        return run(self._c.pull_range(mq, start, end, expression))

    def min_offset(self, mq: MessageQueue) -> int:
        return run(self._c.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return run(self._c.max_offset(mq))

    def seek_by_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return run(self._c.seek_by_timestamp(mq, timestamp_ms))

    def commit(self, mq: MessageQueue, offset: int) -> None:
        run(self._c.commit(mq, offset))

    def committed(self, mq: MessageQueue) -> int | None:
        return run(self._c.committed(mq))


class PopConsumer:
    """Blocking twin of :class:`tidalmq.client.PopConsumer` (same arguments)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._c = _pop.PopConsumer(*args, **kwargs)

    def start(self) -> None:
        run(self._c.start())

    def shutdown(self) -> None:
        run(self._c.shutdown())

    def __enter__(self) -> PopConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def receive(self, topic: str, max_nums: int = 16, invisible_time: float = 30.0, **kwargs: Any) -> list[MessageExt]:
        return run(self._c.receive(topic, max_nums, invisible_time, **kwargs))

    def ack(self, msg: MessageExt) -> None:
        run(self._c.ack(msg))

    def ack_many(self, msgs: list[MessageExt]) -> None:
        run(self._c.ack_many(msgs))

    def change_invisible(self, msg: MessageExt, invisible_time: float) -> str:
        return run(self._c.change_invisible(msg, invisible_time))


class Admin:
    """Blocking twin of :class:`tidalmq.client.Admin`: every coroutine method becomes a blocking one."""

    def __init__(self, namesrv_addr: str | None = None, timeout: float = 5.0, credentials: Any = None) -> None:
        self._a = _admin.Admin(namesrv_addr, timeout, credentials)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._a, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return run(attr(*args, **kwargs))

        return call

    def close(self) -> None:
        run(self._a.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
