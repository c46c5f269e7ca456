"""Typed streams, as a user runs them: an app sends dicts (msgpack) or JSON text through a
``databus sidecar`` process; the sidecar checks each against the subject's latest version and
writes Confluent's wire format to a ``databus broker``, where confluent-kafka's own
AvroDeserializer / JSONDeserializer read it unchanged.  A value the schema does not take is
refused to the app, naming the field and the rule, and the rest of the batch lands."""

from __future__ import annotations

import json
import os

import pytest
import trio
import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from databus import Client, InvalidRecordError
from databus.config_base import ConfigError
from databus.sidecar.config import StreamSchema
from databus.sidecar.typed import TypedStream
from tests.helpers.processes import start_databus, stop, wait_for_log
from tests.helpers.wait import wait_for

from .conftest import call

ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "order_id", "type": "long"},
                    {"name": "item", "type": "string"},
                    {"name": "price", "type": ["null", "double"], "default": None}]}
EVENT = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
         "properties": {"kind": {"type": "string", "enum": ["click", "view"]},
                        "at": {"type": "integer"}},
         "required": ["kind", "at"]}
PARCEL = """syntax = "proto3";
package post;
message Parcel {
  string id = 1;
  uint32 grams = 2;
  enum Speed { STANDARD = 0; EXPRESS = 1; }
  Speed speed = 3;
}
"""


@pytest.fixture(scope="module")
def sidecar(registry, tmp_path_factory, sock_dir_module):
    """A ``databus sidecar`` process with two typed streams: ``orders`` registers its Avro
    file, ``events`` follows a JSON Schema subject registered beforehand."""
    root = tmp_path_factory.mktemp("typed")
    (root / "order.avsc").write_text(json.dumps(ORDER))
    (root / "parcel.proto").write_text(PARCEL)
    url = registry.schema_registry_url
    answer = call(f"{url}/subjects/typed-events-value/versions", "POST",
                  {"schemaType": "JSON", "schema": json.dumps(EVENT)})
    assert answer.status == 200, answer
    config = {
        "sidecar": {"socket": os.path.join(sock_dir_module, "s.sock"), "metrics_listen": None},
        "clusters": {"main": {"bootstrap.servers": registry.bootstrap}},
        "streams": {
            "orders": {"topic": "typed-orders", "linger.ms": 20,
                       "schema": {"file": str(root / "order.avsc"),
                                  "schema.registry.url": url,
                                  "latest.cache.ttl.sec": 0.2}},
            "events": {"topic": "typed-events",
                       "schema": {"subject": "typed-events-value",
                                  "schema.registry.url": url}},
            "parcels": {"topic": "typed-parcels",
                        "schema": {"file": str(root / "parcel.proto"),
                                   "schema.registry.url": url}},
        },
    }
    (root / "sidecar.yaml").write_text(yaml.safe_dump(config))
    process = start_databus(["sidecar", "-c", str(root / "sidecar.yaml")], root,
                            root / "sidecar.log")
    try:
        wait_for_log(process, root / "sidecar.log", "databus is up", "databus sidecar started")
        yield config["sidecar"]["socket"]
    finally:
        stop(process)


@pytest.fixture(scope="module")
def sock_dir_module():
    from tests.sidecar.harness import short_tmpdir

    with short_tmpdir() as path:
        yield path


def _read(bootstrap: str, topic: str, count: int, deserializer) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list = []
    try:
        def more():
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                out.append(deserializer(message.value(),
                                        SerializationContext(topic, MessageField.VALUE)))
            return len(out) >= count
        wait_for(more, f"{count} records of {topic}", 60)
    finally:
        consumer.close()
    return out


