"""Typed streams' Protobuf core (databus/schemas/protobuf_serde.py through serde.Codec): what
each refusal says, and that the bytes it writes are the ones confluent-kafka's
ProtobufSerializer writes (so its ProtobufDeserializer reads ours)."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from databus.schemas.serde import Codec, RecordError, header

PROTO = """
syntax = "proto3";
package shop;

message Order {
  int64 order_id = 1;
  string item = 2;
  optional double price = 3;
  enum Kind { PLAIN = 0; GIFT = 1; }
  Kind kind = 4;
  repeated Line lines = 5;
  map<string, int32> tags = 6;
  oneof pay { string card = 7; string cash = 8; }
  bytes note = 9;
}

message Line { string sku = 1; uint32 qty = 2; }
"""
GOOD = {"order_id": 1, "item": "pen"}


def _order_class():
    """shop.Order built field by field with descriptor_pb2 (what protoc generates), not from
    the .proto text: an independent reading of the same schema."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop",
                                              syntax="proto3")
    order = file.message_type.add(name="Order")
    order.field.add(name="order_id", number=1, type=f.TYPE_INT64, label=1)
    order.field.add(name="item", number=2, type=f.TYPE_STRING, label=1)
    order.field.add(name="price", number=3, type=f.TYPE_DOUBLE, label=1, oneof_index=1,
                    proto3_optional=True)
    kind = order.enum_type.add(name="Kind")
    kind.value.add(name="PLAIN", number=0)
    kind.value.add(name="GIFT", number=1)
    order.field.add(name="kind", number=4, type=f.TYPE_ENUM, type_name=".shop.Order.Kind",
                    label=1)
    order.field.add(name="lines", number=5, type=f.TYPE_MESSAGE, type_name=".shop.Line",
                    label=3)
    entry = order.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=1)
    entry.field.add(name="value", number=2, type=f.TYPE_INT32, label=1)
    order.field.add(name="tags", number=6, type=f.TYPE_MESSAGE,
                    type_name=".shop.Order.TagsEntry", label=3)
    order.oneof_decl.add(name="pay")
    order.oneof_decl.add(name="_price")
    order.field.add(name="card", number=7, type=f.TYPE_STRING, label=1, oneof_index=0)
    order.field.add(name="cash", number=8, type=f.TYPE_STRING, label=1, oneof_index=0)
    order.field.add(name="note", number=9, type=f.TYPE_BYTES, label=1)
    line = file.message_type.add(name="Line")
    line.field.add(name="sku", number=1, type=f.TYPE_STRING, label=1)
    line.field.add(name="qty", number=2, type=f.TYPE_UINT32, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


@pytest.mark.parametrize(("value", "path", "rule", "detail"), [
    ({"order_id": "x", "item": "pen"}, "$.order_id", "type", "expected int64, got str 'x'"),
    ({**GOOD, "colour": "red"}, "$.colour", "unknown field",
     "not a field of message shop.Order (it would be dropped)"),
    ({**GOOD, "kind": "LOST"}, "$.kind", "enum", "'LOST' is not one of ['PLAIN', 'GIFT']"),
    ({**GOOD, "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": -1}]}, "$.lines[1].qty",
     "range", "-1 does not fit Protobuf's uint32"),
    ({**GOOD, "tags": {"a": 2**31}}, "$.tags.a", "range", "does not fit Protobuf's int32"),
    ({**GOOD, "card": "visa", "cash": "eur"}, "$.cash", "oneof",
     "'card' of oneof 'pay' is set already"),
    ({**GOOD, "note": "not base64!"}, "$.note", "bytes", "base64"),
    ({**GOOD, "lines": {"sku": "a"}}, "$.lines", "type", "expected a list"),
    ([GOOD], "$", "type", "expected message shop.Order, got list"),
])
def test_protobuf_refusals_name_the_field_and_the_rule(value, path, rule, detail):
    with pytest.raises(RecordError) as info:
        Codec(3, "PROTOBUF", PROTO).encode(value)
    assert (info.value.path, info.value.rule) == (path, rule)
    assert detail in info.value.detail


def test_bytes_are_protobuf_serializers_bytes_and_read_back(registry):
    """Same message, same id: our encoding is byte for byte what ProtobufSerializer writes
    (it registers a base64 descriptor: the Codec reads that form as well as .proto text),
    ProtobufDeserializer reads it, and decode gives the dict back."""
    order = _order_class()
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    ctx = SerializationContext("serde-proto-same", MessageField.VALUE)
    value = {"order_id": 2**40, "item": "ink", "price": 0.0, "kind": "GIFT",
             "lines": [{"sku": "a", "qty": 3}], "tags": {"gift": 1}, "cash": "eur",
             "note": b"\x00\xff"}
    theirs = ProtobufSerializer(order, client, {"use.deprecated.format": False})(
        order(**{k: v for k, v in value.items()}), ctx)
    registered = client.get_schema(header(theirs)).schema_str
    for text in (PROTO, registered):
        codec = Codec(header(theirs), "PROTOBUF", text)
        assert codec.encode(value) == theirs
        # JSON text's forms: a 64-bit int as a string, bytes as base64, lowerCamelCase
        assert codec.encode({**value, "orderId": str(2**40), "order_id": None,
                             "note": "AP8="}) == theirs
        assert codec.decode(theirs) == {**value, "card": None}
    read = ProtobufDeserializer(order, {"use.deprecated.format": False})(theirs, ctx)
    assert read == order(**value)
    unset = Codec(9, "PROTOBUF", PROTO).decode(Codec(9, "PROTOBUF", PROTO).encode(GOOD))
    assert unset == {**GOOD, "price": None, "kind": "PLAIN", "lines": [], "tags": {},
                     "card": None, "cash": None, "note": b""}


def test_a_schema_typed_streams_cannot_take_is_named():
    with pytest.raises(ValueError, match="imports"):
        Codec(1, "PROTOBUF", 'syntax = "proto3";\nimport "google/protobuf/timestamp.proto";\n'
              "message A { google.protobuf.Timestamp at = 1; }")
    with pytest.raises(ValueError, match="does not parse"):
        Codec(1, "PROTOBUF", "message {")


def test_field_paths_of_the_first_message():
    """The index checks its value paths against these (nested messages looked into)."""
    from databus.schemas.serde import field_paths

    assert field_paths("PROTOBUF", PROTO) == {
        ("order_id",), ("item",), ("price",), ("kind",), ("lines",), ("lines", "sku"),
        ("lines", "qty"), ("tags",), ("card",), ("cash",), ("note",)}
