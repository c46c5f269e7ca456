"""The ``databus`` source's and sink's options, parsed and checked: pure Python, no Spark.

The names, defaults and rules are those of Spark's Kafka source (Structured Streaming + Kafka
Integration Guide), so a job moves over by changing the format name.  Spark hands options over
as strings with case-insensitive names; they are looked up lower-cased here.  Every problem
(an unknown option, a value that does not parse, two options that contradict each other)
raises OptionError naming the option, at ``load()`` / ``save()`` time, before any task runs.

``kafka.*`` options go to our client (``kafka.bootstrap.servers`` is required); the consumer
settings the source itself owns (group, commits, offset reset, deserializers) are refused with
the option that replaces them, as Spark's Kafka source refuses them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from databus.protocol.types import TopicPartition

EARLIEST = -2  # Kafka's JSON offsets: -2 earliest, -1 latest
LATEST = -1


class OptionError(ValueError):
    """An option of the databus source or sink is unknown, malformed or contradictory."""


# Options of Spark's Kafka source that this source takes (lower-cased).
SOURCE_OPTIONS = {
    "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets",
    "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "endingtimestamp", "endingoffsetsbytimestamp",
    "maxoffsetspertrigger", "minpartitions", "failondataloss", "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "valueformat", "valuesubject", "schema.registry.url",
}
# writeStream hands the sink its checkpointLocation among the options
SINK_OPTIONS = {"topic", "includeheaders", "checkpointlocation", "exactlyonce",
                "transactionalidprefix"}
# The transactional writer's default kafka.transaction.timeout.ms: the broker's default
# transaction.max.timeout.ms (15 min), since a task's transaction stays open until Spark's
# job or micro-batch commit, not only while the task runs (Kafka's producer default, 60 s,
# would abort the first tasks of a longer job).
EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS = "900000"

# Options of Spark's Kafka source this one refuses, and why (the message names the option).
NOT_SUPPORTED = {
    "minoffsetspertrigger": "Spark's Python data sources have no min+max read limit",
    "maxtriggerdelay": "Spark's Python data sources have no min+max read limit",
    "maxrecordsperpartition": "use minPartitions to split ranges",
    "groupidprefix": "the databus source joins no consumer group (the checkpoint holds the offsets)",
    "fetchoffset.numretries": "offset lookups retry until kafka.request.timeout.ms",
    "fetchoffset.retryintervalms": "offset lookups back off by kafka.retry.backoff.ms",
}

# kafka.* consumer settings the source owns, as Spark's Kafka source refuses them.
KAFKA_OWNED = {
    "group.id": "the databus source joins no consumer group (the checkpoint holds the offsets)",
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source never commits offsets to the cluster",
    "key.deserializer": "keys are always binary: cast or decode them in the DataFrame",
    "value.deserializer": "values are always binary: cast or decode them in the DataFrame",
    "key.serializer": "keys are written as binary or string columns",
    "value.serializer": "values are written as binary or string columns",
    "interceptor.classes": "interceptors are not supported",
}

BOOL = {"true": True, "false": False}


def _lower(options: dict[str, Any] | Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in dict(options).items():
        if value is None:
            continue
        out[str(key).lower()] = str(value)
    return out


def _bool(opts: dict[str, str], name: str, display: str, default: bool) -> bool:
    if name not in opts:
        return default
    value = opts[name].strip().lower()
    if value not in BOOL:
        raise OptionError(f"option '{display}' must be true or false, got {opts[name]!r}")
    return BOOL[value]


def _positive_int(opts: dict[str, str], name: str, display: str) -> int | None:
    if name not in opts:
        return None
    try:
        value = int(opts[name].strip())
    except ValueError:
        raise OptionError(f"option '{display}' must be a positive integer, got {opts[name]!r}") from None
    if value <= 0:
        raise OptionError(f"option '{display}' must be a positive integer, got {opts[name]!r}")
    return value


def _json_object(text: str, display: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{display}' is not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option '{display}' must be a JSON object, got {text!r}")
    return value


def parse_partition_map(text: str, display: str) -> dict[TopicPartition, int]:
    """Kafka's per-partition JSON ``{"topic": {"0": 23, "1": -2}}`` -> {(topic, 0): 23, ...}."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in _json_object(text, display).items():
        if not isinstance(parts, dict):
            raise OptionError(
                f"option '{display}': topic {topic!r} must map partitions to numbers, got {parts!r}"
            )
        for partition, value in parts.items():
            try:
                p = int(partition)
            except ValueError:
                raise OptionError(
                    f"option '{display}': {topic!r} has partition {partition!r}, not a number"
                ) from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    f"option '{display}': {topic}-{p} must be an integer, got {value!r}"
                )
            out[(topic, p)] = value
    return out


