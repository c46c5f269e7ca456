"""Records -> an Arrow table of Iceberg-writable types: the Kafka columns, then the value.

Kafka columns (the shape of Spark's Kafka source): ``topic`` string, ``partition`` int,
``offset`` long, ``timestamp`` timestamptz (microseconds), ``key`` binary, ``headers``
list<struct<key string, value binary>>.  With ``format: raw`` one ``value`` binary column;
with json or msgpack one column per top-level field of the value (a map), with the types
inferred from this batch alone: the table's schema is reconciled with them at commit time
(schema.py), so a batch is never forced into an earlier batch's guess.  A value field named
like a Kafka column gets a ``value_`` prefix; a field that is null in the whole batch is
left out (it reads as null).  A record without a value (a tombstone) is a row of nulls.

A batch that does not decode as a whole is decoded record by record: the records that do
not decode are returned with the reason (they go to the dead-letter topic).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgpack
import pyarrow as pa

from ..arrow_columns import EMPTY_JSON, json_lines, kafka_columns, read_json_lines

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
KAFKA_FIELDS = [
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("headers", HEADERS_TYPE),
]
KAFKA_NAMES = {f.name for f in KAFKA_FIELDS}
_EMPTY = EMPTY_JSON
_DECODE_ERRORS = (ValueError, TypeError, pa.ArrowException, msgpack.UnpackException)


def iceberg_type(t: pa.DataType) -> pa.DataType | None:
    """The nearest type Iceberg stores (None: a null-only column, left out)."""
    if pa.types.is_null(t):
        return None
    if pa.types.is_struct(t):
        fields = [pa.field(f.name, iceberg_type(f.type) or pa.string()) for f in t]
        return pa.struct(fields)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(iceberg_type(t.value_type) or pa.string())
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_unsigned_integer(t) or t in (pa.int8(), pa.int16()):
        return pa.int64() if t.bit_width >= 32 else pa.int32()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_float16(t):
        return pa.float32()
    return t


def declared_fields(fields: dict[str, str]) -> list[pa.Field]:
    """``{name: type}`` (Arrow's names: int64, double, string, bool, timestamp[us], ...)."""
    out = []
    for name, type_name in fields.items():
        try:
            out.append(pa.field(name, iceberg_type(pa.type_for_alias(type_name))))
        except (ValueError, KeyError):
            raise ValueError(f"iceberg: schema field {name!r}: unknown type {type_name!r} "
                             "(Arrow type names: int32, int64, float, double, string, bool, "
                             "binary, timestamp[us], date32, ...)") from None
    return out


class Decoder:
    def __init__(self, fmt: str) -> None:
        self.format = fmt

    def table(self, records: Sequence[Any]) -> tuple[pa.Table | None, list[tuple[Any, str]]]:
        """(table of the records that decode or None, [(record, reason), ...] of others)."""
        topics, partitions, offsets, timestamps, _types, keys, values, headers = zip(*records)
        rejected: list[tuple[Any, str]] = []
        if self.format == "raw":
            value = pa.table({"value": pa.array(values, pa.binary())})
        else:
            values = [v if v is not None else _EMPTY for v in values]
            good, value, rejected = self._decode(records, values)
            if good is not None:
                if not good:
                    return None, rejected
                topics, partitions, offsets, timestamps, keys, headers = (
                    [col[i] for i in good]
                    for col in (topics, partitions, offsets, timestamps, keys, headers))
        n = len(offsets)
        kafka = [
            pa.array(topics, pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([t * 1000 for t in timestamps], pa.int64()).cast(KAFKA_FIELDS[3].type),
            pa.array(keys, pa.binary()),
            pa.array(headers, HEADERS_TYPE) if any(headers) else pa.array([[]] * n, HEADERS_TYPE),
        ]
        return _assemble(kafka, value), rejected

    def table_of_columns(self, batch: pa.RecordBatch) -> pa.Table | None:
        """``table`` for records already in Arrow (``RecordColumns.to_arrow()``): the Kafka
        columns cast, not rebuilt, and JSON values read by Arrow's reader as one buffer
        joined in Arrow (no Python object per record).  None when a value does not decode
        this way (or the format is msgpack or a registry's): the caller takes the
        per-record way, which finds the bad records."""
        values = batch.column("value")
        if self.format == "raw":
            value = pa.table({"value": values})
        elif self.format == "json":
            data = json_lines(values)
            if data is None:
                return None
            try:
                value = read_json_lines(data)
            except pa.ArrowInvalid:
                return None
            if value.num_rows != len(values):
                return None
        else:
            return None
        return _assemble(kafka_columns(batch, KAFKA_FIELDS[3].type), value)

    # -- values --------------------------------------------------------------------------

    def _decode(self, records, values):
        """(indexes of the good records or None for all, their value table, rejected)."""
        try:
            return None, self._decode_batch(values), []
        except _DECODE_ERRORS:
            pass
        good, tables, rejected = [], [], []
        for i, (record, value) in enumerate(zip(records, values)):
            try:
                tables.append(self._decode_batch([value]))
                good.append(i)
            except _DECODE_ERRORS as exc:
                reason = " ".join(str(exc).split())
                rejected.append((record, f"{self.format} value does not decode: {reason}"))
        if not tables:
            return good, pa.table({}), rejected
        return good, pa.concat_tables(tables, promote_options="permissive"), rejected

    def _decode_batch(self, values: Sequence[bytes]) -> pa.Table:
        if self.format == "json":
            return _json_table(values)
        rows = [msgpack.unpackb(v) if v is not _EMPTY else {} for v in values]
        for row in rows:
            if not isinstance(row, dict):
                raise TypeError(f"not a msgpack map but {type(row).__name__}")
        return pa.Table.from_pylist(rows)


class RegistryDecoder(Decoder):
    """Values in Confluent's wire format, decoded into the columns of the subject
    ``{topic}-value`` (databus/schemas/columns.py, shared with the parquet sink): the table
    follows the subject's compatible versions (new fields, Iceberg's promotions, removed
    fields kept); ``IncompatibleSchemaError`` from ``table`` when it cannot."""

    def __init__(self, url: str, topic: str, schema_type: str) -> None:
        from databus.schemas.columns import SubjectDecoder

        super().__init__("registry")
        self.subject = SubjectDecoder(url, topic, "iceberg", promote=True,
                                      schema_type=schema_type)

    def value_fields(self) -> list[pa.Field]:
        """The subject's columns (read from the registry if not yet), for a new table."""
        if self.subject.schema is None:
            self.subject.follow_latest()
        assert self.subject.schema is not None
        return [pa.field("value_" + f.name if f.name in KAFKA_NAMES else f.name,
                         iceberg_type(f.type) or pa.string()) for f in self.subject.schema]

    def _decode(self, records, values):
        return self.subject.decode(records, [None if v is _EMPTY else v for v in values])


def _assemble(kafka: list[pa.Array], value: pa.Table) -> pa.Table:
    """The Kafka columns, then the value's columns in the types Iceberg stores (a column
    null in the whole batch left out: nothing to learn about its type)."""
    columns, fields = list(kafka), list(KAFKA_FIELDS)
    for name, column in zip(value.column_names, value.columns):
        settled = iceberg_type(column.type)
        if settled is None:
            continue
        if settled != column.type:
            column = column.cast(settled)
        fields.append(pa.field("value_" + name if name in KAFKA_NAMES else name, settled))
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _json_table(values: Sequence[bytes]) -> pa.Table:
    if len(values) == 1 and (b"\n" in values[0] or b"\r" in values[0]):
        # Arrow's reader is line-based: re-serialise a pretty-printed document first.
        values = [json.dumps(json.loads(values[0]), separators=(",", ":")).encode()]
    joined = b"\n".join(values)
    # One line per value, or the rows would not line up with the records.
    if joined.count(b"\n") != len(values) - 1 or b"\r" in joined:
        raise ValueError("a value spans lines")
    table = read_json_lines(joined)
    if table.num_rows != len(values):
        raise ValueError("not one JSON object per record")
    return table
