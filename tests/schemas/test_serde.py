"""The typed streams' pure core (databus/schemas/serde.py): what each refusal says, how an
app's bytes are read, and that the bytes it writes are the ones confluent-kafka's own
serializers write for the same schema and id."""

from __future__ import annotations

import json

import msgpack
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from databus.schemas.serde import Codec, RecordError, header, parse_input

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "long"},
    {"name": "item", "type": "string"},
    {"name": "price", "type": ["null", "double"], "default": None},
    {"name": "status", "type": {"type": "enum", "name": "Status",
                                "symbols": ["NEW", "PAID"]}, "default": "NEW"},
    {"name": "lines", "type": {"type": "array", "items": {
        "type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"},
                                                      {"name": "qty", "type": "int"}]}},
     "default": []},
    {"name": "more", "type": {"type": "array", "items": "Line"}, "default": []},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}, "default": "\u0000\u0000\u0000\u0000"},
]}
GOOD = {"order_id": 1, "item": "pen"}


@pytest.mark.parametrize(("value", "path", "rule", "detail"), [
    ({"order_id": "1", "item": "pen"}, "$.order_id", "type", "expected long, got str '1'"),
    ({"item": "pen"}, "$.order_id", "required", "missing"),
    ({**GOOD, "colour": "red"}, "$.colour", "unknown field", "not a field of record shop.Order"),
    ({**GOOD, "status": "LOST"}, "$.status", "enum", "is not one of ['NEW', 'PAID']"),
    ({**GOOD, "order_id": 2**63}, "$.order_id", "range", "does not fit Avro's long"),
    ({**GOOD, "lines": [{"sku": "a", "qty": 1}, {"sku": "b"}]}, "$.lines[1].qty", "required",
     "missing"),
    ({**GOOD, "more": [{"sku": "a", "qty": 2**31}]}, "$.more[0].qty", "range",
     "does not fit Avro's int"),
    ({**GOOD, "price": "cheap"}, "$.price", "type", "expected union [null, double]"),
    ({**GOOD, "digest": b"abc"}, "$.digest", "fixed size", "expected 4 bytes"),
    ([1, 2], "$", "type", "expected record shop.Order"),
])
def test_avro_refusals_name_the_field_and_the_rule(value, path, rule, detail):
    with pytest.raises(RecordError) as info:
        Codec(1, "AVRO", json.dumps(ORDER)).encode(value)
    assert (info.value.path, info.value.rule) == (path, rule)
    assert detail in info.value.detail


def test_json_schema_refusals_name_the_keyword():
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}},
              "required": ["name"]}
    codec = Codec(2, "JSON", json.dumps(schema))
    with pytest.raises(RecordError) as info:
        codec.encode({"name": "long name"})
    assert (info.value.path, info.value.rule) == ("$.name", "maxLength")
    with pytest.raises(RecordError, match="not representable as JSON"):
        Codec(3, "JSON", "{}").encode({"raw": b"\x00"})
    assert codec.decode(codec.encode({"name": "ab"})) == {"name": "ab"}


def test_app_input_msgpack_or_json():
    assert parse_input(msgpack.packb({"a": [1, 2]})) == {"a": [1, 2]}
    assert parse_input(msgpack.packb([1])) == [1]
    assert parse_input(b' {"a": 1}') == {"a": 1}
    assert parse_input(msgpack.packb("text"), "msgpack") == "text"
    for data, how, rule in ((b"\x81\xc1", "auto", "msgpack"), (b"{", "auto", "json"),
                            (None, "auto", "type")):
        with pytest.raises(RecordError) as info:
            parse_input(data, how)
        assert info.value.rule == rule
    with pytest.raises(ValueError, match="wire format"):
        header(b"{}")


def test_bytes_are_confluent_serializers_bytes(registry):
    """Same schema, same id: our encoding is byte for byte what AvroSerializer and
    JSONSerializer write."""
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    ctx = SerializationContext("serde-same", MessageField.VALUE)
    value = {**GOOD, "price": 1.5, "lines": [{"sku": "x", "qty": 3}], "digest": b"abcd"}
    theirs = AvroSerializer(client, json.dumps(ORDER))(value, ctx)
    ours = Codec(header(theirs), "AVRO", json.dumps(ORDER)).encode(value)
    assert ours == theirs
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    ctx = SerializationContext("serde-same-json", MessageField.VALUE)
    theirs = JSONSerializer(json.dumps(schema), client)({"n": 5}, ctx)
    assert Codec(header(theirs), "JSON", json.dumps(schema)).encode({"n": 5}) == theirs
