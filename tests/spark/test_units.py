"""Pure parts of tidalmq.spark (no Spark, no broker): option parsing and read planning. These run in the
default suite; they import neither pyspark nor pyarrow."""

from __future__ import annotations

import time

import pytest

from tidalmq.spark.options import TidalMQOptionError, parse_read_options, parse_write_options
from tidalmq.spark.plan import rate_limit, split_ranges


def test_read_options() -> None:
    o = parse_read_options({"nameserver": "h:9876", "topic": "A, B,A", "startingoffsets": '{"A": {"b:0": 5, "1": -2}}',
                            "maxmessagespertrigger": "10"}, streaming=True)
    assert o.topics == ("A", "B") and o.starting.kind == "queues" and o.max_messages_per_trigger == 10
    assert parse_read_options({"nameserver": "h:1", "topic": "A"}, streaming=True).starting.kind == "latest"
    assert parse_read_options({"nameserver": "h:1", "topic": "A"}, streaming=False).starting.kind == "earliest"
    ts = parse_read_options({"nameserver": "h:1", "topic": "A", "startingOffsets": "timestamp:2024-01-01T00:00:00Z"},
                            streaming=False).starting
    assert ts.kind == "timestamp" and ts.timestamp_ms == 1704067200000
    assert parse_read_options({"nameserver": "h:1", "topic": "A", "subExpression": "x || y"},
                              streaming=None).tag_set == {"x", "y"}


