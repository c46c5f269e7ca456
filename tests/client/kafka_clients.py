"""Helpers driving third-party Kafka clients (confluent-kafka, kafka-python, aiokafka) in tests.

Reads use manual assignment from the beginning (no group, so no rebalance delays) and return
plain tuples ``(partition, offset, key, value, headers, timestamp)`` so that what each
client saw can be compared byte for byte.
"""

from __future__ import annotations

import asyncio
import functools
import time

from tests.broker.clients import LibrdkafkaLog


def confluent_read(bootstrap: str, topic: str, count: int, timeout: float = 20.0, partitions=None):
    import confluent_kafka

    rdlog = LibrdkafkaLog()  # fails the read on a response librdkafka could not parse
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
         "log_level": 3, "logger": rdlog}
    )
    try:
        if partitions is None:
            md = consumer.list_topics(topic, timeout=10)
            partitions = sorted(md.topics[topic].partitions)
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions]
        )
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error():
                    raise RuntimeError(str(m.error()))
                out.append(
                    (m.partition(), m.offset(), m.key(), m.value(),
                     tuple((k, v) for k, v in (m.headers() or [])), m.timestamp()[1])
                )
    finally:
        consumer.close()
    protocol_errors = rdlog.protocol_errors()
    assert not protocol_errors, f"librdkafka protocol errors: {protocol_errors[:3]}"
    return out


def confluent_produce(bootstrap: str, topic: str, records, **config):
    """records: (key, value, headers, timestamp_ms, partition|None); returns the delivery
    reports (error, partition, offset, key) in the order of ``records``."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 3, **config})
    records = list(records)
    reports: list = [None] * len(records)

    def on_delivery(index, err, msg):
        reports[index] = (err, msg.partition(), msg.offset(), msg.key())

    for index, (key, value, headers, ts, partition) in enumerate(records):
        kwargs = {"key": key, "value": value, "headers": list(headers),
                  "on_delivery": functools.partial(on_delivery, index)}
        if ts is not None:
            kwargs["timestamp"] = ts
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert all(r is not None and r[0] is None for r in reports), reports
    return reports


def kafka_python_read(bootstrap: str, topic: str, count: int, timeout: float = 20.0):
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
        consumer_timeout_ms=int(timeout * 1000),
    )
    try:
        parts = None
        deadline = time.monotonic() + 10
        while not parts and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                time.sleep(0.2)
        tps = [kafka.TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500).values():
                for m in msgs:
                    out.append((m.partition, m.offset, m.key, m.value,
                                tuple((k, v) for k, v in m.headers), m.timestamp))
        return out
    finally:
        consumer.close()


def kafka_python_produce(bootstrap: str, topic: str, records):
    import kafka

    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        futures = [
            producer.send(topic, key=k, value=v, headers=list(h), timestamp_ms=ts, partition=p)
            for k, v, h, ts, p in records
        ]
        producer.flush(30)
        return [f.get(10) for f in futures]
    finally:
        producer.close(10)


def aiokafka_read(bootstrap: str, topic: str, count: int, timeout: float = 20.0):
    async def run():
        import aiokafka

        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            parts = None
            for _ in range(50):
                parts = consumer.partitions_for_topic(topic)
                if parts:
                    break
                await consumer._client.force_metadata_update()
                await asyncio.sleep(0.2)
            tps = [aiokafka.TopicPartition(topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            out = []
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                got = await consumer.getmany(timeout_ms=500)
                for msgs in got.values():
                    for m in msgs:
                        out.append((m.partition, m.offset, m.key, m.value,
                                    tuple((k, v) for k, v in m.headers), m.timestamp))
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


def aiokafka_produce(bootstrap: str, topic: str, records):
    async def run():
        import aiokafka

        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            futs = [
                await producer.send(topic, key=k, value=v, headers=list(h), timestamp_ms=ts, partition=p)
                for k, v, h, ts, p in records
            ]
            return [await f for f in futs]
        finally:
            await producer.stop()

    return asyncio.run(run())
