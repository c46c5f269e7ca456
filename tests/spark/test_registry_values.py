"""Typed columns from the schema registry: the source's ``valueFormat`` (values in
Confluent's wire format, written here by confluent-kafka's AvroSerializer) and
``databus spark export --format registry`` / ``--subject`` (columns from the subject, no
sampling)."""

from __future__ import annotations

import datetime
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from databus.cli import main

from .kafka_data import create_topic, produce

UTC = datetime.UTC
ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
]}
ORDER_V2 = dict(ORDER, fields=[*ORDER["fields"],
                               {"name": "coupon", "type": ["null", "string"], "default": None}])
AT = datetime.datetime(2025, 11, 25, 12, tzinfo=UTC)


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory):
    from databus.broker.process import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("spark-registry"),
                       {"schema.registry.listen": "127.0.0.1:0"}) as running:
        yield running


def _write(broker, topic: str) -> list[dict]:
    """Records with version 1, then version 2 (adds an optional field), then one value not
    in the wire format; returns what was sent."""
    from decimal import Decimal

    create_topic(broker.bootstrap, topic, 1)
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    sent = [{"id": i, "amount": Decimal(f"{i}.25"), "at": AT + datetime.timedelta(days=i),
             "status": "NEW" if i % 2 else "PAID", "tags": [f"t{i}"] * (i % 3)}
            for i in range(6)]
    v1, v2 = AvroSerializer(client, json.dumps(ORDER)), AvroSerializer(client, json.dumps(ORDER_V2))
    values = [v1(v, ctx) for v in sent[:3]]
    sent[3:] = [{**v, "coupon": f"C{v['id']}"} for v in sent[3:]]
    values += [v2(v, ctx) for v in sent[3:]]
    produce(broker.bootstrap, topic, [{"value": v} for v in values] + [{"value": b"{}"}])
    return sent


def test_value_format_avro_gives_the_subjects_columns(spark, registry_broker):
    sent = _write(registry_broker, "spark-typed")
    frame = (spark.read.format("databus")
             .option("kafka.bootstrap.servers", registry_broker.bootstrap)
             .option("subscribe", "spark-typed").option("valueFormat", "avro")
             .option("schema.registry.url", registry_broker.schema_registry_url).load())
    assert frame.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,amount:decimal(9,2),at:timestamp,status:string,tags:array<string>,"
        "coupon:string>")
    rows = frame.orderBy("offset").select("offset", "value").collect()
    got = [row["value"].asDict() if row["value"] is not None else None for row in rows]
    for value in got[:-1]:  # Spark hands timestamps back naive, in the local zone
        value["at"] = value["at"].astimezone(UTC)
    want = [{**v, "coupon": v.get("coupon")} for v in sent]
    assert got[:-1] == want
    assert got[-1] is None and rows[-1]["offset"] == 6  # not in the wire format: kept, null


def test_value_format_needs_a_subject_and_a_known_format(spark, registry_broker):
    reader = (spark.read.format("databus")
              .option("kafka.bootstrap.servers", registry_broker.bootstrap)
              .option("subscribePattern", "spark-.*").option("valueFormat", "avro"))
    with pytest.raises(Exception, match="needs 'valueSubject'"):
        reader.load()
    with pytest.raises(Exception, match="subject 'nothing-here-value'.*40401"):
        (spark.read.format("databus")
         .option("kafka.bootstrap.servers", registry_broker.bootstrap)
         .option("subscribe", "nothing-here").option("valueFormat", "avro")
         .option("schema.registry.url", registry_broker.schema_registry_url).load())


def test_export_format_registry_takes_the_topics_subject(spark, registry_broker, tmp_path,
                                                        capsys):
    sent = _write(registry_broker, "spark-export-typed")
    out = tmp_path / "out"
    assert main(["spark", "export", "--bootstrap-server", registry_broker.bootstrap,
                 "--topic", "spark-export-typed", "--format", "registry",
                 "--schema-registry", registry_broker.schema_registry_url,
                 "--path", str(out), "--checkpoint", str(tmp_path / "cp"),
                 "--event-time", "at", "--available-now"]) == 0
    assert "columns from subject spark-export-typed-value version 2" in capsys.readouterr().out
    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r["id"], r["status"], r["coupon"], r["date"]) for r in rows
                 if r["id"] is not None)
    assert got == [(v["id"], v["status"], v.get("coupon"), v["at"].date()) for v in sent]
    # the value not in the wire format: a row of nulls with its place
    assert [r["_offset"] for r in rows if r["id"] is None] == [6]


def _shipment_class():
    """shop.Shipment built with descriptor_pb2 (what protoc generates): a uint32, an enum, a
    repeated nested message, a map and a proto3 optional."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="shop/shipment.proto", package="shop",
                                              syntax="proto3")
    message = file.message_type.add(name="Shipment")
    message.field.add(name="id", number=1, type=f.TYPE_UINT32, label=1)
    state = message.enum_type.add(name="State")
    state.value.add(name="PACKED", number=0)
    state.value.add(name="SENT", number=1)
    message.field.add(name="state", number=2, type=f.TYPE_ENUM,
                      type_name=".shop.Shipment.State", label=1)
    box = message.nested_type.add(name="Box")
    box.field.add(name="grams", number=1, type=f.TYPE_INT64, label=1)
    message.field.add(name="boxes", number=3, type=f.TYPE_MESSAGE,
                      type_name=".shop.Shipment.Box", label=3)
    entry = message.nested_type.add(name="LabelsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=1)
    entry.field.add(name="value", number=2, type=f.TYPE_STRING, label=1)
    message.field.add(name="labels", number=4, type=f.TYPE_MESSAGE,
                      type_name=".shop.Shipment.LabelsEntry", label=3)
    message.oneof_decl.add(name="_note")
    message.field.add(name="note", number=5, type=f.TYPE_STRING, label=1, oneof_index=0,
                      proto3_optional=True)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("shop.Shipment"))


def test_value_format_protobuf_gives_the_messages_columns(spark, registry_broker):
    """Values written by confluent-kafka's ProtobufSerializer (a base64 descriptor in the
    registry) read as the message's typed columns; a value not in the wire format is null."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    topic = "spark-proto"
    create_topic(registry_broker.bootstrap, topic, 1)
    shipment = _shipment_class()
    serializer = ProtobufSerializer(shipment, SchemaRegistryClient(
        {"url": registry_broker.schema_registry_url}), {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    sent = [shipment(id=2**32 - 1, state=1, boxes=[{"grams": 10}, {"grams": 2**40}],
                     labels={"fragile": "yes"}, note="ring twice"),
            shipment(id=7)]
    produce(registry_broker.bootstrap, topic,
            [{"value": serializer(v, ctx)} for v in sent] + [{"value": b"\x00junk"}])
    frame = (spark.read.format("databus")
             .option("kafka.bootstrap.servers", registry_broker.bootstrap)
             .option("subscribe", topic).option("valueFormat", "protobuf")
             .option("schema.registry.url", registry_broker.schema_registry_url).load())
    assert frame.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,state:string,boxes:array<struct<grams:bigint>>,"
        "labels:map<string,string>,note:string>")
    rows = frame.orderBy("offset").select("value").collect()
    got = [row["value"].asDict(recursive=True) if row["value"] is not None else None
           for row in rows]
    assert got == [{"id": 2**32 - 1, "state": "SENT", "boxes": [{"grams": 10},
                                                                {"grams": 2**40}],
                    "labels": {"fragile": "yes"}, "note": "ring twice"},
                   {"id": 7, "state": "PACKED", "boxes": [], "labels": {}, "note": None},
                   None]