def test_dicts_and_json_text_reach_avro_deserializer_a_bad_one_is_refused_alone(
        registry, sidecar):
    sent = [{"order_id": 1, "item": "pen"},
            {"order_id": 2, "item": "ink", "price": 2.5}]
    with Client(sidecar) as client:
        good = [client.send("orders", sent[0]),
                client.send("orders", {"order_id": "three", "item": "cup"}),
                client.send("orders", json.dumps(sent[1])),
                client.send("orders", {"order_id": 4, "item": "pad", "colour": "red"}),
                client.send("orders", b"{not json")]
        good[0].result(30)
        good[2].result(30)
        refusals = []
        for future in (good[1], good[3], good[4]):
            with pytest.raises(InvalidRecordError) as info:
                future.result(30)
            refusals.append(str(info.value))
    assert "$.order_id: expected long, got str 'three' (rule: type)" in refusals[0]
    assert "subject 'typed-orders-value' version 1" in refusals[0]
    assert "$.colour: not a field of record shop.Order" in refusals[1]
    assert "(rule: unknown field)" in refusals[1]
    assert "not JSON text" in refusals[2]
    client_ = SchemaRegistryClient({"url": registry.schema_registry_url})
    got = _read(registry.bootstrap, "typed-orders", 2, AvroDeserializer(client_))
    assert got == [{"order_id": 1, "item": "pen", "price": None},
                   {"order_id": 2, "item": "ink", "price": 2.5}]


def test_json_schema_stream_is_read_by_json_deserializer(registry, sidecar):
    with Client(sidecar) as client:
        ok = client.send("events", {"kind": "click", "at": 7})
        bad = client.send("events", {"kind": "scroll", "at": 8})
        missing = client.send("events", '{"kind": "view"}')
        ok.result(30)
        with pytest.raises(InvalidRecordError, match=r"\$\.kind: 'scroll' is not one of "
                           r"\['click', 'view'\] \(rule: enum\)"):
            bad.result(30)
        with pytest.raises(InvalidRecordError, match=r"'at' is a required property "
                           r"\(rule: required\)"):
            missing.result(30)
    got = _read(registry.bootstrap, "typed-events", 1, JSONDeserializer(json.dumps(EVENT)))
    assert got == [{"kind": "click", "at": 7}]


def test_a_new_version_of_the_subject_is_followed(registry, sidecar):
    """A field the subject lacks is refused; once a version adding it (optional) is
    registered, the sidecar takes it after latest.cache.ttl.sec, with the new id."""
    value = {"order_id": 9, "item": "mug", "coupon": "NEW"}
    with Client(sidecar) as client:
        with pytest.raises(InvalidRecordError, match="coupon"):
            client.send("orders", value).result(30)
        v2 = dict(ORDER, fields=[*ORDER["fields"],
                                 {"name": "coupon", "type": ["null", "string"],
                                  "default": None}])
        answer = call(f"{registry.schema_registry_url}/subjects/typed-orders-value/versions",
                      "POST", {"schema": json.dumps(v2)})
        assert answer.status == 200, answer

        def accepted():
            try:
                return client.send("orders", value).result(30)
            except InvalidRecordError:
                return None
        delivery = wait_for(accepted, "the sidecar to take version 2", 30)
    consumer = Consumer({"bootstrap.servers": registry.bootstrap, "group.id": "typed-v2",
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("typed-orders", delivery.partition, delivery.offset)])

    def polled():
        message = consumer.poll(0.2)
        return message if message is not None and not message.error() else None
    try:
        message = wait_for(polled, "the v2 record", 30)
    finally:
        consumer.close()
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry.schema_registry_url}))
    assert deserializer(message.value(), SerializationContext(
        "typed-orders", MessageField.VALUE)) == {**value, "price": None}
    assert int.from_bytes(message.value()[1:5], "big") == answer.body["id"]


