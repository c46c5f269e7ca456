"""Broker-side schema validation (Confluent Server's topic configs): a record without the
magic byte, with an unknown id, or with an id of another subject is refused with
INVALID_RECORD and a reason naming the record; the same producer's next valid record lands."""

from __future__ import annotations

import json
import struct

import pytest

pytest.importorskip("confluent_kafka.schema_registry.avro",
                    reason="needs confluent-kafka[schemaregistry,avro,json]")

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from .conftest import avro_record, call  # noqa: E402

SCHEMA = avro_record("Checked", ("n", "int"))


def _create(broker, topic: str, configs: dict) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


def _send(producer: Producer, topic: str, value: bytes):
    """Produce one record on its own and wait: (error or None)."""
    outcome = []
    producer.produce(topic, value=value, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def _values(broker, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"v-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out = []
    try:
        for _ in range(200):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                out.append(message.value())
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


def test_value_validation(registry):
    topic = "validated"
    _create(registry, topic, {"confluent.value.schema.validation": "true"})
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    serialize = AvroSerializer(client, SCHEMA)
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = serialize({"n": 1}, ctx)
    other_id = call(f"{registry.schema_registry_url}/subjects/unrelated-value/versions", "POST",
                    {"schema": avro_record("Other", ("m", "int"))}).body["id"]

    producer = Producer({"bootstrap.servers": registry.bootstrap, "retries": 0,
                         "enable.idempotence": False})
    assert _send(producer, topic, good) is None
    cases = {
        b"plain text": "does not start with the schema registry's magic byte",
        b"\x00" + struct.pack(">I", 999_999) + b"\x02": "schema id 999999, which the "
                                                       "registry does not know",
        b"\x00" + struct.pack(">I", other_id) + b"\x02": "is not registered under subject "
                                                        "validated-value",
    }
    for value in cases:
        error = _send(producer, topic, value)
        assert error is not None and error.code() == KafkaError.INVALID_RECORD, error
    assert _send(producer, topic, serialize({"n": 2}, ctx)) is None  # the next one lands

    # The reason, per record (KIP-467 record errors; kafka-python reports them).
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=registry.bootstrap, linger_ms=200, retries=0)
    try:
        for value, words in cases.items():
            futures = [kp.send(topic, value=good), kp.send(topic, value=value)]
            kp.flush(30)
            refused = futures[1].exception
            assert type(refused).__name__ == "InvalidRecordError"
            assert "record 1 (offset delta 1): the value" in str(refused), str(refused)
            assert words in str(refused), str(refused)
            assert "part of a batch which had one more more invalid records" in \
                str(futures[0].exception)
    finally:
        kp.close()
    landed = _values(registry, topic, 2)
    assert landed == [good, serialize({"n": 2}, ctx)]
    watcher = Consumer({"bootstrap.servers": registry.bootstrap, "group.id": "v-watch"})
    try:  # nothing of a refused batch landed (its valid records neither)
        assert watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 2)
    finally:
        watcher.close()


def test_validation_off_by_default_and_record_name_strategy(registry):
    plain = "unvalidated"
    _create(registry, plain, {})
    producer = Producer({"bootstrap.servers": registry.bootstrap, "retries": 0})
    assert _send(producer, plain, b"anything goes") is None

    topic = "validated-by-record"
    _create(registry, topic, {
        "confluent.value.schema.validation": "true",
        "confluent.value.subject.name.strategy":
            "io.confluent.kafka.serializers.subject.RecordNameStrategy"})
    schema = json.dumps({"type": "record", "name": "Payment", "namespace": "shop",
                         "fields": [{"name": "n", "type": "int"}]})
    by_record = call(f"{registry.schema_registry_url}/subjects/shop.Payment/versions", "POST",
                     {"schema": schema}).body["id"]
    by_topic = call(f"{registry.schema_registry_url}/subjects/{topic}-value/versions", "POST",
                    {"schema": avro_record("NotPayment", ("n", "long"))}).body["id"]
    assert _send(producer, topic, b"\x00" + struct.pack(">I", by_record) + b"\x02") is None
    error = _send(producer, topic, b"\x00" + struct.pack(">I", by_topic) + b"\x02")
    assert error is not None and error.code() == KafkaError.INVALID_RECORD


def test_bad_strategy_is_refused_at_topic_creation(registry):
    admin = AdminClient({"bootstrap.servers": registry.bootstrap})
    future = admin.create_topics([NewTopic("bad-strategy", 1, 1, config={
        "confluent.value.subject.name.strategy": "NoSuchStrategy"})])["bad-strategy"]
    with pytest.raises(Exception) as error:
        future.result(30)
    assert "confluent.value.subject.name.strategy" in str(error.value)
