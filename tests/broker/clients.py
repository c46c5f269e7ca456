"""Produce/consume helpers over the three real Python Kafka clients, with one message shape.

A message is ``Msg(key, value, headers, partition=None, timestamp=None)``; consumed messages
come back as ``Got(topic, partition, offset, key, value, headers, timestamp)`` with headers as
a tuple of (str, bytes|None) pairs, so results of different clients compare directly.

Every confluent-kafka consume collects librdkafka's log and fails on a protocol error
(a response librdkafka could not parse), even when the records did arrive.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import NamedTuple

from tests.helpers.wait import wait_for

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Msg(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    partition: int | None = None
    timestamp: int | None = None


class Got(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int


def sample_messages(n: int, *, tag: str = "m", keys: int = 7) -> list[Msg]:
    """Keys, null keys, headers (incl. a null header value), null values, varied sizes."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i % keys}".encode()
        # a null value only with a key (kafka-python refuses a record with neither)
        value = None if i % 11 == 3 and key else (f"{tag}-{i}-".encode() * (1 + i % 9))
        headers = () if i % 3 else (("h1", f"v{i}".encode()), ("h2", None), ("h1", b"dup"))
        out.append(Msg(key, value, headers))
    return out


def sent_view(messages: Sequence[Msg]) -> list[tuple]:
    return [(m.key, m.value, tuple(m.headers)) for m in messages]


def got_view(got: Sequence[Got]) -> list[tuple]:
    return [(g.key, g.value, g.headers) for g in got]


def by_partition_offset(got: Sequence[Got]) -> list[Got]:
    return sorted(got, key=lambda g: (g.partition, g.offset))


# -- confluent-kafka (librdkafka) -------------------------------------------------------------

class LibrdkafkaLog:
    """librdkafka's log lines, given as the ``logger`` config (confluent-kafka calls its
    ``log(level, format, *args)`` from poll/consume)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, msg: str, *args) -> None:
        self.lines.append(msg % args)

    def protocol_errors(self) -> list[str]:
        # "PROTOERR ... Protocol parse failure for Fetch v12(flex) ..." and friends
        return [line for line in self.lines if "PROTOERR" in line or "parse failure" in line]


def confluent_produce(bootstrap: str, topic: str, messages: Sequence[Msg], **conf) -> list:
    """Produce and flush; returns [(partition, offset)] per message in order (raises on error)."""
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    config.update(conf)
    producer = Producer(config)
    results: list = [None] * len(messages)
    errors = []

    def report(index):
        def callback(err, msg):
            if err is not None:
                errors.append(err)
            else:
                results[index] = (msg.partition(), msg.offset())
        return callback

    for i, m in enumerate(messages):
        kwargs = {}
        if m.partition is not None:
            kwargs["partition"] = m.partition
        if m.timestamp is not None:
            kwargs["timestamp"] = m.timestamp
        while True:
            try:
                producer.produce(topic, value=m.value, key=m.key, headers=list(m.headers) or None,
                                 on_delivery=report(i), **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors[:3]
    return results


def confluent_consume(bootstrap: str, topic: str, count: int,
                      partitions: Sequence[int] | None = (0,), *, offset: int = -2,
                      timeout: float = 60, **conf) -> list[Got]:
    """Assign ``partitions`` (None: all of the topic's) at ``offset`` (-2 earliest) and read
    ``count`` messages; fails if librdkafka logged a protocol error meanwhile."""
    from confluent_kafka import Consumer, TopicPartition

    rdlog = LibrdkafkaLog()
    config = {"bootstrap.servers": bootstrap, "group.id": f"t-{time.monotonic_ns()}",
              "enable.auto.commit": False, "auto.offset.reset": "earliest", "logger": rdlog}
    config.update(conf)
    consumer = Consumer(config)
    try:
        if partitions is None:
            partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, offset) for p in partitions])
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                headers = tuple((k, v) for k, v in (msg.headers() or ()))
                got.append(Got(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                               msg.value(), headers, msg.timestamp()[1]))
    finally:
        consumer.close()
    protocol_errors = rdlog.protocol_errors()
    assert not protocol_errors, f"librdkafka protocol errors: {protocol_errors[:3]}"
    return got


# -- kafka-python -----------------------------------------------------------------------------

def kafka_python_produce(bootstrap: str, topic: str, messages: Sequence[Msg], **conf) -> list:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    try:
        futures = [
            producer.send(topic, value=m.value, key=m.key, headers=list(m.headers),
                          partition=m.partition, timestamp_ms=m.timestamp)
            for m in messages
        ]
        producer.flush(60)
        return [(md.partition, md.offset) for md in (f.get(30) for f in futures)]
    finally:
        producer.close(10)


def kafka_python_consume(bootstrap: str, topic: str, count: int,
                         partitions: Sequence[int] | None = (0,), timeout: float = 60,
                         offset: int | None = None, **conf) -> list[Got]:
    """``partitions`` (None: all of the topic's) from the beginning, or from ``offset``
    (auto_offset_reset=earliest if out of range); ``conf``: more KafkaConsumer settings
    (security_protocol, ...)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None, **conf)
    try:
        if partitions is None:
            partitions = sorted(wait_for(lambda: consumer.partitions_for_topic(topic),
                                         f"topic {topic}'s partitions", timeout=10,
                                         interval=0.2))
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        if offset is None:
            consumer.seek_to_beginning(*tps)
        else:
            for tp in tps:
                consumer.seek(tp, offset)
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    got.append(Got(r.topic, r.partition, r.offset, r.key, r.value,
                                   tuple((k, v) for k, v in r.headers), r.timestamp))
        return got
    finally:
        consumer.close()


# -- aiokafka (asyncio, run in its own loop) --------------------------------------------------

def aiokafka_produce(bootstrap: str, topic: str, messages: Sequence[Msg], **conf) -> list:
    from aiokafka import AIOKafkaProducer

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=m.value, key=m.key,
                                    headers=list(m.headers) or None, partition=m.partition,
                                    timestamp_ms=m.timestamp)
                for m in messages
            ]
            results = await asyncio.gather(*futures)
            # acks=0: aiokafka reports no metadata at all
            return [None if md is None else (md.partition, md.offset) for md in results]
        finally:
            await producer.stop()

    return asyncio.run(main())


def aiokafka_consume(bootstrap: str, topic: str, count: int,
                     partitions: Sequence[int] | None = (0,), timeout: float = 60,
                     offset: int | None = None) -> list[Got]:
    """``partitions`` (None: all of the topic's) from the beginning, or from ``offset``
    (auto_offset_reset=earliest if out of range)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        try:
            parts = partitions
            for _ in range(50):  # aiokafka learns of a topic only from a metadata refresh
                if parts is not None:
                    break
                parts = consumer.partitions_for_topic(topic) or None
                if parts is None:
                    await consumer._client.force_metadata_update()
                    await asyncio.sleep(0.2)
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            if offset is None:
                await consumer.seek_to_beginning(*tps)
            else:
                for tp in tps:
                    consumer.seek(tp, offset)
            got: list[Got] = []
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for r in records:
                        got.append(Got(r.topic, r.partition, r.offset, r.key, r.value,
                                       tuple((k, v) for k, v in r.headers), r.timestamp))
            return got
        finally:
            await consumer.stop()

    return asyncio.run(main())
