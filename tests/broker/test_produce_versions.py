"""Produce v11-13 at the wire (no installed client sends them: librdkafka 2.16 stops at v10,
kafka-python 3.0 at v9): v11 and v12 are answered as v10 (this broker neither verifies
transactional produces nor finalizes transaction.version 2, the two things they add), v13
names topics by id (KIP-516) and answers with the ids; an unknown id is UNKNOWN_TOPIC_ID.
Golden bytes of the answers, and the records read back with a real client."""

from __future__ import annotations

import struct
import uuid

import confluent_kafka
import pytest

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build_request
from databus.protocol.records import build_batch
from tests.broker.wire import WireClient
from tests.groups.harness import create_topic
from tests.groups.raw import RawClient


def _produce(bootstrap: str, version: int, topic: dict, value: bytes) -> bytes:
    """One record to partition 0 with acks=1; the response frame after the correlation id
    and the empty header tag section."""
    batch = build_batch([(None, value, (), 1_700_000_000_000)])
    body = build_request(ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{**topic, "partition_data": [{"index": 0, "records": batch}]}]})
    with WireClient(bootstrap) as wire:
        correlation = wire.send(body)
        frame = wire.read_frame()
    assert struct.unpack(">i", frame[:4])[0] == correlation and frame[4] == 0
    return frame[5:]


def _partition(offset: int, error: int = 0) -> bytes:
    """One partition answer: index 0, error, base offset, no append time, log start 0 (-1
    on error), no record errors, no message, no tags."""
    start = 0 if error == 0 else -1
    return struct.pack(">ihqqq", 0, error, offset, -1, start) + b"\x01" b"\x00" b"\x00"


@pytest.mark.parametrize("version", [11, 12])
def test_produce_v11_and_v12_by_topic_name(broker, version):
    topic = f"p{version}"
    create_topic(broker.bootstrap, topic, 1)
    body = _produce(broker.bootstrap, version, {"name": topic}, b"a")
    assert body == (b"\x02" + bytes([len(topic) + 1]) + topic.encode() + b"\x02"
                    + _partition(0) + b"\x00" + struct.pack(">i", 0) + b"\x00")


def test_produce_v13_by_topic_id(broker):
    create_topic(broker.bootstrap, "p13", 1)
    with RawClient(broker.bootstrap) as client:
        metadata = client.call(ApiKey.METADATA, 12, {
            "topics": [{"name": "p13", "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    topic_id = metadata.topics[0].topic_id
    for offset, value in enumerate([b"first", b"second"]):
        body = _produce(broker.bootstrap, 13, {"topic_id": topic_id}, value)
        assert body == (b"\x02" + topic_id.bytes + b"\x02" + _partition(offset) + b"\x00"
                        + struct.pack(">i", 0) + b"\x00")
    unknown = uuid.UUID(int=42)
    body = _produce(broker.bootstrap, 13, {"topic_id": unknown}, b"lost")
    message = f"unknown topic id {unknown}".encode()
    assert body == (b"\x02" + unknown.bytes + b"\x02"
                    + struct.pack(">ihqqq", 0, 100, -1, -1, -1) + b"\x01"
                    + bytes([len(message) + 1]) + message + b"\x00"
                    + b"\x00" + struct.pack(">i", 0) + b"\x00")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "p13-reader",
                                         "auto.offset.reset": "earliest"})
    consumer.assign([confluent_kafka.TopicPartition("p13", 0)])
    got = []
    while len(got) < 2:
        msg = consumer.poll(5)
        assert msg is not None and msg.error() is None
        got.append(msg.value())
    consumer.close()
    assert got == [b"first", b"second"]