def parse_assign(text: str) -> tuple[TopicPartition, ...]:
    """``{"topicA": [0, 1], "topicB": [2]}`` -> ((topicA, 0), (topicA, 1), (topicB, 2))."""
    out: list[TopicPartition] = []
    for topic, parts in _json_object(text, "assign").items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise OptionError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers, "
                f"got {parts!r}"
            )
        out += [(topic, p) for p in parts]
    if not out:
        raise OptionError("option 'assign' names no partitions")
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends.

    kind: ``earliest`` | ``latest`` | ``offsets`` (per partition, -2/-1 allowed) |
    ``timestamp`` (one timestamp for every partition) | ``timestamps`` (per partition).
    """

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


EARLIEST_SPEC = OffsetSpec("earliest")
LATEST_SPEC = OffsetSpec("latest")


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    kafka: dict[str, str]  # the kafka.* settings without the prefix (bootstrap included)
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = EARLIEST_SPEC
    ending: OffsetSpec = LATEST_SPEC
    # True: fail when no offset has a timestamp >= the starting one; False: take latest.
    starting_timestamp_strict: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    # valueFormat (avro / json / protobuf, values in Confluent's wire format, registry.py): the value
    # column is a struct of the subject's fields
    value_format: str | None = None
    value_subject: str | None = None
    registry_url: str = "http://127.0.0.1:8081"

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this query reads (subscribe or subscribePattern)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign)


def _kafka_settings(opts: dict[str, str]) -> dict[str, str]:
    kafka = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    if not kafka.get("bootstrap.servers", "").strip():
        raise OptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")
    for key, why in KAFKA_OWNED.items():
        if key in kafka:
            raise OptionError(f"Kafka option 'kafka.{key}' is not supported: {why}")
    return kafka


def _unknown(opts: dict[str, str], known: set[str], what: str) -> None:
    for name in sorted(opts):
        if name.startswith("kafka."):
            continue
        if name in NOT_SUPPORTED and name not in known:
            raise OptionError(f"option '{name}' is not supported by the databus {what}: "
                              f"{NOT_SUPPORTED[name]}")
        if name not in known:
            raise OptionError(
                f"unknown option '{name}' for the databus {what} (the options are "
                f"kafka.*, {', '.join(sorted(known))})"
            )


def _offset_spec(opts: dict[str, str], name: str, display: str, *, streaming: bool | None,
                 ending: bool) -> OffsetSpec | None:
    if name not in opts:
        return None
    text = opts[name].strip()
    word = text.lower()
    if word == "earliest":
        if ending:
            raise OptionError(f"option '{display}': ending offset can't be earliest")
        return EARLIEST_SPEC
    if word == "latest":
        if not ending and streaming is False:
            raise OptionError(f"option '{display}': starting offset can't be latest for batch "
                              "queries")
        return LATEST_SPEC
    if not text.startswith("{"):
        raise OptionError(
            f"option '{display}' must be earliest, latest or a JSON object like "
            f'{{"topic":{{"0":23,"1":-2}}}}, got {opts[name]!r}'
        )
    offsets = parse_partition_map(text, display)
    for (topic, p), off in offsets.items():
        if ending and off == EARLIEST:
            raise OptionError(f"option '{display}': ending offset of {topic}-{p} can't be "
                              "earliest (-2)")
        if not ending and streaming is False and off == LATEST:
            raise OptionError(f"option '{display}': starting offset of {topic}-{p} can't be "
                              "latest (-1) for batch queries")
        if off < EARLIEST:
            raise OptionError(f"option '{display}': offset {off} of {topic}-{p} is invalid "
                              "(use -2 for earliest, -1 for latest)")
    return OffsetSpec("offsets", offsets)


def _timestamp_specs(opts: dict[str, str], one: str, per: str) -> OffsetSpec | None:
    """``startingTimestamp`` beats ``startingOffsetsByTimestamp`` (Kafka's precedence)."""
    single, many = one.lower(), per.lower()
    if single in opts:
        try:
            ts = int(opts[single].strip())
        except ValueError:
            raise OptionError(f"option '{one}' must be a timestamp in ms, got {opts[single]!r}") from None
        if ts < 0:
            raise OptionError(f"option '{one}' must be a timestamp >= 0, got {ts}")
        return OffsetSpec("timestamp", timestamp=ts)
    if many in opts:
        stamps = parse_partition_map(opts[many], per)
        for (topic, p), ts in stamps.items():
            if ts < 0:
                raise OptionError(f"option '{per}': timestamp of {topic}-{p} must be >= 0, got {ts}")
        return OffsetSpec("timestamps", stamps)
    return None


def parse_source_options(options: dict[str, Any] | Any, *, streaming: bool | None) -> SourceOptions:
    """Check the options of a read and return them parsed.

    ``streaming``: True for readStream, False for read, None when not known yet (``load()``
    asks for the schema before Spark says which): then only what is wrong either way fails.
    """
    opts = _lower(options)
    _unknown(opts, SOURCE_OPTIONS, "source")
    kafka = _kafka_settings(opts)

    chosen = [n for n in ("subscribe", "subscribepattern", "assign") if n in opts]
    if len(chosen) != 1:
        display = {"subscribe": "subscribe", "subscribepattern": "subscribePattern",
                   "assign": "assign"}
        raise OptionError(
            "exactly one of the options 'assign', 'subscribe', 'subscribePattern' must be given"
            + (f" (got {', '.join(repr(display[c]) for c in chosen)})" if chosen else "")
        )
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign: tuple[TopicPartition, ...] = ()
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option 'subscribe' names no topic (a comma-separated list)")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise OptionError("option 'subscribePattern' is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regex ({exc}): {pattern!r}") from None
    else:
        assign = parse_assign(opts["assign"])

    if streaming is True:
        for name, display in (("endingoffsets", "endingOffsets"), ("endingtimestamp", "endingTimestamp"),
                              ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp")):
            if name in opts:
                raise OptionError(f"option '{display}' is for batch queries only (a stream has no end)")

    starting = (_timestamp_specs(opts, "startingTimestamp", "startingOffsetsByTimestamp")
                or _offset_spec(opts, "startingoffsets", "startingOffsets", streaming=streaming,
                                ending=False)
                or (LATEST_SPEC if streaming else EARLIEST_SPEC))
    ending = LATEST_SPEC
    if streaming is not True:
        ending = (_timestamp_specs(opts, "endingTimestamp", "endingOffsetsByTimestamp")
                  or _offset_spec(opts, "endingoffsets", "endingOffsets", streaming=False,
                                  ending=True)
                  or LATEST_SPEC)

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest, "
                          f"got {opts['startingoffsetsbytimestampstrategy']!r}")

    if assign:
        _check_within_assign(starting, assign, "startingOffsets")
        _check_within_assign(ending, assign, "endingOffsets")

    poll_timeout = _positive_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    value_format = opts.get("valueformat", "").strip().lower() or None
    subject = opts.get("valuesubject", "").strip() or None
    if value_format is not None:
        if value_format not in ("avro", "json", "protobuf"):
            raise OptionError(f"option 'valueFormat' must be avro, json or protobuf, got "
                              f"{opts['valueformat']!r}")
        if subject is None:
            if len(subscribe) != 1:
                raise OptionError("option 'valueFormat' needs 'valueSubject' unless "
                                  "'subscribe' names one topic (whose subject is TOPIC-value)")
            subject = f"{subscribe[0]}-value"
    elif subject is not None or "schema.registry.url" in opts:
        raise OptionError("options 'valueSubject' and 'schema.registry.url' go with "
                          "'valueFormat'")
    return SourceOptions(
        bootstrap_servers=kafka["bootstrap.servers"].strip(),
        kafka=kafka,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp_strict=strategy == "error",
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        poll_timeout_ms=poll_timeout or 120_000,
        value_format=value_format,
        value_subject=subject,
        registry_url=opts.get("schema.registry.url", "").strip() or "http://127.0.0.1:8081",
    )


def _check_within_assign(spec: OffsetSpec, assign: tuple[TopicPartition, ...], display: str) -> None:
    if spec.kind in ("offsets", "timestamps"):
        extra = sorted(set(spec.offsets) - set(assign))
        if extra:
            raise OptionError(
                f"option '{display}' names partitions that 'assign' does not: "
                + ", ".join(f"{t}-{p}" for t, p in extra)
            )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    kafka: dict[str, str]
    topic: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str = "databus-spark"


def parse_sink_options(options: dict[str, Any] | Any) -> SinkOptions:
    """Check the options of a write (batch or streaming)."""
    opts = _lower(options)
    _unknown(opts, SINK_OPTIONS, "sink")
    kafka = _kafka_settings(opts)
    if "transactional.id" in kafka:
        raise OptionError("Kafka option 'kafka.transactional.id' is not supported: each task "
                          "needs its own; set exactlyOnce=true (and transactionalIdPrefix)")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    exactly_once = _bool(opts, "exactlyonce", "exactlyOnce", False)
    prefix = opts.get("transactionalidprefix", "databus-spark").strip()
    if not prefix:
        raise OptionError("option 'transactionalIdPrefix' is empty")
    if "transactionalidprefix" in opts and not exactly_once:
        raise OptionError("option 'transactionalIdPrefix' needs exactlyOnce=true")
    if exactly_once:
        kafka.setdefault("transaction.timeout.ms", EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS)
    return SinkOptions(kafka["bootstrap.servers"].strip(), kafka, topic.strip() if topic else None,
                       exactly_once, prefix)
