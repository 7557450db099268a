"""The Prometheus endpoint shared by broker and NameServer (``metricsExporterType=PROM``, docs/metrics.md).

Nothing here is on a hot path: servers count in plain ints, and a collector turns those counters into
metric families only when Prometheus scrapes. prometheus_client serves from a thread of its own; the
state a collector reads belongs to the event loop, so ``on_loop`` takes the snapshot on the loop (dicts
that the loop mutates are never iterated from the exporter's thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

T = TypeVar("T")

SNAPSHOT_TIMEOUT_S = 5.0  # a scrape of a loop that is stuck for longer fails rather than piles up threads


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], T], timeout: float = SNAPSHOT_TIMEOUT_S) -> T:
    """Run ``fn`` on ``loop`` and return its result to the calling (exporter) thread."""
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as e:  # handed to the scraping thread, which reports it
            fut.set_exception(e)

    loop.call_soon_threadsafe(run)
    return fut.result(timeout)


class _Collect(Collector):
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self._collect())
        except Exception:  # a failed scrape must not take the endpoint down; the next one may succeed
            log.exception("metrics collection failed")
            return []


class PromExporter:
    """One HTTP endpoint serving one collector, on its own registry (no process-wide default metrics)."""

    def __init__(self, host: str, port: int, collect: Callable[[], Iterable[Metric]],
                 key: str = "metricsPromExporterPort") -> None:
        self.host = host or "127.0.0.1"
        self.port = port
        self.key = key  # the setting that names the port, for the error when it is taken
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collect(collect))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as e:
            raise OSError(e.errno, f"the metrics endpoint cannot listen on {self.host}:{self.port} ({e.strerror}): "
                          f"set {self.key} to a free port (0: any), or metricsExporterType=DISABLE") from None
        self.port = self._server.server_address[1]  # the port taken when 0 was asked

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
