"""Options of the ``tidalmq`` Spark source and sink: parsed and checked up front, pure Python.

Everything here runs on the driver when a query is defined (``load()``, ``save()``/``start()``), so a
misspelt or malformed option fails there, naming the option, before any task is scheduled. Spark hands the
options in lower case (``CaseInsensitiveDict``); the error messages use the documented spelling.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tidalmq.common import naming as nm

EARLIEST = -2  # per-queue JSON: as Kafka's source, -2 = earliest, -1 = latest
LATEST = -1
DEFAULT_READ_GROUP = "TIDALMQ_SPARK_READER"
DEFAULT_WRITE_GROUP = "TIDALMQ_SPARK_WRITER"

READ_OPTIONS = (
    "nameserver", "topic", "topicPattern", "subExpression", "subExpressionType", "startingOffsets",
    "endingOffsets", "maxMessagesPerTrigger", "failOnDataLoss", "consumerGroup", "maxRecordsPerPartition",
    "minPartitions", "pullBatchSize", "pullPipeline", "pullTimeoutMs", "requestTimeoutMs",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "retryDeadlineMs",
    # Spark's Kafka source spellings, so a Kafka job ports by changing the format name and the address
    "subscribe", "subscribePattern", "assign", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "includeHeaders", "kafkaCompatibleSchema",
    "startingTimestamp", "endingTimestamp", "kafkaConsumer.pollTimeoutMs", "groupIdPrefix",
)
# Kafka's name -> ours, for options that mean exactly the same thing.
KAFKA_ALIASES = {"subscribe": "topic", "subscribePattern": "topicPattern", "maxOffsetsPerTrigger": "maxMessagesPerTrigger",
                 "kafkaConsumer.pollTimeoutMs": "pullTimeoutMs"}
# Kafka's ways of naming what is read: given one of them, the source answers with Kafka's schema by default.
KAFKA_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
DEFAULT_MAX_TRIGGER_DELAY_S = 15 * 60.0  # Kafka's default maxTriggerDelay
WRITE_OPTIONS = (
    "nameserver", "topic", "producerGroup", "batchSize", "maxInflight", "sendTimeoutMs", "retries",
    "requestTimeoutMs", "writeId",
)
# As Kafka's producer's delivery.timeout.ms (120 s): a send rides out a broker restart (recovery, the
# de-duplication window's load) and the NameServer's re-registration.
DEFAULT_SEND_TIMEOUT_MS = 120_000
# Options Spark itself (or a Spark-level convention) puts into a source's or sink's option map.
_SPARK_OPTIONS = {"checkpointlocation", "queryname", "path"}


class TidalMQOptionError(ValueError):
    """A missing, unknown or malformed option of the tidalmq source or sink."""


@dataclass(frozen=True)
class StartSpec:
    """Where reading starts or ends: ``kind`` is earliest, latest, timestamp or queues (per-queue JSON)."""

    kind: str
    timestamp_ms: int = 0
    # topic -> "broker:qid"|"qid" -> offset (kind queues) or epoch ms (kind timestamps, Kafka's *ByTimestamp)
    queues: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "timestamp":
            return f"timestamp:{self.timestamp_ms}"
        if self.kind in ("queues", "timestamps"):
            return json.dumps(self.queues, sort_keys=True)
        return self.kind


@dataclass(frozen=True)
class RetryPolicy:
    """How the source rides out a broker or NameServer blip (Kafka's ``fetchOffset.numRetries`` /
    ``fetchOffset.retryIntervalMs``, and a total deadline like Kafka's ``default.api.timeout.ms``): a
    failed route lookup, offset query or pull is tried again after ``interval_s`` doubling up to 2 s until
    ``deadline_s`` (the driver's queries at least ``num_retries`` times); then it fails with the cause."""

    num_retries: int = 3
    interval_s: float = 0.1
    deadline_s: float = 60.0

    def pause(self, attempt: int) -> float:
        return min(2.0, self.interval_s * 2 ** (attempt - 1))


@dataclass(frozen=True)
class ReadOptions:
    nameserver: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    sub_expression: str = "*"
    sub_expression_type: str = "TAG"
    starting: StartSpec = StartSpec("earliest")
    ending: StartSpec = StartSpec("latest")
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    consumer_group: str | None = None
    max_records_per_partition: int = 500_000
    min_partitions: int = 0
    pull_batch_size: int = 1024
    pull_pipeline: int = 4
    pull_timeout_s: float = 10.0
    request_timeout_s: float = 5.0
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy())
    # Kafka's ``assign``: topic -> the queue keys read ("broker:qid" or "qid"); empty: every queue of the topics
    assign: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    min_messages_per_trigger: int | None = None
    max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_S
    kafka_schema: bool = False  # key, value, topic, partition, offset, timestamp, timestampType[, headers]
    include_headers: bool = False

    @property
    def pull_group(self) -> str:
        return self.consumer_group or DEFAULT_READ_GROUP

    @property
    def tag_set(self) -> frozenset[str] | None:
        """The exact tags to keep (None: all), for the check after the broker's tag-hash filter."""
        if self.sub_expression_type != "TAG":
            return None
        expr = self.sub_expression.strip()
        if not expr or expr == "*":
            return None
        return frozenset(t.strip() for t in expr.split("||") if t.strip())


@dataclass(frozen=True)
class WriteOptions:
    nameserver: str
    topic: str | None = None
    producer_group: str = DEFAULT_WRITE_GROUP
    batch_size: int = 256
    max_inflight: int = 32
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_MS / 1000.0
    retries: int = 2
    request_timeout_s: float = 5.0
    write_id: str | None = None  # names a batch write for deterministic message keys (exactly-once re-runs)


# ---- helpers -----------------------------------------------------------------------------------------

def _canonical(known: tuple[str, ...]) -> dict[str, str]:
    return {k.lower(): k for k in known}


def _check_known(options: Mapping[str, str], known: tuple[str, ...], what: str) -> dict[str, str]:
    """The options keyed by their documented spelling; unknown ones raise."""
    canon = _canonical(known)
    out: dict[str, str] = {}
    for key, value in options.items():
        k = key.lower()
        if k in _SPARK_OPTIONS:
            if k == "path" and value:
                raise TidalMQOptionError(
                    f"the tidalmq {what} takes no path (got {value!r}): name the topic with option 'topic'")
            continue
        if k.startswith("kafka."):
            raise TidalMQOptionError(_kafka_setting(key, what))
        if k not in canon:
            close = [c for c in known if c.lower().startswith(k[:4])]
            hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
            raise TidalMQOptionError(f"unknown option {key!r} of the tidalmq {what}{hint}; "
                                     f"known options: {', '.join(known)}")
        out[canon[k]] = value if value is None else str(value)
    return out


def _kafka_setting(key: str, what: str) -> str:
    """The error for a ``kafka.*`` option: Kafka's client settings; the address is the one that ports."""
    if key.lower() == "kafka.bootstrap.servers":
        return (f"option {key!r} is Kafka's: the tidalmq {what} takes the NameServer's address as option "
                "'nameserver' (host:port[;host:port])")
    return (f"option {key!r} is a Kafka client setting, which TidalMQ has no use for (the tidalmq {what}'s "
            "server option is 'nameserver'); leave it out")


def _int(opts: dict[str, str], name: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = opts.get(name)
    if raw is None or raw.strip() == "":
        return default
    label = _spelling(opts, name)
    try:
        value = int(raw.strip())
    except ValueError:
        raise TidalMQOptionError(f"option {label!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise TidalMQOptionError(f"option {label!r} must be >= {minimum}, got {value}")
    return value


_SPELLED = "\x00spelled"  # where parse_read_options keeps the spelling a renamed (Kafka) option was given in


def _spelling(opts: dict[str, str], name: str) -> str:
    """The name the user gave option ``name`` under (Kafka's, for an alias)."""
    given = opts.get(_SPELLED + name)
    return given if given is not None else name


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None or raw.strip() == "":
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise TidalMQOptionError(f"option {name!r} must be true or false, got {raw!r}")


def _nameserver(opts: dict[str, str], what: str) -> str:
    ns = (opts.get("nameserver") or os.environ.get("NAMESRV_ADDR") or "").strip()
    if not ns:
        raise TidalMQOptionError(f"option 'nameserver' is required by the tidalmq {what} (host:port[;host:port])")
    for addr in ns.split(";"):
        host, sep, port = addr.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise TidalMQOptionError(f"option 'nameserver' must be host:port[;host:port...], got {ns!r}")
    return ns


def _topic_name(name: str, option: str) -> str:
    try:
        nm.check_topic(name)
    except nm.NameError_ as e:
        raise TidalMQOptionError(f"option {option!r}: {e}") from None
    return name


def parse_timestamp(text: str, option: str) -> int:
    """Epoch milliseconds from ``<ms>`` or an ISO-8601 time (UTC unless it says otherwise)."""
    t = text.strip()
    if re.fullmatch(r"\d+", t):
        return int(t)
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise TidalMQOptionError(f"option {option!r}: {text!r} is neither epoch milliseconds nor an ISO-8601 "
                                 "time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def parse_duration_s(raw: str, option: str) -> float:
    """Seconds from Spark's time strings (``500ms``, ``30s``, ``15m``, ``1h``, ``1d``; a bare number is ms)."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", raw.lower())
    if not m:
        raise TidalMQOptionError(f"option {option!r} must be a duration such as 500ms, 30s, 15m, 1h, got {raw!r}")
    scale = {None: 0.001, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}[m.group(2)]
    return int(m.group(1)) * scale


def _queue_key(qkey: object, topic: str, option: str) -> str:
    if not re.fullmatch(r"(?:[^:]+:)?\d+", str(qkey)) or isinstance(qkey, bool):
        raise TidalMQOptionError(f"option {option!r}: queue key {qkey!r} of topic {topic!r} must be "
                                 "'brokerName:queueId' or 'queueId'")
    return str(qkey)


def _json_object(text: str, option: str, shape: str) -> dict:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TidalMQOptionError(f"option {option!r} is not valid JSON: {e}") from None
    if not isinstance(obj, dict) or not obj:
        raise TidalMQOptionError(f"option {option!r} must be a JSON object {shape}")
    for topic in obj:
        _topic_name(topic, option)
    return obj


def parse_assign(text: str) -> dict[str, tuple[str, ...]]:
    """Kafka's ``assign``: ``{"TopicA": [0, 1], "TopicB": ["broker-a:2"]}`` (a bare queue id means that id on
    every broker of the topic)."""
    obj = _json_object(text, "assign", '{"topic": [queueId, ...]}')
    out: dict[str, tuple[str, ...]] = {}
    for topic, ids in obj.items():
        if not isinstance(ids, list) or not ids:
            raise TidalMQOptionError(f"option 'assign': the value of topic {topic!r} must be a non-empty list of "
                                     "queue ids (0 or \"brokerName:0\")")
        out[topic] = tuple(dict.fromkeys(_queue_key(q, topic, "assign") for q in ids))
    return out


def parse_offsets_by_timestamp(text: str, option: str) -> StartSpec:
    """Kafka's ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: ``{"Topic": {"0": <epoch ms>}}``;
    each queue starts (ends) at its first message stored at or after that time."""
    obj = _json_object(text, option, '{"topic": {"queueId": epochMillis}}')
    queues: dict[str, dict[str, int]] = {}
    for topic, per_queue in obj.items():
        if not isinstance(per_queue, dict) or not per_queue:
            raise TidalMQOptionError(f"option {option!r}: the value of topic {topic!r} must be an object "
                                     "{\"queueId\": epochMillis}")
        qs: dict[str, int] = {}
        for qkey, ts in per_queue.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise TidalMQOptionError(f"option {option!r}: the timestamp of {topic}/{qkey} must be epoch "
                                         f"milliseconds >= 0, got {ts!r}")
            qs[_queue_key(qkey, topic, option)] = ts
        queues[topic] = qs
    return StartSpec("timestamps", queues=queues)


def parse_offsets(raw: str | None, option: str, default: str, *, allow_earliest: bool = True) -> StartSpec:
    """``earliest`` | ``latest`` | ``timestamp:<ms or ISO-8601>`` | per-queue JSON
    ``{"Topic": {"broker-a:0": 42, "1": -2}}`` (a bare queue id means that id on every broker)."""
    text = (raw if raw is not None else default).strip()
    low = text.lower()
    if low in ("earliest", "latest"):
        if low == "earliest" and not allow_earliest:
            raise TidalMQOptionError(f"option {option!r} cannot be 'earliest'")
        return StartSpec(low)
    if low.startswith("timestamp:"):
        return StartSpec("timestamp", timestamp_ms=parse_timestamp(text.split(":", 1)[1], option))
    if text.startswith("{"):
        obj = _json_object(text, option, "topic -> {queue: offset}")
        queues: dict[str, dict[str, int]] = {}
        for topic, per_queue in obj.items():
            if not isinstance(per_queue, dict):
                raise TidalMQOptionError(f"option {option!r}: the value of topic {topic!r} must be an object "
                                         "{\"brokerName:queueId\": offset}")
            qs: dict[str, int] = {}
            for qkey, off in per_queue.items():
                qk = _queue_key(qkey, topic, option)
                if isinstance(off, bool) or not isinstance(off, int) or off < -2:
                    raise TidalMQOptionError(f"option {option!r}: offset of {topic}/{qkey} must be an integer >= 0 "
                                             f"(or -2 earliest, -1 latest), got {off!r}")
                if off == EARLIEST and not allow_earliest:
                    raise TidalMQOptionError(f"option {option!r}: -2 (earliest) is not allowed here")
                qs[qk] = off
            queues[topic] = qs
        return StartSpec("queues", queues=queues)
    raise TidalMQOptionError(f"option {option!r} must be 'earliest', 'latest', 'timestamp:<epoch ms or ISO-8601>' "
                             f"or per-queue JSON, got {text!r}")


# ---- the source ----------------------------------------------------------------------------------------

def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """``streaming`` None: at load(), when Spark has not said yet whether the query is batch or streaming
    (``DataSource.schema``): every check but the batch-only/streaming-only ones."""
    what = "streaming source" if streaming else "source"
    opts = _check_known(options, READ_OPTIONS, what)
    options_given = set(opts)
    for kafka_name, ours in KAFKA_ALIASES.items():
        if kafka_name in opts:
            if ours in opts:
                raise TidalMQOptionError(f"options {kafka_name!r} (Kafka's spelling) and {ours!r} are the same "
                                         "option: give one of them")
            opts[ours] = opts.pop(kafka_name)
            opts[_SPELLED + ours] = kafka_name
    for kafka_name, ours in (("startingTimestamp", "startingOffsets"), ("endingTimestamp", "endingOffsets")):
        if kafka_name in opts:  # Kafka's global timestamp: every queue from its first message at or after it
            if ours in opts:
                raise TidalMQOptionError(f"options {kafka_name!r} and {ours!r} both say where reading starts "
                                         "(ends): give one of them")
            raw = opts.pop(kafka_name)
            opts[ours] = f"timestamp:{parse_timestamp(raw, kafka_name)}"
    ns = _nameserver(opts, what)
    topic_raw = (opts.get("topic") or "").strip()
    pattern = (opts.get("topicPattern") or "").strip() or None
    assign_raw = (opts.get("assign") or "").strip()
    if bool(topic_raw) + bool(pattern) + bool(assign_raw) != 1:
        raise TidalMQOptionError("the tidalmq source needs exactly one of the options 'topic' (or Kafka's "
                                 "'subscribe': a name or a comma list), 'topicPattern' (or 'subscribePattern': a "
                                 "regular expression) and 'assign' (JSON {\"topic\": [queueId, ...]})")
    assign = parse_assign(assign_raw) if assign_raw else {}
    topics: tuple[str, ...] = tuple(assign)
    if topic_raw:
        topics = tuple(dict.fromkeys(_topic_name(t.strip(), "topic") for t in topic_raw.split(",") if t.strip()))
    if pattern:
        try:
            re.compile(pattern)
        except re.error as e:
            raise TidalMQOptionError(f"option 'topicPattern' is not a valid regular expression: {e}") from None
    expr_type = (opts.get("subExpressionType") or "TAG").strip().upper()
    if expr_type not in ("TAG", "SQL92"):
        raise TidalMQOptionError(f"option 'subExpressionType' must be TAG or SQL92, got {expr_type!r}")
    expr = (opts.get("subExpression") or "*").strip() or "*"
    if expr_type == "SQL92":
        from tidalmq.filter.compiled import compile_sql92
        from tidalmq.filter.errors import FilterSyntaxError

        try:
            compile_sql92(expr)
        except FilterSyntaxError as e:
            raise TidalMQOptionError(f"option 'subExpression' is not a valid SQL92 filter: {e.describe()}") from None
    # As Kafka's source: the by-timestamp option, when given, takes precedence over the plain one.
    if opts.get("startingOffsetsByTimestamp"):
        starting = parse_offsets_by_timestamp(opts["startingOffsetsByTimestamp"], "startingOffsetsByTimestamp")
    else:
        starting = parse_offsets(opts.get("startingOffsets"), "startingOffsets",
                                 "latest" if streaming else "earliest")
    for name in ("endingOffsets", "endingOffsetsByTimestamp"):
        if streaming is True and name in opts:
            raise TidalMQOptionError(f"option {name!r} is for batch queries (spark.read); a streaming query runs "
                                     "until stopped (use Trigger.AvailableNow to stop at the current end)")
    if opts.get("endingOffsetsByTimestamp"):
        ending = parse_offsets_by_timestamp(opts["endingOffsetsByTimestamp"], "endingOffsetsByTimestamp")
    else:
        ending = parse_offsets(opts.get("endingOffsets"), "endingOffsets", "latest", allow_earliest=False)
    for name in ("maxMessagesPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        if streaming is False and name in opts:
            raise TidalMQOptionError(f"option {_spelling(opts, name)!r} is for streaming queries (spark.readStream)")
    for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if spec.kind in ("queues", "timestamps") and topics:
            extra = set(spec.queues) - set(topics)
            if extra:
                raise TidalMQOptionError(f"option {name!r} (or its ByTimestamp form) names topics that are not "
                                         f"read: {sorted(extra)}")
    max_per_trigger = _int(opts, "maxMessagesPerTrigger", None)
    min_per_trigger = _int(opts, "minOffsetsPerTrigger", None)
    if "maxTriggerDelay" in opts and min_per_trigger is None:
        raise TidalMQOptionError("option 'maxTriggerDelay' applies only with 'minOffsetsPerTrigger' (as in Kafka's "
                                 "source)")
    if min_per_trigger and max_per_trigger and min_per_trigger > max_per_trigger:
        raise TidalMQOptionError(f"option 'minOffsetsPerTrigger' ({min_per_trigger}) is larger than "
                                 f"'maxOffsetsPerTrigger'/'maxMessagesPerTrigger' ({max_per_trigger})")
    delay_raw = (opts.get("maxTriggerDelay") or "").strip()
    # A Kafka job names its topics Kafka's way and reads Kafka's columns: that is its default schema.
    kafka_schema = _bool(opts, "kafkaCompatibleSchema", any(k in options_given for k in KAFKA_SUBSCRIPTIONS))
    include_headers = _bool(opts, "includeHeaders", False)
    if include_headers and not kafka_schema:
        raise TidalMQOptionError("option 'includeHeaders' adds Kafka's 'headers' column: it needs "
                                 "'kafkaCompatibleSchema' = true (the native schema always has 'properties')")
    group = (opts.get("consumerGroup") or "").strip() or None
    if group is not None:
        try:
            nm.check_group(group)
        except nm.NameError_ as e:
            raise TidalMQOptionError(f"option 'consumerGroup': {e}") from None
    return ReadOptions(
        nameserver=ns,
        topics=topics,
        topic_pattern=pattern,
        sub_expression=expr,
        sub_expression_type=expr_type,
        starting=starting,
        ending=ending,
        max_messages_per_trigger=max_per_trigger,
        min_messages_per_trigger=min_per_trigger,
        max_trigger_delay_s=parse_duration_s(delay_raw, "maxTriggerDelay") if delay_raw
        else DEFAULT_MAX_TRIGGER_DELAY_S,
        assign=assign,
        kafka_schema=kafka_schema,
        include_headers=include_headers,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        consumer_group=group,
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", 500_000) or 500_000,
        min_partitions=_int(opts, "minPartitions", 0, minimum=0) or 0,
        pull_batch_size=_int(opts, "pullBatchSize", 1024) or 1024,
        pull_pipeline=_int(opts, "pullPipeline", 4) or 4,
        pull_timeout_s=(_int(opts, "pullTimeoutMs", 10_000) or 10_000) / 1000.0,
        request_timeout_s=(_int(opts, "requestTimeoutMs", 5_000) or 5_000) / 1000.0,
        retry=RetryPolicy(
            num_retries=_int(opts, "fetchOffset.numRetries", 3, minimum=0) or 0,
            interval_s=(_int(opts, "fetchOffset.retryIntervalMs", 100, minimum=0) or 0) / 1000.0,
            deadline_s=(_int(opts, "retryDeadlineMs", 60_000) or 60_000) / 1000.0,
        ),
    )


# ---- the sink -------------------------------------------------------------------------------------------

def parse_write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    what = "streaming sink" if streaming else "sink"
    opts = _check_known(options, WRITE_OPTIONS, what)
    ns = _nameserver(opts, what)
    topic = (opts.get("topic") or "").strip() or None
    if topic is not None:
        try:
            nm.check_topic_sendable(topic)
        except nm.NameError_ as e:
            raise TidalMQOptionError(f"option 'topic': {e}") from None
    group = (opts.get("producerGroup") or DEFAULT_WRITE_GROUP).strip()
    try:
        nm.check_group(group)
    except nm.NameError_ as e:
        raise TidalMQOptionError(f"option 'producerGroup': {e}") from None
    return WriteOptions(
        nameserver=ns,
        topic=topic,
        producer_group=group,
        batch_size=_int(opts, "batchSize", 256) or 256,
        max_inflight=_int(opts, "maxInflight", 32) or 32,
        send_timeout_s=(_int(opts, "sendTimeoutMs", DEFAULT_SEND_TIMEOUT_MS) or DEFAULT_SEND_TIMEOUT_MS) / 1000.0,
        retries=_int(opts, "retries", 2, minimum=0) or 0,
        request_timeout_s=(_int(opts, "requestTimeoutMs", 5_000) or 5_000) / 1000.0,
        write_id=(opts.get("writeId") or "").strip() or None,
    )
