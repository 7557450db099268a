"""A request cut by the event loop's end logs no error: the console's handler ends by returning, not
cancelled (Python 3.11's start_server logs a traceback for a cancelled one)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.broker.rawclient import run
from tests.client.helpers import wait_until
from tests.support import collect_loop_errors
from tidalmq.console.http import HttpServer


def test_a_request_cut_by_the_loops_end_logs_no_error() -> None:
    async def body() -> None:
        errors = collect_loop_errors()

        async def page(_req: Any) -> Any:
            raise AssertionError("no request is complete")

        server = HttpServer("127.0.0.1", 0, page)
        await server.start()
        _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET / HTTP/1.1\r\n")  # half a request: the handler waits for the rest

        def handlers() -> list[asyncio.Task[Any]]:
            return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "HttpServer._serve"]

        await wait_until(handlers, 10, "the request's handler")
        cut = handlers()
        for t in cut:  # what asyncio.run does to the tasks left at its end
            t.cancel()
        await asyncio.gather(*cut, return_exceptions=True)
        assert errors == []
        writer.close()
        await server.stop()

    run(body(), timeout=30)
