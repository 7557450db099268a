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


def test_a_kafka_job_gets_kafka_schema_and_its_other_options() -> None:
    """Naming the topic Kafka's way (subscribe, subscribePattern, assign) gives Kafka's schema unless the job
    says otherwise; Kafka's global timestamps, poll timeout and group prefix are taken."""
    assert parse_read_options({**NS, "subscribe": "A"}, streaming=True).kafka_schema
    assert parse_read_options({**NS, "subscribePattern": "A.*"}, streaming=True).kafka_schema
    assert parse_read_options({**NS, "assign": '{"A": [0]}'}, streaming=False).kafka_schema
    assert not parse_read_options({**NS, "topic": "A"}, streaming=True).kafka_schema
    assert not parse_read_options({**NS, "subscribe": "A", "kafkaCompatibleSchema": "false"}, streaming=True).kafka_schema
    o = parse_read_options({**NS, "subscribe": "A", "startingTimestamp": "1700000000000", "endingTimestamp": "1700000001000",
                            "kafkaConsumer.pollTimeoutMs": "2500", "groupIdPrefix": "etl"}, streaming=False)
    assert (o.starting.kind, o.starting.timestamp_ms) == ("timestamp", 1_700_000_000_000)
    assert (o.ending.kind, o.ending.timestamp_ms) == ("timestamp", 1_700_000_001_000)
    assert o.pull_timeout_s == 2.5


@pytest.mark.parametrize(("options", "needle"), [
    ({"subscribe": "A", "kafka.bootstrap.servers": "h:9092"}, "takes the NameServer's address as option 'nameserver'"),
    ({"subscribe": "A", "kafka.security.protocol": "SSL"}, "Kafka client setting.*server option is 'nameserver'"),
    ({"subscribe": "A", "maxOffsetsPerTrigger": "abc"}, "option 'maxOffsetsPerTrigger' must be an integer"),
    ({"subscribe": "A", "kafkaConsumer.pollTimeoutMs": "0"}, "option 'kafkaConsumer.pollTimeoutMs' must be >= 1"),
    ({"subscribe": "A", "startingTimestamp": "soon"}, "option 'startingTimestamp'"),
    ({"subscribe": "A", "startingTimestamp": "5", "startingOffsets": "earliest"}, "give one of them"),
])
def test_kafka_errors_name_the_option_as_given(options: dict[str, str], needle: str) -> None:
    with pytest.raises(TidalMQOptionError, match=needle):
        parse_read_options({**NS, **options}, streaming=True)
    with pytest.raises(TidalMQOptionError, match="'maxOffsetsPerTrigger' is for streaming"):
        parse_read_options({**NS, "subscribe": "A", "maxOffsetsPerTrigger": "5"}, streaming=False)


def test_the_sinks_kafka_server_option_points_at_nameserver() -> None:
    from tidalmq.spark.options import parse_write_options

    with pytest.raises(TidalMQOptionError, match="sink takes the NameServer's address as option 'nameserver'"):
        parse_write_options({**NS, "kafka.bootstrap.servers": "h:9092"}, streaming=False)
    assert parse_write_options(NS, streaming=False).send_timeout_s == 120.0  # Kafka's delivery.timeout.ms