def test_a_file_the_subject_refuses_rejects_the_config(registry, tmp_path):
    """Registering ``file:`` under a subject whose compatibility refuses it is a config
    error naming the registry's answer (so a reload keeps the config in force)."""
    url = registry.schema_registry_url
    assert call(f"{url}/subjects/typed-strict-value/versions", "POST",
                {"schema": json.dumps(ORDER)}).status == 200
    changed = dict(ORDER, fields=[{"name": "order_id", "type": "string"}])
    (tmp_path / "changed.avsc").write_text(json.dumps(changed))
    missing = TypedStream("strict", "typed-strict", StreamSchema.model_validate(
        {"subject": "typed-nothing-value", "schema.registry.url": url}), None)
    refused = TypedStream("strict", "typed-strict", StreamSchema.model_validate(
        {"file": str(tmp_path / "changed.avsc"), "schema.registry.url": url}), None)

    async def main():
        with pytest.raises(ConfigError, match="refused subject 'typed-strict-value': "
                           "HTTP 409 error 409"):
            await refused.start()
        with pytest.raises(ConfigError, match="40401"):
            await missing.start()

    trio.run(main)


def test_subscribers_get_the_records_decoded(registry, sidecar):
    """Through the sidecar a typed stream's subscriber gets each record back as the dict
    it was sent as (msgpack); the topic holds the wire format (the tests above)."""
    with Client(sidecar) as client:
        client.send("events", {"kind": "view", "at": 11}).result(30)
        with client.subscribe("events", "typed-events-app") as subscription:
            got = []

            def arrived():
                message = subscription.poll(0.5)
                if message is not None:
                    got.append(message.data)
                    message.ack()
                return {"kind": "view", "at": 11} in got
            wait_for(arrived, "the decoded event", 60)
    # (the earlier tests' events come first when they ran)
    assert all(set(event) == {"kind", "at"} for event in got), got


def _parcel_class():
    """post.Parcel built with descriptor_pb2 (what protoc generates), not from the text."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="post/parcel.proto", package="post",
                                              syntax="proto3")
    parcel = file.message_type.add(name="Parcel")
    parcel.field.add(name="id", number=1, type=f.TYPE_STRING, label=1)
    parcel.field.add(name="grams", number=2, type=f.TYPE_UINT32, label=1)
    speed = parcel.enum_type.add(name="Speed")
    speed.value.add(name="STANDARD", number=0)
    speed.value.add(name="EXPRESS", number=1)
    parcel.field.add(name="speed", number=3, type=f.TYPE_ENUM,
                     type_name=".post.Parcel.Speed", label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("post.Parcel"))


def test_protobuf_stream_is_read_by_protobuf_deserializer_and_subscribers(registry, sidecar):
    """A ``.proto`` file registered by the stream: dicts and JSON text are written in
    Confluent's Protobuf wire format (ProtobufDeserializer reads them), a value the message
    does not take is refused alone naming the field and the rule, and a subscriber through
    the sidecar gets the dict back."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    with Client(sidecar) as client:
        ok = client.send("parcels", {"id": "p1", "grams": 250, "speed": "EXPRESS"})
        negative = client.send("parcels", {"id": "p2", "grams": -5})
        unknown = client.send("parcels", '{"id": "p3", "colour": "red"}')
        text = client.send("parcels", '{"id": "p4", "grams": 10}')
        ok.result(30)
        text.result(30)
        with pytest.raises(InvalidRecordError, match=r"subject 'typed-parcels-value' version 1 "
                           r".*\$\.grams: -5 does not fit Protobuf's uint32 \(rule: range\)"):
            negative.result(30)
        with pytest.raises(InvalidRecordError, match=r"\$\.colour: not a field of message "
                           r"post\.Parcel .*\(rule: unknown field\)"):
            unknown.result(30)
        parcel = _parcel_class()
        got = _read(registry.bootstrap, "typed-parcels", 2,
                    ProtobufDeserializer(parcel, {"use.deprecated.format": False}))
        assert got == [parcel(id="p1", grams=250, speed=1), parcel(id="p4", grams=10)]
        with client.subscribe("parcels", "typed-parcels-app") as subscription:
            decoded: list = []

            def arrived():
                message = subscription.poll(0.5)
                if message is not None:
                    decoded.append(message.data)
                    message.ack()
                return len(decoded) >= 2
            wait_for(arrived, "the decoded parcels", 60)
    assert decoded == [{"id": "p1", "grams": 250, "speed": "EXPRESS"},
                       {"id": "p4", "grams": 10, "speed": "STANDARD"}]
