"""The Iceberg sink's pure core: its options, table names, the partition spec it asks for,
and the offsets it keeps in snapshot summaries.  No I/O, no pyiceberg: tested as plain data.

Exactly once rests on one fact kept here: every snapshot the sink commits carries, in its
summary property ``databus.offsets``, the next offset of every Kafka partition the table
has taken (``{"topic": {"partition": next_offset}}``, cumulative: the partitions of earlier
commits are carried forward), written in the same atomic catalog commit as the data files.
A sink resumes each partition from the largest offset any retained snapshot records for it
(offsets only move forward, and the largest survives a commit that was rebuilt on a
concurrent writer's snapshot with an older copy of the map).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FORMATS = ("json", "msgpack", "raw", "avro", "json_sr", "protobuf")
# Values in Confluent's wire format, the table's columns from the registry's subject
# ({topic}-value): the formats' names are ksqlDB's (JSON_SR: JSON with a JSON Schema), and
# the registry's schemaType of each.
REGISTRY_FORMATS = {"avro": "AVRO", "json_sr": "JSON", "protobuf": "PROTOBUF"}
OFFSETS_PROPERTY = "databus.offsets"

# Kafka Connect's names where Connect (or Iceberg's own Kafka Connect sink) has the concept.
DEFAULTS: dict[str, Any] = {
    "path": "data/iceberg",  # the default catalog's home: catalog.db and warehouse/
    "catalog": None,  # {type: sql|rest, ...}: pyiceberg catalog properties
    "namespace": "default",
    "table": "{topic}",
    "format": "json",
    "schema": None,  # {field: arrow type name}: the table's value columns declared up front
    "evolve": True,  # add fields seen in records (never drops one)
    "partition.by": ["hour(timestamp)"],
    "commit.interval.ms": 60_000,
    "commit.max.records": 1_000_000,
    "target.file.size.bytes": 512 * 1024 * 1024,  # Iceberg's write.target-file-size-bytes
    "orphan.min.age.ms": 0,
    # Confluent's name; for the registry formats (default: the registry of the file's
    # broker section, schema.registry.listen)
    "schema.registry.url": None,
}

_TRANSFORM = re.compile(
    r"^\s*(?:(?P<fn>identity|year|month|day|hour|void)\((?P<col1>\w+)\)"
    r"|(?P<fn2>bucket|truncate)\((?P<n>\d+)\s*,\s*(?P<col2>\w+)\)"
    r"|(?P<col3>\w+))\s*$"
)


@dataclass(frozen=True)
class Transform:
    name: str  # identity, year, month, day, hour, void, bucket, truncate
    column: str
    width: int | None = None

    def __str__(self) -> str:
        if self.width is not None:
            return f"{self.name}({self.width}, {self.column})"
        return f"{self.name}({self.column})"


@dataclass(frozen=True)
class Options:
    path: str
    catalog: dict[str, str]
    namespace: str
    table: str
    format: str
    schema: dict[str, str] | None
    evolve: bool
    partition_by: tuple[Transform, ...]
    commit_interval_ms: int
    commit_max_records: int
    target_file_size_bytes: int
    orphan_min_age_ms: int
    registry_url: str | None = None

    @property
    def registry_type(self) -> str | None:
        """The registry's schemaType the format reads (None: not a registry format)."""
        return REGISTRY_FORMATS.get(self.format)

    def table_name(self, topic: str) -> str:
        """``namespace.table`` of a topic (the ``table`` template's ``{topic}`` filled in;
        Iceberg names take no dots inside, so a topic's dots become underscores)."""
        return f"{self.namespace}.{self.table.format(topic=topic.replace('.', '_'))}"


def parse_transform(text: str) -> Transform:
    match = _TRANSFORM.match(text)
    if match is None:
        raise ValueError(f"partition.by: {text!r} is not an Iceberg transform (identity(col), "
                         "year|month|day|hour(col), bucket(N, col), truncate(N, col))")
    if match["col3"]:
        return Transform("identity", match["col3"])
    if match["fn"]:
        return Transform(match["fn"], match["col1"])
    return Transform(match["fn2"], match["col2"], int(match["n"]))


def default_catalog(path: str) -> dict[str, str]:
    """The SQL catalog on an SQLite file under ``path``, with a file warehouse beside it."""
    root = os.path.abspath(path)
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db",
            "warehouse": f"file://{root}/warehouse"}


