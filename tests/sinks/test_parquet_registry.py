"""The parquet sink with ``schema.registry.url``: ``databus sinks`` against a real broker
serving the registry, records produced by confluent-kafka's AvroSerializer, the export read
back with pyarrow.  Columns come from ``{topic}-value``; a new optional field in a new
version becomes a column (earlier files read it as null); an incompatible version stops the
sink with a named error and commits nothing past it."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

pytest.importorskip("confluent_kafka.schema_registry.avro",
                    reason="needs confluent-kafka[schemaregistry,avro]")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from tests.helpers.broker import BrokerProcess  # noqa: E402
from tests.schemas.conftest import call  # noqa: E402

from .harness import (  # noqa: E402
    ORDER_PROTO,
    Service,
    parquet_sink,
    pb_order,
    read_export,
    register,
    sinks_config,
    wait_for,
)


def order_schema(*extra: dict, item_type="string") -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "item", "type": item_type},
        {"name": "price", "type": ["null", "double"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        *extra]})


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    options = {"num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
               "schema.registry.listen": "127.0.0.1:0"}
    with BrokerProcess(tmp_path_factory.mktemp("broker"), options=options) as running:
        yield running


def produce(broker, topic: str, schema: str, values: list[dict], raw: list[bytes] = ()):
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    serialize = AvroSerializer(client, schema)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, serialize(value, SerializationContext(topic, MessageField.VALUE)))
    for value in raw:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def committed(broker, group: str, topic: str) -> int | None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset if tp.offset >= 0 else None
    finally:
        consumer.close()


def start_sink(broker, tmp_path, topic: str) -> Service:
    config = sinks_config(broker, {"export": parquet_sink(
        topic, tmp_path / "out", **{"schema.registry.url": broker.schema_registry_url,
                                    "flush.size": 10, "rotate.schedule.interval.ms": 300,
                                    "partition.by": "none"})})
    return Service(tmp_path, "sinks", config).start()


def rows(tmp_path) -> int:
    table = read_export(tmp_path / "out")
    return 0 if table is None else table.num_rows


def test_columns_come_from_the_subject_and_follow_a_new_optional_field(broker, tmp_path):
    topic = "orders-typed"
    v1 = [{"order_id": i, "item": f"item-{i}", "price": None if i % 3 else i * 1.5,
           "at": 1_700_000_000_000 + i} for i in range(25)]
    produce(broker, topic, order_schema(), v1, raw=[b'{"order_id": 99}'])
    service = start_sink(broker, tmp_path, topic)
    try:
        wait_for(lambda: rows(tmp_path) == 25, "the first version's records", log=service.log)
        coupon = {"name": "coupon", "type": ["null", "string"], "default": None}
        v2 = [{**v, "order_id": 100 + i, "coupon": f"c{i}" if i % 2 else None}
              for i, v in enumerate(v1[:15])]
        produce(broker, topic, order_schema(coupon), v2)
        wait_for(lambda: rows(tmp_path) == 40, "the second version's records", log=service.log)
        log = service.log()
    finally:
        service.stop()
    table = read_export(tmp_path / "out").sort_by("offset")
    value_types = {f.name: f.type for f in table.schema
                   if f.name in ("order_id", "item", "price", "at", "coupon")}
    assert value_types == {"order_id": pa.int64(), "item": pa.string(), "price": pa.float64(),
                           "at": pa.timestamp("ms", tz="UTC"), "coupon": pa.string()}
    got = table.select(["order_id", "item", "price", "coupon"]).to_pylist()
    assert got == ([{**{k: v[k] for k in ("order_id", "item", "price")}, "coupon": None}
                    for v in v1]
                   + [{k: v[k] for k in ("order_id", "item", "price", "coupon")} for v in v2])
    # The record not in the wire format is dead-lettered with the reason, not exported.
    assert 25 not in table.column("offset").to_pylist()
    assert "coupon" in log and "new column" in log


def test_an_incompatible_version_stops_the_sink_and_commits_nothing_past_it(broker, tmp_path):
    topic = "orders-retyped"
    subject = f"{topic}-value"
    v1 = [{"order_id": i, "item": f"item-{i}", "price": 1.0, "at": 1_700_000_000_000}
          for i in range(20)]
    produce(broker, topic, order_schema(), v1)
    assert call(f"{broker.schema_registry_url}/config/{subject}", "PUT",
                {"compatibility": "NONE"}).status == 200
    service = start_sink(broker, tmp_path, topic)
    try:
        wait_for(lambda: rows(tmp_path) == 20, "the first version's records", log=service.log)
        wait_for(lambda: committed(broker, "databus-sink-export", topic) == 20,
                 "the first records' commit", log=service.log)
        retyped = [{**v, "item": i} for i, v in enumerate(v1[:5])]
        produce(broker, topic, order_schema(item_type="long"), retyped)
        wait_for(lambda: "IncompatibleSchemaError" in service.log(), "the named error",
                 log=service.log)
        assert "field item changed from string to int64" in service.log()
        assert committed(broker, "databus-sink-export", topic) == 20
        assert rows(tmp_path) == 20
    finally:
        service.stop()


def test_json_schema_subjects_give_typed_columns_and_foreign_fields_are_dead_lettered(
        broker, tmp_path):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    topic = "orders-json"
    schema = json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order",
        "type": "object", "required": ["order_id"],
        "properties": {"order_id": {"type": "integer"}, "item": {"type": "string"},
                       "tags": {"type": "array", "items": {"type": "string"}}}})
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    serialize = JSONSerializer(schema, client)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    values = [{"order_id": i, "item": f"item-{i}", "tags": ["a"] * (i % 3)} for i in range(12)]
    values.append({"order_id": 12, "surprise": True})  # valid JSON Schema, not a column
    for value in values:
        producer.produce(topic, serialize(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    service = start_sink(broker, tmp_path, topic)
    try:
        wait_for(lambda: rows(tmp_path) == 12, "the records", log=service.log)
        wait_for(lambda: committed(broker, "databus-sink-export", topic) == 13,
                 "the foreign field's record handled", log=service.log)
    finally:
        service.stop()
    table = read_export(tmp_path / "out").sort_by("offset")
    assert {f.name: f.type for f in table.schema if f.name in ("order_id", "item", "tags")} == {
        "order_id": pa.int64(), "item": pa.string(), "tags": pa.list_(pa.string())}
    assert table.select(["order_id", "item", "tags"]).to_pylist() == values[:12]
    assert any(topic in reason and "field(s) surprise not in subject orders-json-value" in reason
               for reason in dead_letter_reasons(broker))


def test_protobuf_subjects_give_typed_columns(broker, tmp_path):
    """A subject of .proto text (the columns shared with the iceberg sink: enums as names,
    nested messages as structs, repeated fields as lists); records encoded by hand in
    Confluent's Protobuf wire format (confluent-kafka's Python serializer registers a binary
    descriptor this registry does not take)."""
    topic = "orders-proto"
    schema_id = register(broker, f"{topic}-value", ORDER_PROTO % "", "PROTOBUF")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, pb_order(schema_id, i, f"item-{i}", tags=["t"] * (i % 2),
                                         color=i % 2, line=i or None))
    assert producer.flush(30) == 0
    service = start_sink(broker, tmp_path, topic)
    try:
        wait_for(lambda: rows(tmp_path) == 10, "the records", log=service.log)
    finally:
        service.stop()
    table = read_export(tmp_path / "out").sort_by("offset")
    assert {f.name: f.type for f in table.schema
            if f.name in ("id", "item", "tags", "color", "line")} == {
        "id": pa.int64(), "item": pa.string(), "tags": pa.list_(pa.string()),
        "color": pa.string(), "line": pa.struct([("n", pa.int32())])}
    assert table.select(["id", "tags", "color", "line"]).to_pylist()[:2] == [
        {"id": 0, "tags": [], "color": "RED", "line": None},
        {"id": 1, "tags": ["t"], "color": "BLUE", "line": {"n": 1}}]


def dead_letter_reasons(broker) -> list[str]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dlq-reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["export.dlq"])
    out = []
    try:
        for _ in range(50):
            message = consumer.poll(0.2)
            if message is None or message.error():
                if out:
                    break
                continue
            headers = dict(message.headers() or ())
            out.append(headers["__connect.errors.topic"].decode() + ": " +
                       headers["__connect.errors.exception.message"].decode())
    finally:
        consumer.close()
    return out


def test_a_registry_url_with_format_or_schema_is_refused():
    from databus_plugins.parquet import layout

    with pytest.raises(ValueError, match="format does not apply with schema.registry.url"):
        layout.parse_options({"path": "/x", "format": "json",
                              "schema.registry.url": "http://127.0.0.1:8081"})
    with pytest.raises(ValueError, match="schema.registry.url must be an http"):
        layout.parse_options({"path": "/x", "schema.registry.url": "127.0.0.1:8081"})


def test_the_files_broker_registry_is_the_default_for_topics_with_a_subject(broker, tmp_path):
    """No schema.registry.url: the broker section's schema.registry.listen is used for a topic
    whose subject exists; a topic without one is read as plain JSON (the format default)."""
    typed, plain = "orders-defaulted", "clicks-plain"
    values = [{"order_id": i, "item": f"item-{i}", "price": 2.5, "at": 1_700_000_000_000}
              for i in range(10)]
    produce(broker, typed, order_schema(), values)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(plain, json.dumps({"click": i}).encode())
    assert producer.flush(30) == 0
    sink = {"plugin": "parquet", "topics": [typed, plain],
            "config": {"path": str(tmp_path / "out"), "flush.size": 10,
                       "partition.by": "none"}}
    config = sinks_config(broker, {"defaulted": sink})
    config["broker"] = {"options": {
        "schema.registry.listen": broker.schema_registry_url.removeprefix("http://")}}
    service = Service(tmp_path, "sinks", config).start()
    try:
        wait_for(lambda: rows(tmp_path) == 20, "both topics' records", log=service.log)
    finally:
        service.stop()
    table = read_export(tmp_path / "out").sort_by([("topic", "ascending"),
                                                    ("offset", "ascending")])
    got = table.select(["topic", "order_id", "item", "click"]).to_pylist()
    assert got == ([{"topic": plain, "order_id": None, "item": None, "click": i}
                    for i in range(10)]
                   + [{"topic": typed, "order_id": i, "item": f"item-{i}", "click": None}
                      for i in range(10)])
