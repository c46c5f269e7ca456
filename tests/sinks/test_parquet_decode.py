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
    # An inferred schema grows: a later new field is appended, a missing one null.
    table, _ = decoder.table(records([b'{"id": 7, "extra": 1}']))
    assert table.schema.names[6:] == ["id", "name", "score", "extra"]
    assert table.column("name").to_pylist() == [None]
    assert table.column("extra").to_pylist() == [1]
    # A declared schema is the columns: a field it lacks is ignored.
    declared = Decoder("json", declared_schema({"id": "int64"}))
    table, _ = declared.table(records([b'{"id": 7, "extra": 1}']))
    assert table.schema.names[6:] == ["id"]


def test_an_inferred_schema_grows_in_every_path_and_logs_each_new_field_once(caplog):
    # One by one (a batch with a malformed record): tables decoded before the new field
    # get it null.
    decoder = Decoder("json", None, "orders")
    decoder.table(records([b'{"id": 1}']))
    table, rejected = decoder.table(records([b'{"id": 2}', b"{bad", b'{"id": 3, "order_id": "o3"}']))
    assert [r.offset for r, _ in rejected] == [11]
    assert table.column("order_id").to_pylist() == [None, "o3"]
    table, _ = decoder.table(records([b'{"id": 4, "order_id": "o4"}']))
    assert table.column("order_id").to_pylist() == ["o4"]
    assert [r.getMessage() for r in caplog.records if "new value field" in r.getMessage()] == [
        "parquet: orders: new value field(s) order_id (string): added to the schema; files "
        "written from now on have the column(s), earlier rows have them null"]
    # msgpack, a field first seen null then typed by a later value: a string, as at the start.
    decoder = Decoder("msgpack", None)
    decoder.table(records([msgpack.packb({"id": 1})]))
    table, _ = decoder.table(records([msgpack.packb({"id": 2, "n": None, "tag": "a"})]))
    assert table.schema.names[6:] == ["id", "n", "tag"]
    assert table.schema.field("n").type == pa.string()
    assert table.column("tag").to_pylist() == ["a"]


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
