"""Records -> pyarrow.RecordBatch in the exact schema of Spark's Kafka source.

Spark checks Arrow batches against the declared schema type by type: timestamps must be
``timestamp[us, UTC]`` and INT columns int32, or the task fails with
DATA_SOURCE_RETURN_SCHEMA_MISMATCH.  Records fetched raw arrive in the client's column
buffers (databus.protocol.columns.ColumnBuffers, filled in C from the record batches): their
Arrow arrays (RecordColumns.to_arrow) are taken as they are, without a copy, and only the
columns Spark shapes differently are made here (the topic as a string, timestamps in us).
Records through the consumer (read_committed) arrive as column lists: one ``pa.array`` each.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from databus.protocol.columns import ColumnBuffers, RecordColumns

# Spark's Kafka source schema, as DDL (what DataSource.schema() returns) and as Arrow.
SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def schema_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (", " + HEADERS_DDL if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def record_batch(topic: str, partition: int, columns: Sequence[Sequence], types: Sequence[int],
                 include_headers: bool) -> pa.RecordBatch:
    """Records of one partition -> a RecordBatch in the Kafka source's schema.

    ``columns`` are the consumer's column lists (offsets, timestamps ms, keys, values,
    headers); ``types`` the timestamp type of each record (0 CreateTime, 1 LogAppendTime)."""
    n = len(types)
    offsets, stamps, keys, values, headers = columns
    ms = pa.array(stamps, pa.int64())
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        # ms -> us: multiply as int64, then reinterpret (a cast from timestamp[ms] would too,
        # but checks each value for overflow)
        pc.multiply(ms, 1000).view(TIMESTAMP_TYPE),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array(headers, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def from_buffers(topic: str, partition: int, buffers: ColumnBuffers, types: bytes,
                 include_headers: bool) -> pa.RecordBatch:
    """The records in ``buffers`` -> a RecordBatch in the Kafka source's schema, over the
    buffers' memory; ``types``: the timestamp type of each record as int32 bytes."""
    client = RecordColumns(topic, partition, buffers).to_arrow()
    n = client.num_rows
    columns = [
        client.column("key"),
        client.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        client.column("partition"),
        client.column("offset"),
        pc.multiply(client.column("timestamp"), 1000).view(TIMESTAMP_TYPE),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types)]),
    ]
    if include_headers:
        columns.append(client.column("headers"))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def with_value_column(batch: pa.RecordBatch, value: pa.Array) -> pa.RecordBatch:
    """``batch`` with its binary ``value`` replaced by a typed one (valueFormat)."""
    i = batch.schema.get_field_index("value")
    return pa.RecordBatch.from_arrays(
        [value if j == i else column for j, column in enumerate(batch.columns)],
        names=batch.schema.names)
