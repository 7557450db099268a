"""The source's partition reader (``tidalmq.spark.fetch.read_range``) against a standalone at RocketMQ's
default pull cap (32 messages a pull), without Spark: windows the broker answers in part, and a broker
killed mid-read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce, topic_name
from tests.support import Standalone

pytestmark = pytest.mark.spark


@pytest.fixture
def default_broker(tmp_path: Path) -> Iterator[Standalone]:
    s = Standalone(tmp_path / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
    s.start()
    try:
        yield s
    finally:
        s.stop()


def _read(ns: str, topic: str, start: int, end: int, **options: str) -> Iterator[dict]:
    from tidalmq.client.sync import Admin
    from tidalmq.spark import fetch
    from tidalmq.spark.options import parse_read_options
    from tidalmq.spark.records import ARROW_SCHEMA

    with Admin(ns) as admin:
        broker = admin.topic_status(topic)[0].broker_name
    opts = parse_read_options({"nameserver": ns, "topic": topic, "retryDeadlineMs": "60000", **options},
                              streaming=False)
    spec = fetch.RangeSpec(topic, broker, 0, start, end)
    for batch in fetch.read_range(opts, spec, rows_per_batch=500, schema=ARROW_SCHEMA):
        yield from batch.select(["queueOffset", "body", "tags"]).to_pylist()


@pytest.mark.parametrize("pull_batch_size", ["1024", "100", "7"])
def test_a_range_is_read_whole_and_in_order_at_the_default_cap(default_broker: Standalone,
                                                              pull_batch_size: str) -> None:
    # Windows of 1,024 and of 100 are answered 32 at a time (their rests asked for as pulls of 32, then
    # windows of 32); windows of 7 are answered whole. An unaligned range, and a tag filter on top.
    ns = default_broker.namesrv_addr
    topic = topic_name("FetchCap")
    create_topic(ns, topic, 1)
    produce(ns, topic, 3000, tags=lambda i: "even" if i % 2 == 0 else "odd")
    rows = list(_read(ns, topic, 37, 2901, pullBatchSize=pull_batch_size))
    assert [r["queueOffset"] for r in rows] == list(range(37, 2901))
    assert [r["body"] for r in rows] == [f"m{i}".encode() for i in range(37, 2901)]
    odd = list(_read(ns, topic, 0, 3000, pullBatchSize=pull_batch_size, subExpression="odd"))
    assert [r["queueOffset"] for r in odd] == list(range(1, 3000, 2)) and {r["tags"] for r in odd} == {"odd"}


def test_a_broker_killed_mid_read_is_read_through_once_it_is_back(default_broker: Standalone) -> None:
    # The reader holds pulls in flight on the connection the kill breaks: each is pulled again on a new
    # connection once the broker is back, and every row comes once, in order.
    ns = default_broker.namesrv_addr
    topic = topic_name("FetchKill")
    create_topic(ns, topic, 1)
    produce(ns, topic, 20_000)
    rows = _read(ns, topic, 0, 20_000)
    seen = [next(rows)["queueOffset"] for _ in range(600)]  # a batch taken, the pull thread ahead of it
    default_broker.kill()
    default_broker.start()
    seen += [r["queueOffset"] for r in rows]
    assert seen == list(range(20_000))


def test_a_broker_answering_one_message_a_pull_is_read_whole(tmp_path: Path) -> None:
    # The rest of a window of 1,024 answered one message at a time: at most 32 pulls go out for it at once,
    # the last for all that is left, answered in part in its turn.
    settings = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024), "maxTransferCountOnMessageInMemory": "1",
                "maxTransferCountOnMessageInDisk": "1"}
    with Standalone(tmp_path / "data", settings) as s:
        topic = topic_name("FetchOne")
        create_topic(s.namesrv_addr, topic, 1)
        produce(s.namesrv_addr, topic, 2500)
        rows = list(_read(s.namesrv_addr, topic, 3, 2500))
    assert [r["queueOffset"] for r in rows] == list(range(3, 2500))
