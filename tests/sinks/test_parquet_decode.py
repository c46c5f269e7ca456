"""Records to Arrow tables (databus_plugins.parquet.decode): the Kafka columns, values decoded
a batch at a time, declared or inferred schemas, and the records that do not decode."""

from __future__ import annotations

import json

import msgpack
import pyarrow as pa
import pytest
from databus_plugins.parquet.decode import Decoder, declared_schema

from databus.client import ConsumerRecord


def records(values, topic="t", partition=1, headers=()):
    return [ConsumerRecord(topic, partition, 10 + i, 1_700_000_000_000 + i, 0,
                           b"k%d" % i, v, tuple(headers)) for i, v in enumerate(values)]


def test_json_batch_with_inferred_schema_and_kafka_columns():
    decoder = Decoder("json", None)
    batch = records([json.dumps({"id": i, "name": f"n{i}", "score": i / 2}).encode()
                     for i in range(3)], headers=[("h", b"v")])
    table, rejected = decoder.table(batch)
    assert rejected == []
    assert table.schema.names == ["topic", "partition", "offset", "timestamp", "key", "headers",
                                  "id", "name", "score"]
    assert table.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    assert table.schema.field("partition").type == pa.int32()
    assert table.column("id").to_pylist() == [0, 1, 2]
    assert table.column("offset").to_pylist() == [10, 11, 12]
    assert table.column("key").to_pylist() == [b"k0", b"k1", b"k2"]
    assert table.column("headers").to_pylist()[0] == [{"key": "h", "value": b"v"}]
    assert table.column("timestamp").cast(pa.int64()).to_pylist()[0] == 1_700_000_000_000
    # The schema is fixed by the first batch: a later new field is ignored, a missing one null.
    table, _ = decoder.table(records([b'{"id": 7, "extra": 1}']))
    assert table.schema.names[6:] == ["id", "name", "score"]
    assert table.column("name").to_pylist() == [None]


def test_malformed_records_are_rejected_with_the_reason_and_the_rest_kept():
    decoder = Decoder("json", declared_schema({"id": "int64", "name": "string"}))
    batch = records([b'{"id": 1, "name": "a"}', b"{not json", b'{"id": "x"}', b"[1, 2]",
                     b'{\n  "id": 5,\n  "name": "pretty"\n}', b"", b'{"id": 6}'])
    table, rejected = decoder.table(batch)
    assert table.column("id").to_pylist() == [1, 5, 6]
    assert table.column("offset").to_pylist() == [10, 14, 16]
    assert table.column("name").to_pylist() == ["a", "pretty", None]
    assert [r.offset for r, _ in rejected] == [11, 12, 13, 15]
    assert all(reason.startswith("json value does not decode: ") for _, reason in rejected)


def test_a_tombstone_is_a_row_of_nulls_and_colliding_names_are_prefixed():
    table, rejected = Decoder("json", None).table(records([b'{"offset": 3, "a": 1}', None]))
    assert rejected == []
    assert "value_offset" in table.schema.names
    assert table.column("value_offset").to_pylist() == [3, None]
    assert table.column("offset").to_pylist() == [10, 11]


def test_msgpack_and_raw():
    values = [msgpack.packb({"id": i, "blob": b"\x00\x01"}) for i in range(2)]
    table, rejected = Decoder("msgpack", None).table(records([*values, b"\xc1"]))
    assert table.column("id").to_pylist() == [0, 1]
    assert table.column("blob").type == pa.binary()
    assert [r.offset for r, _ in rejected] == [12]
    table, rejected = Decoder("raw", None).table(records([b"\xff\x00", None]))
    assert table.column("value").to_pylist() == [b"\xff\x00", None] and rejected == []


def test_unknown_declared_type_is_named():
    with pytest.raises(ValueError, match="schema field 'a': unknown type 'integer'"):
        declared_schema({"a": "integer"})
