"""Batch reads of the databus source, compared with what confluent-kafka reads."""

from __future__ import annotations

import pytest

from .kafka_data import CODECS, create_topic, produce, read_all

BASE_TS = 1_700_000_000_000


def _rows(df, headers=True):
    from pyspark.sql import functions as F

    cols = ["key", "value", "topic", "partition", "offset",
            F.unix_millis("timestamp").alias("ts"), "timestampType"]
    out = []
    for row in df.select(*cols, *(["headers"] if headers else [])).collect():
        hs = [(h["key"], bytes(h["value"]) if h["value"] is not None else None)
              for h in row["headers"]] if headers else []
        out.append((row["key"] and bytes(row["key"]), row["value"] and bytes(row["value"]),
                    row["topic"], row["partition"], row["offset"], row["ts"],
                    row["timestampType"], hs))
    return sorted(out, key=lambda r: (r[3], r[4]))


def _reader(spark, broker, **options):
    reader = spark.read.format("databus").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.fixture(scope="module")
def mixed_topic(spark_broker):
    """3 partitions; batches of all five codecs; null keys and values; headers."""
    topic = "spark-read-mixed"
    create_topic(spark_broker.bootstrap, topic, 3)
    n = 0
    for codec in CODECS:
        records = []
        for i in range(30):
            records.append({
                "key": None if i % 7 == 0 else f"k{i}".encode(),
                "value": None if i % 11 == 0 else f"{codec}-{i}".encode() * 5,
                "partition": i % 3,
                "headers": [("h", f"{i}".encode()), ("empty", None)] if i % 4 == 0 else [],
                "timestamp": BASE_TS + n,
            })
            n += 1
        produce(spark_broker.bootstrap, topic, records, codec=codec)
    return topic


def test_batch_read_equals_confluent_kafka(spark, spark_broker, mixed_topic):
    want = read_all(spark_broker.bootstrap, mixed_topic)
    got = _rows(_reader(spark, spark_broker, subscribe=mixed_topic, includeHeaders="true"))
    assert len(want) == 150
    assert got == want
