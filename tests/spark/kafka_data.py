"""Test data for the Spark tests, written and read with confluent-kafka (librdkafka): the
reference the databus source is compared against."""

from __future__ import annotations

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)])
    futures[topic].result(30)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)


def produce(bootstrap: str, topic: str, records, *, codec: str = "none") -> None:
    """records: dicts with value, and optionally key, partition, headers, timestamp (ms)."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
    })
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    for r in records:
        kwargs = {k: r[k] for k in ("key", "partition", "headers", "timestamp") if k in r}
        producer.produce(topic, r.get("value"), on_delivery=delivered, **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors


def read_all(bootstrap: str, topic: str) -> list[tuple]:
    """Every record of ``topic`` as (key, value, topic, partition, offset, timestamp ms,
    timestampType, headers as [(key, value)])."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "reference", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        tps = []
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 10)
            if high > low:
                tps.append(confluent_kafka.TopicPartition(topic, p, low))
        consumer.assign(tps)
        out, done = [], set()
        while len(done) < len(tps):
            msg = consumer.poll(10)
            assert msg is not None, "reference consumer timed out"
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            ts_type, ts = msg.timestamp()
            out.append((msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(), ts,
                        0 if ts_type == confluent_kafka.TIMESTAMP_CREATE_TIME else 1,
                        [tuple(h) for h in msg.headers() or []]))
        return sorted(out, key=lambda r: (r[3], r[4]))
    finally:
        consumer.close()
