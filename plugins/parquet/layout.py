"""The Parquet export's pure core: its options, file names, Hive directories and when a file
rolls.  No I/O, no trio, no pyarrow: tested as plain data.

Exactly once rests on three facts kept here:

* a file holds consecutive records of one Kafka partition and is named by its first and
  last offsets, ``TOPIC+PARTITION+FIRST+LAST.parquet`` (Kafka Connect's naming; offsets
  zero-padded to 20 digits so names sort by offset);
* every file of a partition's open *group* (one file per Hive directory its records fall
  in) is written when the group rolls, and only then are its offsets reported durable;
* where a group rolls depends only on the records (count, bytes, record time), so a replay
  from the committed offset cuts the same files under the same names (a wall-clock roll
  cannot be replayed; files it made past the committed offset are replaced, see sink.py).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FORMATS = ("json", "msgpack", "raw")
CODECS = ("snappy", "zstd", "gzip", "none")
PARTITION_BY = ("hour", "day", "none")
SUFFIX = ".parquet"
TEMP_SUFFIX = ".tmp"

# Kafka Connect's names (HDFS/S3 sinks) where Connect has the concept.
DEFAULTS: dict[str, Any] = {
    "path": None,  # required
    "format": "json",
    "schema": None,
    "flush.size": 100_000,
    "rotate.size.bytes": 64 * 1024 * 1024,
    "rotate.interval.ms": None,
    "rotate.schedule.interval.ms": None,
    "partition.by": "hour",
    "parquet.codec": "snappy",
    "schema.registry.url": None,  # Confluent's name: values in its wire format, columns from
}                                 # the subject {topic}-value


@dataclass(frozen=True)
class Options:
    path: str
    format: str
    schema: dict[str, str] | None
    flush_size: int
    rotate_size_bytes: int
    rotate_interval_ms: int | None
    rotate_schedule_interval_ms: int | None
    partition_by: str
    codec: str
    registry_url: str | None = None
    registry_is_default: bool = False  # the file's: used for topics whose subject exists


def parse_options(config: Mapping[str, Any], file_registry: str | None = None) -> Options:
    """Validate the sink's ``config:``; ValueError names every problem.  ``file_registry``:
    the registry of the file's broker section, the default of ``schema.registry.url`` when
    the values are not otherwise described (no ``format``, no ``schema``)."""
    problems = []
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        problems.append(f"unknown option(s) {', '.join(unknown)} (known: {', '.join(DEFAULTS)})")
    merged = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
    if not isinstance(merged["path"], str) or not merged["path"]:
        problems.append("path is required: a directory or a filesystem URL")

    def choice(key: str, allowed: Sequence[str]) -> None:
        if merged[key] not in allowed:
            problems.append(f"{key} must be one of {', '.join(allowed)}, got {merged[key]!r}")

    choice("format", FORMATS)
    choice("parquet.codec", CODECS)
    choice("partition.by", PARTITION_BY)
    for key, optional in (("flush.size", False), ("rotate.size.bytes", False),
                          ("rotate.interval.ms", True), ("rotate.schedule.interval.ms", True)):
        value = merged[key]
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            problems.append(f"{key} must be a positive integer, got {value!r}")
    schema = merged["schema"]
    if schema is not None:
        if merged["format"] == "raw":
            problems.append("schema does not apply to format raw")
        elif not isinstance(schema, Mapping) or not schema or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in schema.items()
        ):
            problems.append("schema must map field names to type names, e.g. {id: int64}")
    registry = merged["schema.registry.url"]
    by_default = (registry is None and bool(file_registry) and "format" not in config
                  and "schema" not in config)
    if by_default:
        registry = file_registry
    if registry is not None:
        if not isinstance(registry, str) or not registry.startswith(("http://", "https://")):
            problems.append(f"schema.registry.url must be an http(s) URL, got {registry!r}")
        for key in ("format", "schema"):
            if key in config:  # the registry gives both: saying otherwise is a mistake
                problems.append(f"{key} does not apply with schema.registry.url (values are "
                                "read in Confluent's wire format, columns from the registry)")
    if problems:
        raise ValueError("parquet: " + "; ".join(problems))
    return Options(
        path=merged["path"], format=merged["format"],
        schema=dict(schema) if schema is not None else None,
        flush_size=merged["flush.size"], rotate_size_bytes=merged["rotate.size.bytes"],
        rotate_interval_ms=merged["rotate.interval.ms"],
        rotate_schedule_interval_ms=merged["rotate.schedule.interval.ms"],
        partition_by=merged["partition.by"], codec=merged["parquet.codec"],
        registry_url=registry.rstrip("/") if registry else None,
        registry_is_default=by_default,
    )


# -- names -----------------------------------------------------------------------------------

def file_name(topic: str, partition: int, first: int, last: int) -> str:
    return f"{topic}+{partition}+{first:020d}+{last:020d}{SUFFIX}"


# Kafka topic names are [a-zA-Z0-9._-], so "+" cannot occur in them.
_NAME = re.compile(r"^(?P<topic>[^+/]+)\+(?P<partition>\d+)\+(?P<first>\d+)\+(?P<last>\d+)"
                   + re.escape(SUFFIX) + "$")


def parse_file_name(name: str) -> tuple[str, int, int, int] | None:
    """(topic, partition, first, last) of an export file's base name, None for others."""
    match = _NAME.match(name)
    if match is None:
        return None
    return (match["topic"], int(match["partition"]), int(match["first"]), int(match["last"]))