@pytest.mark.parametrize(("options", "needle"), [
    ({"topic": "A"}, "'nameserver' is required"),
    ({"nameserver": "nohost", "topic": "A"}, "option 'nameserver'"),
    ({"nameserver": "h:1"}, "exactly one of"),
    ({"nameserver": "h:1", "topic": "A", "topicPattern": "A.*"}, "exactly one of"),
    ({"nameserver": "h:1", "topic": "bad topic!"}, "option 'topic'"),
    ({"nameserver": "h:1", "topic": "A", "startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
    ({"nameserver": "h:1", "topic": "A", "startingOffsets": "soon"}, "option 'startingOffsets'"),
    ({"nameserver": "h:1", "topic": "A", "startingOffsets": '{"A": {"b:0": "x"}}'}, "offset of A/b:0"),
    ({"nameserver": "h:1", "topic": "A", "startingOffsets": '{"B": {"0": 1}}'}, "not read"),
    ({"nameserver": "h:1", "topic": "A", "endingOffsets": "earliest"}, "cannot be 'earliest'"),
    ({"nameserver": "h:1", "topic": "A", "failOnDataLoss": "maybe"}, "option 'failOnDataLoss'"),
    ({"nameserver": "h:1", "topic": "A", "maxMessagesPerTrigger": "0"}, "option 'maxMessagesPerTrigger'"),
    ({"nameserver": "h:1", "topic": "A", "subExpressionType": "XPATH"}, "subExpressionType"),
    ({"nameserver": "h:1", "topic": "A", "path": "/x"}, "takes no path"),
])
def test_read_option_errors(options: dict[str, str], needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    with pytest.raises(TidalMQOptionError, match=needle.replace("(", r"\(").replace("|", r"\|")):
        parse_read_options(options, streaming=None)


def test_mode_specific_options() -> None:
    with pytest.raises(TidalMQOptionError, match="endingOffsets"):
        parse_read_options({"nameserver": "h:1", "topic": "A", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(TidalMQOptionError, match="maxMessagesPerTrigger"):
        parse_read_options({"nameserver": "h:1", "topic": "A", "maxMessagesPerTrigger": "5"}, streaming=False)


def test_write_options() -> None:
    o = parse_write_options({"nameserver": "h:1", "topic": "T", "batchsize": "64", "checkpointLocation": "/x"},
                            streaming=True)
    assert o.topic == "T" and o.batch_size == 64
    with pytest.raises(TidalMQOptionError, match="forbidden"):
        parse_write_options({"nameserver": "h:1", "topic": "SCHEDULE_TOPIC_XXXX"}, streaming=False)
    with pytest.raises(TidalMQOptionError, match="unknown option 'topc'"):
        parse_write_options({"nameserver": "h:1", "topc": "T"}, streaming=False)


def test_split_ranges_and_rate_limit() -> None:
    a, b = ("T", "b", 0), ("T", "b", 1)
    parts = split_ranges({a: (0, 250), b: (10, 10)}, 100)
    assert [(lo, hi) for _k, lo, hi in parts] == [(0, 84), (84, 168), (168, 250)]
    assert len(split_ranges({a: (0, 10)}, 100, min_partitions=4)) == 4
    end = rate_limit({a: 0, b: 0}, {a: 300, b: 100}, 100)
    assert sum(end.values()) <= 100 and end[a] == 75 and end[b] == 25
    assert rate_limit({a: 0}, {a: 5}, 100) == {a: 5}


def test_retry_options_and_sql92_syntax() -> None:
    o = parse_read_options({"nameserver": "h:1", "topic": "A", "fetchOffset.numRetries": "2",
                            "fetchoffset.retryintervalms": "50", "retryDeadlineMs": "3000"}, streaming=None)
    assert (o.retry.num_retries, o.retry.interval_s, o.retry.deadline_s) == (2, 0.05, 3.0)
    assert [o.retry.pause(n) for n in (1, 2, 3)] == [0.05, 0.1, 0.2]
    with pytest.raises(TidalMQOptionError, match="option 'fetchOffset.numRetries' must be >= 0"):
        parse_read_options({"nameserver": "h:1", "topic": "A", "fetchOffset.numRetries": "-1"}, streaming=None)
    with pytest.raises(TidalMQOptionError, match="not a valid SQL92 filter.*position"):
        parse_read_options({"nameserver": "h:1", "topic": "A", "subExpressionType": "SQL92",
                            "subExpression": "a >"}, streaming=None)
    assert parse_write_options({"nameserver": "h:1", "writeId": " nightly "}, streaming=False).write_id == "nightly"


def test_retries_run_to_the_deadline_and_name_the_cause() -> None:
    import asyncio

    from tidalmq.client.errors import MQBrokerError, MQClientError
    from tidalmq.spark.options import RetryPolicy
    from tidalmq.spark.retry import RetriesExhausted, gives_up, retry_async, retry_sync

    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise MQClientError(10001, "connect to 127.0.0.1:1 failed")

    # the deadline, not the count, ends the driver's retries (a caught-up stream waiting out an outage) ...
    began = time.monotonic()
    with pytest.raises(RetriesExhausted, match=r"reading offsets failed after \d+ tries .*client-side error 10001"):
        retry_sync(refused, RetryPolicy(num_retries=2, interval_s=0.001, deadline_s=0.3), "reading offsets")
    assert len(calls) > 3 and time.monotonic() - began >= 0.25
    # ... and a deadline shorter than the count's pauses still gets numRetries retries
    calls.clear()
    with pytest.raises(RetriesExhausted, match=r"failed after 3 tries"):
        retry_sync(refused, RetryPolicy(num_retries=2, interval_s=0.02, deadline_s=0.001), "reading offsets")
    assert len(calls) == 3
    assert not gives_up(RetryPolicy(num_retries=3, deadline_s=60.0), 40, 59.0, True)
    assert gives_up(RetryPolicy(num_retries=3, deadline_s=60.0), 40, 61.0, True)
    assert not gives_up(RetryPolicy(num_retries=3, deadline_s=1.0), 3, 5.0, True)
    assert gives_up(RetryPolicy(num_retries=3, deadline_s=1.0), 3, 5.0, False)

    calls.clear()  # uncounted: only the deadline ends the tries (the sink's NameServer check)
    with pytest.raises(RetriesExhausted, match=r"checking failed after \d+ tries"):
        retry_sync(refused, RetryPolicy(num_retries=2, interval_s=0.001, deadline_s=0.05), "checking", counted=False)
    assert len(calls) > 3

    def no() -> None:  # a broker's "no" is not retried
        calls.append(1)
        raise MQBrokerError(1, "The broker does not support consumer to filter message by SQL92")

    calls.clear()
    with pytest.raises(MQBrokerError):
        retry_sync(no, RetryPolicy(num_retries=5, interval_s=0.001), "checking")
    assert len(calls) == 1

    flaky = iter([MQClientError(10004, "no name server"), MQClientError(10006, "timeout")])

    async def pull() -> str:
        e = next(flaky, None)
        if e is not None:
            raise e
        return "records"

    assert asyncio.run(retry_async(pull, RetryPolicy(num_retries=0, interval_s=0.001), "pulling",
                                   counted=False)) == "records"

    async def down() -> None:
        raise MQClientError(10001, "connect failed")

    with pytest.raises(RetriesExhausted, match="pulling failed after"):
        asyncio.run(retry_async(down, RetryPolicy(interval_s=0.01, deadline_s=0.1), "pulling", counted=False))
