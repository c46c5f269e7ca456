"""Records -> an Arrow table: the Kafka columns plus the decoded value (pyarrow, no trio).

Columns: ``topic`` string, ``partition`` int32, ``offset`` int64, ``timestamp``
timestamp[ms, UTC], ``key`` binary, ``headers`` list<struct<key string, value binary>> (the
shape of Spark's Kafka source), then the value: with ``format: raw`` one ``value`` binary
column; with json or msgpack one column per top-level field of the value (a map), by the
declared ``schema`` (fields it does not have are ignored) or by the schema inferred from
the first batch, which grows when a later batch brings a new field: the field is appended
(logged once), rows before it have it null, and the files written from then on have the
column (readers merge the files' schemas by name).  A value field named like a Kafka column gets a ``value_``
prefix.  A record without a value (a tombstone) is a row of nulls.

JSON is decoded a whole batch at a time by Arrow's JSON reader (one newline-separated
buffer); only when that fails are the records decoded one by one, to find the ones that do
not decode: they are returned with the reason, and the batch goes on without them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.json as pa_json

from ..arrow_columns import json_lines, kafka_columns, read_json_lines

KAFKA_FIELDS = [
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
    pa.field("key", pa.binary()),
    pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
]
KAFKA_NAMES = {f.name for f in KAFKA_FIELDS}
_HEADERS_TYPE = KAFKA_FIELDS[5].type
_EMPTY = b"{}"

log = logging.getLogger("databus_plugins.parquet")


def declared_schema(fields: dict[str, str]) -> pa.Schema:
    """``{name: type}`` (Arrow's names: int64, double, string, bool, timestamp[ms], ...)."""
    out = []
    for name, type_name in fields.items():
        try:
            out.append(pa.field(name, pa.type_for_alias(type_name)))
        except (ValueError, KeyError):
            raise ValueError(f"parquet: schema field {name!r}: unknown type {type_name!r} "
                             "(Arrow type names: int32, int64, double, string, bool, binary, "
                             "timestamp[ms], date32, ...)") from None
    return pa.schema(out)


class Decoder:
    def __init__(self, fmt: str, schema: pa.Schema | None, name: str = "") -> None:
        self.format = fmt
        self.schema = schema  # None until inferred from the first batch
        self.inferred = schema is None  # then it grows with new fields; a declared one not
        self.name = name  # the topic, for the log line

    def _evolve(self, seen: pa.Schema) -> None:
        """Append the fields of ``seen`` the schema lacks (an inferred schema only)."""
        assert self.schema is not None
        known = set(self.schema.names)
        new = [f for f in _settled(seen) if f.name not in known]
        if not new:
            return
        self.schema = pa.schema(list(self.schema) + new)
        log.warning("parquet: %s: new value field(s) %s: added to the schema; files written "
                    "from now on have the column(s), earlier rows have them null",
                    self.name or "values", ", ".join(f"{f.name} ({f.type})" for f in new))

    def table(self, records: Sequence[Any]) -> tuple[pa.Table, list[tuple[Any, str]]]:
        """(table of the records that decode, [(record, reason), ...] of the others)."""
        topics, partitions, offsets, timestamps, _types, keys, values, headers = zip(*records)
        if self.format == "raw":
            good, value_columns, rejected = None, [pa.array(values, pa.binary())], []
            value_fields = [pa.field("value", pa.binary())]
        else:
            values = [v if v is not None else _EMPTY for v in values]
            good, value_table, rejected = self._decode(records, values)
            value_columns, value_fields = value_table.columns, list(value_table.schema)
        if good is not None:
            keep = good
            topics, partitions, offsets, timestamps, keys, headers = (
                [col[i] for i in keep] for col in (topics, partitions, offsets, timestamps,
                                                   keys, headers)
            )
        n = len(offsets)
        columns = [
            pa.array(topics, pa.string()) if n else pa.array([], pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.int64()).cast(KAFKA_FIELDS[3].type),
            pa.array(keys, pa.binary()),
            pa.array(headers, _HEADERS_TYPE) if any(headers) else
            pa.array([[]] * n, _HEADERS_TYPE),
        ]
        fields = list(KAFKA_FIELDS) + [
            f.with_name("value_" + f.name) if f.name in KAFKA_NAMES else f for f in value_fields
        ]
        return pa.Table.from_arrays(columns + list(value_columns), schema=pa.schema(fields)), \
            rejected

    def table_of_columns(self, batch: pa.RecordBatch) -> pa.Table | None:
        """``table`` for records already in Arrow (``RecordColumns.to_arrow()``): the Kafka
        columns are cast, not rebuilt, and JSON values go to Arrow's reader as one buffer
        joined in Arrow (no Python object per record).  None when a value does not decode
        this way (or the format is msgpack): the caller takes the per-record path, which
        finds the bad records."""
        values = batch.column("value")
        if self.format == "raw":
            value_columns, value_fields = [values], [pa.field("value", pa.binary())]
        elif self.format == "json":
            value_table = self._json_column(values)
            if value_table is None:
                return None
            value_columns, value_fields = value_table.columns, list(value_table.schema)
        else:
            return None
        columns = kafka_columns(batch, KAFKA_FIELDS[3].type)
        fields = list(KAFKA_FIELDS) + [
            f.with_name("value_" + f.name) if f.name in KAFKA_NAMES else f for f in value_fields
        ]
        return pa.Table.from_arrays(columns + list(value_columns), schema=pa.schema(fields))

    def _json_column(self, values: pa.Array) -> pa.Table | None:
        data = json_lines(values)
        if data is None:
            return None
        try:
            table = self._read_json(data)
        except pa.ArrowInvalid:
            return None
        return table if table.num_rows == len(values) else None

    # -- values --------------------------------------------------------------------------

    def _decode(self, records, values) -> tuple[list[int] | None, pa.Table, list]:
        if self.format == "json":
            table = self._json_batch(values)
            if table is not None:
                return None, table, []
            return self._one_by_one(records, values, self._json_one)
        try:
            return None, self._rows(self._msgpack_rows(values)), []
        except (ValueError, TypeError, pa.ArrowException, msgpack.UnpackException):
            return self._one_by_one(records, values, self._msgpack_one)

    def _json_batch(self, values: Sequence[bytes]) -> pa.Table | None:
        joined = b"\n".join(values)
        # One line per value, or the rows would not line up with the records.
        if joined.count(b"\n") != len(values) - 1 or b"\r" in joined:
            return None
        try:
            table = self._read_json(joined)
        except pa.ArrowInvalid:
            return None
        return table if table.num_rows == len(values) else None

    def _read_json(self, data: bytes) -> pa.Table:
        if self.schema is not None:
            # An inferred schema takes new fields (typed by Arrow), a declared one not.
            parse = pa_json.ParseOptions(
                explicit_schema=self.schema,
                unexpected_field_behavior="infer" if self.inferred else "ignore")
        else:
            parse = pa_json.ParseOptions()
        table = read_json_lines(data, parse)
        if self.schema is None:
            self.schema = _settled(table.schema)
        elif len(table.schema) > len(self.schema):
            self._evolve(table.schema)
        return _conform(table, self.schema)

    def _json_one(self, value: bytes) -> pa.Table:
        if b"\n" in value or b"\r" in value:
            # Arrow's reader is line-based: re-serialise a pretty-printed document first.
            value = json.dumps(json.loads(value), separators=(",", ":")).encode()
        table = self._read_json(value)
        if table.num_rows != 1:
            raise ValueError("not a JSON object")
        return table

    @staticmethod
    def _msgpack_rows(values):
        rows = [msgpack.unpackb(v) if v is not _EMPTY else {} for v in values]
        for row in rows:
            if not isinstance(row, dict):
                raise TypeError(f"not a msgpack map but {type(row).__name__}")
        return rows

    def _rows(self, rows: list[dict]) -> pa.Table:
        if self.schema is None:
            table = pa.Table.from_pylist(rows)
            self.schema = _settled(table.schema)
            return table.cast(self.schema)
        if self.inferred:
            known = set(self.schema.names)
            new = list(dict.fromkeys(k for row in rows for k in row if k not in known))
            if new:
                self._evolve(pa.Table.from_pylist(
                    [{k: row.get(k) for k in new} for row in rows]).schema)
        return pa.Table.from_pylist(rows, schema=self.schema)

    def _msgpack_one(self, value: bytes) -> pa.Table:
        return self._rows(self._msgpack_rows([value]))

    def _one_by_one(self, records, values, decode_one):
        good, tables, rejected = [], [], []
        for i, (record, value) in enumerate(zip(records, values)):
            try:
                tables.append(decode_one(value))
                good.append(i)
            except (ValueError, TypeError, pa.ArrowException, msgpack.UnpackException) as exc:
                reason = " ".join(str(exc).split())
                rejected.append((record, f"{self.format} value does not decode: {reason}"))
        if tables:  # the schema may have grown on the way: every table to the last one
            table = pa.concat_tables([_conform(t, self.schema) for t in tables])
        else:
            schema = self.schema or pa.schema([])
            table = schema.empty_table()
        return good, table, rejected


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in its order: a field the table lacks (added to
    the schema after it was decoded) is all null."""
    if table.schema.names == schema.names:
        return table.cast(schema)
    columns = [table.column(f.name).cast(f.type) if f.name in table.schema.names
               else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _settled(schema: pa.Schema) -> pa.Schema:
    """An inferred schema made fit for later batches: a field seen only as null becomes a
    string (Arrow would otherwise refuse every later non-null value of it)."""
    return pa.schema([
        f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in schema
    ])