def temp_name(final: str, unique: str) -> str:
    """Hidden (leading dot), so Hive, Spark and Impala skip it while it is written."""
    return f".{final}.{unique}{TEMP_SUFFIX}"


def is_temp_for(name: str, topic: str, partition: int) -> bool:
    return name.startswith(f".{topic}+{partition}+") and name.endswith(TEMP_SUFFIX)


def bucket(timestamp_ms: int, partition_by: str) -> int:
    """The record-time bucket of a Hive directory (hours or days since the epoch)."""
    if partition_by == "hour":
        return timestamp_ms // 3_600_000
    if partition_by == "day":
        return timestamp_ms // 86_400_000
    return 0


def hive_dir(topic: str, bucket_value: int, partition_by: str) -> str:
    """``topic=T/date=YYYY-MM-DD/hour=HH`` (UTC), relative to the export's path."""
    if partition_by == "none":
        return f"topic={topic}"
    if partition_by == "hour":
        start = datetime.datetime.fromtimestamp(bucket_value * 3600, datetime.UTC)
        return f"topic={topic}/date={start:%Y-%m-%d}/hour={start:%H}"
    start = datetime.datetime.fromtimestamp(bucket_value * 86400, datetime.UTC)
    return f"topic={topic}/date={start:%Y-%m-%d}"


# -- rolling -----------------------------------------------------------------------------------

@dataclass
class OpenGroup:
    """The counters of a partition's open group (the files not yet written)."""

    records: int = 0
    bytes: int = 0
    first_timestamp: int = 0
    opened_at: float = 0.0

    def reset(self) -> None:
        self.records = self.bytes = self.first_timestamp = 0
        self.opened_at = 0.0


def cut_points(
    options: Options, group: OpenGroup, sizes: Sequence[int], timestamps: Sequence[int],
    now: float,
) -> list[int]:
    """Add rows (their byte sizes and record timestamps) to ``group``; return the positions
    ``i`` (1..len) such that the group is written after row ``i - 1``, in order.

    A group rolls after the row that makes it reach ``flush.size`` records or
    ``rotate.size.bytes`` bytes, and before a row whose timestamp is ``rotate.interval.ms``
    or more past the group's first record.  ``group`` is left describing the rows after
    the last cut.  ``now`` (seconds) stamps a group's opening for the wall-clock roll."""
    cuts: list[int] = []
    interval = options.rotate_interval_ms
    max_records, max_bytes = options.flush_size, options.rotate_size_bytes
    for i, (size, timestamp) in enumerate(zip(sizes, timestamps)):
        if interval is not None and group.records and timestamp - group.first_timestamp >= interval:
            cuts.append(i)
            group.reset()
        if not group.records:
            group.first_timestamp = timestamp
            group.opened_at = now
        group.records += 1
        group.bytes += size
        if group.records >= max_records or group.bytes >= max_bytes:
            cuts.append(i + 1)
            group.reset()
    return cuts


def no_cut(
    options: Options, group: OpenGroup, count: int, total_bytes: int, first_timestamp: int,
    max_timestamp: int, now: float,
) -> bool:
    """The fast path of ``cut_points`` for a batch summed up (row count, bytes, its first and
    largest timestamps): if no row of it can cut the group, add it and return True; else
    change nothing and return False (then call ``cut_points`` with the rows)."""
    interval = options.rotate_interval_ms
    first = group.first_timestamp if group.records else first_timestamp
    if (group.records + count >= options.flush_size
            or group.bytes + total_bytes >= options.rotate_size_bytes
            or (interval is not None and max_timestamp - first >= interval)):
        return False
    if not group.records:
        group.first_timestamp = first_timestamp
        group.opened_at = now
    group.records += count
    group.bytes += total_bytes
    return True


def schedule_due(options: Options, group: OpenGroup, now: float) -> bool:
    """The wall-clock roll: the open group is older than ``rotate.schedule.interval.ms``."""
    schedule = options.rotate_schedule_interval_ms
    return (schedule is not None and group.records > 0
            and (now - group.opened_at) * 1000 >= schedule)
