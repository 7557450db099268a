"""Spark's Kafka source options accepted by the tidalmq source (pure: option parsing and the
minOffsetsPerTrigger rule, no Spark, no broker; they run in the default suite)."""

from __future__ import annotations

import pytest

from tidalmq.spark.options import TidalMQOptionError, parse_duration_s, parse_read_options
from tidalmq.spark.plan import hold_back

NS = {"nameserver": "h:9876"}


def test_kafka_spellings_are_aliases() -> None:
    o = parse_read_options({**NS, "subscribe": "A,B", "maxOffsetsPerTrigger": "100"}, streaming=True)
    assert o.topics == ("A", "B") and o.max_messages_per_trigger == 100
    assert parse_read_options({**NS, "subscribepattern": "A.*"}, streaming=True).topic_pattern == "A.*"
    a = parse_read_options({**NS, "assign": '{"A": [0, "broker-a:2", 0], "B": [1]}'}, streaming=False)
    assert a.topics == ("A", "B") and a.assign == {"A": ("0", "broker-a:2"), "B": ("1",)}


def test_by_timestamp_takes_precedence_and_kafka_schema() -> None:
    o = parse_read_options({**NS, "subscribe": "A", "startingOffsets": "latest",
                            "startingOffsetsByTimestamp": '{"A": {"0": 1000, "b:1": 2000}}',
                            "endingOffsetsByTimestamp": '{"A": {"0": 3000}}',
                            "kafkaCompatibleSchema": "true", "includeHeaders": "true"}, streaming=False)
    assert o.starting.kind == "timestamps" and o.starting.queues == {"A": {"0": 1000, "b:1": 2000}}
    assert o.ending.kind == "timestamps" and o.kafka_schema and o.include_headers
    s = parse_read_options({**NS, "subscribe": "A", "minOffsetsPerTrigger": "50", "maxTriggerDelay": "30s"},
                           streaming=True)
    assert s.min_messages_per_trigger == 50 and s.max_trigger_delay_s == 30.0
    assert parse_read_options({**NS, "subscribe": "A", "minOffsetsPerTrigger": "5"},
                              streaming=True).max_trigger_delay_s == 15 * 60  # Kafka's default


@pytest.mark.parametrize(("options", "needle"), [
    ({"subscribe": "A", "topic": "A"}, "are the same option"),
    ({"maxOffsetsPerTrigger": "5", "maxMessagesPerTrigger": "5", "topic": "A"}, "are the same option"),
    ({"subscribe": "A", "assign": '{"A": [0]}'}, "exactly one of"),
    ({"subscribePattern": "A.*", "topic": "A"}, "exactly one of"),
    ({"assign": '{"A": []}'}, "non-empty list"),
    ({"assign": '{"A": ["x:y"]}'}, "queue key 'x:y'"),
    ({"assign": "[0]"}, "must be a JSON object"),
    ({"assign": '{"bad topic!": [0]}'}, "option 'assign'"),
    ({"topic": "A", "startingOffsetsByTimestamp": '{"A": {"0": -5}}'}, "epoch milliseconds"),
    ({"topic": "A", "startingOffsetsByTimestamp": '{"B": {"0": 5}}'}, "not read"),
    ({"topic": "A", "endingOffsetsByTimestamp": "{"}, "not valid JSON"),
    ({"topic": "A", "maxTriggerDelay": "1m"}, "only with 'minOffsetsPerTrigger'"),
    ({"topic": "A", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, "is larger than"),
    ({"topic": "A", "minOffsetsPerTrigger": "9", "maxTriggerDelay": "soon"}, "must be a duration"),
    ({"topic": "A", "includeHeaders": "true"}, "needs 'kafkaCompatibleSchema'"),
    ({"topic": "A", "kafkaCompatibleSchema": "yes please"}, "true or false"),
])
def test_kafka_option_errors(options: dict[str, str], needle: str) -> None:
    with pytest.raises(TidalMQOptionError, match=needle):
        parse_read_options({**NS, **options}, streaming=None)


def test_mode_specific_kafka_options() -> None:
    with pytest.raises(TidalMQOptionError, match="'endingOffsetsByTimestamp' is for batch"):
        parse_read_options({**NS, "topic": "A", "endingOffsetsByTimestamp": '{"A": {"0": 1}}'}, streaming=True)
    for name, value in (("minOffsetsPerTrigger", "5"), ("maxOffsetsPerTrigger", "5")):
        with pytest.raises(TidalMQOptionError, match="is for streaming"):
            parse_read_options({**NS, "topic": "A", name: value}, streaming=False)


def test_durations() -> None:
    assert [parse_duration_s(t, "x") for t in ("250ms", "30s", "15m", "2h", "1d", "500")] == \
        [0.25, 30.0, 900.0, 7200.0, 86400.0, 0.5]


def test_min_offsets_per_trigger_rule() -> None:
    # nothing waiting: no batch; the first trigger is not held; enough waiting: a batch
    assert hold_back(0, 10, None, 100.0, 60.0)
    assert not hold_back(3, 10, None, 100.0, 60.0)
    assert not hold_back(10, 10, 99.0, 100.0, 60.0)
    # too few: held until maxTriggerDelay has passed since the last batch
    assert hold_back(3, 10, 90.0, 100.0, 60.0)
    assert not hold_back(3, 10, 40.0, 100.0, 60.0)
