"""Arrow from a columnar batch, for the sinks that write Arrow (the parquet and iceberg
plugins both import it: one home): the Kafka columns of a ``RecordColumns.to_arrow()`` batch
cast to a sink's types, and a batch's values joined in Arrow into the newline-separated
buffer Arrow's JSON reader takes — no Python object per record on either way.

Needs pyarrow, so only those plugins import it.
"""

from __future__ import annotations

import io
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

EMPTY_JSON = b"{}"  # a record without a value (a tombstone): a row of nulls


def kafka_columns(batch: pa.RecordBatch, timestamp: pa.DataType) -> list[pa.Array]:
    """topic (string), partition, offset, timestamp (as ``timestamp``, a pyarrow timestamp
    type with tz UTC), key, headers: cast, not rebuilt."""
    ts = batch.column("timestamp").cast(pa.timestamp("ms", tz="UTC"))
    if ts.type != timestamp:
        ts = ts.cast(timestamp)
    return [
        batch.column("topic").cast(pa.string()),
        batch.column("partition"),
        batch.column("offset"),
        ts,
        batch.column("key"),
        batch.column("headers"),
    ]


def json_lines(values: pa.Array) -> bytes | None:
    """The values (a binary column; nulls as ``{}``) as one buffer, a line each; None when
    a value spans lines (the rows would not line up with the records)."""
    n = len(values)
    if not n:
        return None
    lines = pc.binary_join_element_wise(
        pc.fill_null(values, EMPTY_JSON), pa.scalar(b"\n", pa.binary()),
        pa.scalar(b"", pa.binary()))
    _, ends, text = lines.buffers()
    start = struct.unpack_from("<i", ends, lines.offset * 4)[0]
    end = struct.unpack_from("<i", ends, (lines.offset + n) * 4)[0]
    data = memoryview(text)[start:end - 1].tobytes()  # without the last "\n"
    if data.count(b"\n") != n - 1 or b"\r" in data:
        return None
    return data


def read_json_lines(data: bytes, parse: pa_json.ParseOptions | None = None) -> pa.Table:
    """Arrow's JSON reader over ``data`` in one block (twice as fast as its 1 MiB default
    here) on the calling thread (the sinks run it in their worker thread already)."""
    read = pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1)
    return pa_json.read_json(io.BytesIO(data), read_options=read,
                             parse_options=parse or pa_json.ParseOptions())