def parse_options(config: Mapping[str, Any], file_registry: str | None = None, *,
                  reading: bool = False) -> Options:
    """Validate the sink's ``config:``; ValueError names every problem.  ``file_registry``:
    the registry of the file's broker section, the default of ``schema.registry.url``.
    ``reading``: for readers of the tables (``databus iceberg``, the console), which need
    no registry."""
    problems = []
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        problems.append(f"unknown option(s) {', '.join(unknown)} (known: {', '.join(DEFAULTS)})")
    merged = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
    if not isinstance(merged["path"], str) or not merged["path"]:
        problems.append("path must be a directory")
    catalog = merged["catalog"]
    if catalog is None:
        catalog = default_catalog(merged["path"] or ".")
    elif not isinstance(catalog, Mapping) or not isinstance(catalog.get("type", "sql"), str):
        problems.append("catalog must be a mapping of pyiceberg catalog properties "
                        "({type: sql, uri: ..., warehouse: ...} or {type: rest, uri: ...})")
        catalog = {}
    else:
        catalog = {str(k): str(v) for k, v in catalog.items()}
        catalog.setdefault("type", "sql")
        if catalog["type"] not in ("sql", "rest"):
            problems.append(f"catalog.type must be sql or rest, got {catalog['type']!r}")
        if "uri" not in catalog:
            problems.append(f"catalog.uri is required for a {catalog['type']} catalog")
        if catalog["type"] == "sql" and "warehouse" not in catalog:
            problems.append("catalog.warehouse is required for a sql catalog "
                            "(e.g. file:///srv/iceberg/warehouse)")
    for key in ("namespace", "table"):
        if not isinstance(merged[key], str) or not merged[key] or "." in merged[key]:
            problems.append(f"{key} must be a name without dots, got {merged[key]!r}")
    if isinstance(merged["table"], str):
        try:
            merged["table"].format(topic="t")
        except (KeyError, IndexError, ValueError):
            problems.append(f"table: {merged['table']!r} may use only {{topic}}")
    if merged["format"] not in FORMATS:
        problems.append(f"format must be one of {', '.join(FORMATS)}, got {merged['format']!r}")
    if not isinstance(merged["evolve"], bool):
        problems.append(f"evolve must be true or false, got {merged['evolve']!r}")
    for key in ("commit.interval.ms", "commit.max.records", "target.file.size.bytes"):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            problems.append(f"{key} must be a positive integer, got {value!r}")
    age = merged["orphan.min.age.ms"]
    if isinstance(age, bool) or not isinstance(age, int) or age < 0:
        problems.append(f"orphan.min.age.ms must be an integer >= 0, got {age!r}")
    partition_by = merged["partition.by"]
    if partition_by in (None, "none"):
        partition_by = []
    elif isinstance(partition_by, str):
        partition_by = [partition_by]
    transforms = []
    for text in partition_by if isinstance(partition_by, list) else [repr(partition_by)]:
        try:
            transforms.append(parse_transform(str(text)))
        except ValueError as exc:
            problems.append(str(exc))
    schema = merged["schema"]
    if schema is not None:
        if merged["format"] == "raw":
            problems.append("schema does not apply to format raw")
        elif not isinstance(schema, Mapping) or not schema or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in schema.items()
        ):
            problems.append("schema must map field names to type names, e.g. {id: int64}")
    registry = merged["schema.registry.url"]
    if merged["format"] in REGISTRY_FORMATS:
        registry = registry or file_registry
        if not registry and not reading:
            problems.append(f"format {merged['format']} reads the table's columns from a "
                            "schema registry: set schema.registry.url, or "
                            "schema.registry.listen in the file's broker section")
        elif registry is not None and (not isinstance(registry, str)
                                       or not registry.startswith(("http://", "https://"))):
            problems.append(f"schema.registry.url must be an http(s) URL, got {registry!r}")
        if schema is not None:
            problems.append(f"schema does not apply to format {merged['format']} (the "
                            "registry's subject gives the columns)")
    elif registry is not None:
        problems.append(f"schema.registry.url applies to the registry formats "
                        f"({', '.join(REGISTRY_FORMATS)}), not to format {merged['format']}")
    if problems:
        raise ValueError("iceberg: " + "; ".join(problems))
    return Options(
        path=merged["path"], catalog=dict(catalog), namespace=merged["namespace"],
        table=merged["table"], format=merged["format"],
        schema=dict(schema) if schema is not None else None, evolve=merged["evolve"],
        partition_by=tuple(transforms), commit_interval_ms=merged["commit.interval.ms"],
        commit_max_records=merged["commit.max.records"],
        target_file_size_bytes=merged["target.file.size.bytes"],
        orphan_min_age_ms=age,
        registry_url=(registry.rstrip("/") if registry and merged["format"] in REGISTRY_FORMATS
                      else None),
    )


# -- offsets in snapshot summaries -----------------------------------------------------------

Offsets = dict[tuple[str, int], int]


def encode_offsets(offsets: Mapping[tuple[str, int], int]) -> str:
    """``{"topic": {"partition": next_offset}}`` as compact JSON, sorted (stable bytes)."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def decode_offsets(text: str | None) -> Offsets:
    """The inverse of ``encode_offsets``; {} for a summary without the property."""
    if not text:
        return {}
    try:
        nested = json.loads(text)
        return {(str(topic), int(p)): int(n)
                for topic, parts in nested.items() for p, n in parts.items()}
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"{OFFSETS_PROPERTY} is not the sink's offsets: {text[:80]!r}") from None


def resume_offsets(summaries: Iterable[Mapping[str, str] | None]) -> Offsets:
    """Per partition the largest next offset any snapshot summary records (see the module
    docstring for why the largest and not simply the current snapshot's)."""
    out: Offsets = {}
    for summary in summaries:
        for tp, offset in decode_offsets((summary or {}).get(OFFSETS_PROPERTY)).items():
            if offset > out.get(tp, -1):
                out[tp] = offset
    return out


def merged_offsets(base: Mapping[tuple[str, int], int],
                   taken: Mapping[tuple[str, int], int]) -> Offsets:
    """The map a new snapshot carries: the base snapshot's, moved forward by this commit."""
    out = dict(base)
    for tp, offset in taken.items():
        out[tp] = max(offset, out.get(tp, -1))
    return out


def offsets_table(offsets: Mapping[tuple[str, int], int]) -> Sequence[tuple[str, int, int]]:
    return [(t, p, n) for (t, p), n in sorted(offsets.items())]
