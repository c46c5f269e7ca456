"""confluent-kafka's own SchemaRegistryClient and serializers, unchanged, against a
``databus broker`` serving the registry: records produced with AvroSerializer /
JSONSerializer come back through AvroDeserializer / JSONDeserializer."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("confluent_kafka.schema_registry.avro",
                    reason="needs confluent-kafka[schemaregistry,avro,json]")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.json_schema import (  # noqa: E402
    JSONDeserializer,
    JSONSerializer,
)
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

ORDER_AVRO = json.dumps({
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [{"name": "order_id", "type": "long"},
               {"name": "item", "type": "string"},
               {"name": "price", "type": ["null", "double"], "default": None}]})
ORDER_JSON = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {"order_id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["order_id", "item"]})


def _round_trip(broker, topic: str, serializer, deserializer, values: list) -> list:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, value=serializer(
            value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out = []
    try:
        for _ in range(300):
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            out.append(deserializer(message.value(),
                                    SerializationContext(topic, MessageField.VALUE)))
            if len(out) == len(values):
                break
    finally:
        consumer.close()
    return out


def test_avro_round_trip(registry):
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    values = [{"order_id": i, "item": f"item-{i}", "price": None if i % 2 else i * 1.5}
              for i in range(20)]
    got = _round_trip(registry, "serdes-avro", AvroSerializer(client, ORDER_AVRO),
                      AvroDeserializer(client), values)
    assert got == values
    latest = client.get_latest_version("serdes-avro-value")
    assert latest.version == 1 and json.loads(latest.schema.schema_str)["name"] == "Order"


def test_avro_evolution_old_records_read_with_new_schema(registry):
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    v2 = json.loads(ORDER_AVRO)
    v2["fields"].append({"name": "coupon", "type": "string", "default": "none"})
    old = _round_trip(registry, "serdes-evolve", AvroSerializer(client, ORDER_AVRO),
                      AvroDeserializer(client), [{"order_id": 1, "item": "a", "price": 2.0}])
    new_serializer = AvroSerializer(client, json.dumps(v2))
    reader = AvroDeserializer(client, json.dumps(v2))
    ctx = SerializationContext("serdes-evolve", MessageField.VALUE)
    data = new_serializer({"order_id": 2, "item": "b", "price": None, "coupon": "x"}, ctx)
    assert reader(data, ctx)["coupon"] == "x"
    old_bytes = AvroSerializer(client, ORDER_AVRO)(old[0], ctx)
    assert reader(old_bytes, ctx)["coupon"] == "none"  # the default fills the old record
    assert [v.version for v in [client.get_latest_version("serdes-evolve-value")]] == [2]


def test_json_schema_round_trip(registry):
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    values = [{"order_id": i, "item": f"item-{i}"} for i in range(10)]
    got = _round_trip(registry, "serdes-json", JSONSerializer(ORDER_JSON, client),
                      JSONDeserializer(ORDER_JSON, schema_registry_client=client), values)
    assert got == values
    latest = client.get_latest_version("serdes-json-value")
    assert latest.schema.schema_type == "JSON"


def test_client_admin_calls(registry):
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    schema = Schema(json.dumps({"type": "record", "name": "Adm",
                                "fields": [{"name": "a", "type": "int"}]}), "AVRO")
    schema_id = client.register_schema("serdes-admin", schema)
    assert client.get_schema(schema_id).schema_str == client.get_latest_version(
        "serdes-admin").schema.schema_str
    assert client.lookup_schema("serdes-admin", schema).schema_id == schema_id
    assert client.test_compatibility("serdes-admin", schema) is True
    client.set_compatibility("serdes-admin", "NONE")
    assert client.get_compatibility("serdes-admin") == "NONE"
    assert client.delete_subject("serdes-admin") == [1]
    fresh = SchemaRegistryClient({"url": registry.schema_registry_url})  # nothing cached
    with pytest.raises(SchemaRegistryError) as error:
        fresh.get_latest_version("serdes-admin")
    assert error.value.error_code == 40401


def _order_message_class(package: str, fields):
    """A protobuf message class built from a FileDescriptorProto (what protoc generates,
    without protoc): ``fields`` as (name, number, FieldDescriptorProto type)."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    file = descriptor_pb2.FileDescriptorProto(name=f"{package}/order.proto", package=package,
                                              syntax="proto3")
    message = file.message_type.add(name="Order")
    for name, number, kind in fields:
        message.field.add(name=name, number=number, type=kind, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


def test_protobuf_round_trip_with_serialized_descriptors(registry):
    """ProtobufSerializer registers a base64 FileDescriptorProto; the deserializer fetches
    it back with ?format=serialized and reads the records."""
    from confluent_kafka.schema_registry.protobuf import (
        ProtobufDeserializer,
        ProtobufSerializer,
    )
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

    order = _order_message_class("shop", [("order_id", 1, F.TYPE_INT64),
                                          ("item", 2, F.TYPE_STRING)])
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    values = [order(order_id=i, item=f"item-{i}") for i in range(10)]
    got = _round_trip(registry, "serdes-proto",
                      ProtobufSerializer(order, client, {"use.deprecated.format": False}),
                      ProtobufDeserializer(order, {"use.deprecated.format": False}), values)
    assert got == values
    latest = client.get_latest_version("serdes-proto-value")
    assert latest.schema.schema_type == "PROTOBUF" and latest.version == 1
    # compatibility reads the descriptor: retyping a field to a kind of another wire group
    # is refused (409), adding one is not
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    def descriptor_text(fields) -> str:
        import base64

        cls = _order_message_class("shop", fields)
        return base64.b64encode(cls.DESCRIPTOR.file.serialized_pb).decode()
    added = descriptor_text([("order_id", 1, F.TYPE_INT64), ("item", 2, F.TYPE_STRING),
                             ("note", 3, F.TYPE_STRING)])
    assert client.register_schema("serdes-proto-value", Schema(added, "PROTOBUF")) > 0
    retyped = descriptor_text([("order_id", 1, F.TYPE_STRING), ("item", 2, F.TYPE_STRING)])
    with pytest.raises(SchemaRegistryError) as error:
        client.register_schema("serdes-proto-value", Schema(retyped, "PROTOBUF"))
    assert error.value.http_status_code == 409
    assert "FIELD_SCALAR_KIND_CHANGED" in str(error.value)
