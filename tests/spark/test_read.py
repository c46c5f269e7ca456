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


def test_offset_ranges(spark, spark_broker, mixed_topic):
    want = [r for r in read_all(spark_broker.bootstrap, mixed_topic)
            if (r[3] == 0 and 2 <= r[4] < 7) or (r[3] == 1 and r[4] < 3) or (r[3] == 2 and r[4] >= 5)]
    df = _reader(spark, spark_broker, subscribe=mixed_topic, includeHeaders="true",
                 startingOffsets=f'{{"{mixed_topic}": {{"0": 2, "1": -2, "2": 5}}}}',
                 endingOffsets=f'{{"{mixed_topic}": {{"0": 7, "1": 3, "2": -1}}}}')
    assert _rows(df) == want


def test_starting_offsets_by_timestamp(spark, spark_broker, mixed_topic):
    every = read_all(spark_broker.bootstrap, mixed_topic)
    stamps = {0: BASE_TS + 40, 1: BASE_TS + 100, 2: BASE_TS}
    want = [r for r in every if r[5] >= stamps[r[3]]]  # timestamps grow with offsets here
    json_ts = ", ".join(f'"{p}": {ts}' for p, ts in stamps.items())
    df = _reader(spark, spark_broker, assign=f'{{"{mixed_topic}": [0, 1, 2]}}', includeHeaders="true",
                 startingOffsetsByTimestamp=f'{{"{mixed_topic}": {{{json_ts}}}}}')
    assert _rows(df) == want and 0 < len(want) < len(every)


def test_min_partitions_splits_tasks(spark, spark_broker, mixed_topic):
    df = _reader(spark, spark_broker, subscribe=mixed_topic, minPartitions="10")
    # 3 partitions of 50 offsets, 10 tasks wanted: round(50/150 * 10) = 3 pieces each
    assert df.rdd.getNumPartitions() == 9
    assert [r[:7] for r in _rows(df, headers=False)] == \
        [r[:7] for r in read_all(spark_broker.bootstrap, mixed_topic)]


def test_schema_is_kafkas(spark, spark_broker, mixed_topic):
    df = _reader(spark, spark_broker, subscribe=mixed_topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    df = _reader(spark, spark_broker, subscribe=mixed_topic, includeHeaders="true")
    assert df.schema.fields[-1].simpleString() == "headers:array<struct<key:string,value:binary>>"


def test_missing_topic_reads_nothing(spark, spark_broker):
    assert _reader(spark, spark_broker, subscribe="spark-no-such-topic").count() == 0


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "t", "startingOfsets": "earliest"}, "unknown option 'startingofsets'"),
    ({"subscribe": "t", "assign": '{"t": [0]}'}, "exactly one of the options"),
    ({"subscribe": "t", "kafka.group.id": "g"}, "'kafka.group.id' is not supported"),
])
def test_bad_options_fail_at_load(spark, spark_broker, options, message):
    with pytest.raises(Exception) as info:
        _reader(spark, spark_broker, **options)
    assert message in str(info.value)


def test_batch_only_contradictions_fail_before_any_task(spark, spark_broker, mixed_topic):
    df = _reader(spark, spark_broker, subscribe=mixed_topic, startingOffsets="latest")
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        df.count()
    df = _reader(spark, spark_broker, subscribe=mixed_topic,
                 startingOffsets=f'{{"{mixed_topic}": {{"0": 1}}}}')
    with pytest.raises(Exception, match=f"missing {mixed_topic}-1, {mixed_topic}-2"):
        df.count()


def test_the_lane_header_arrives_in_the_headers_column(spark, spark_broker):
    """docs/lanes.md: a message sent in a lane through the SDK and the sidecar reaches
    Spark with its `databus-lane` header in the `headers` column (and its lane topic in
    `topic`); the main lane's message has no header."""
    import trio

    import databus
    from databus.lanes import model
    from databus.lanes.registry import RegistryWriter, now_ms
    from tests.sidecar.harness import running_sidecar, short_tmpdir, sidecar_config

    bootstrap, registry, stream = spark_broker.bootstrap, "lanes-registry-spark", "spark-lanes"

    def send_both(socket: str) -> None:
        with databus.Client(socket) as client:
            assert client.send(stream, b"in-lane", lane="fx").result(30).topic == \
                f"{stream}.lane.fx"
            client.send(stream, b"main").result(30)

    async def main(sock_dir: str) -> None:
        async with RegistryWriter(bootstrap, registry) as writer:
            now = now_ms()
            await writer.put(model.lane_key("fx"),
                             model.Lane("fx", "test", now, 3_600_000, now + 3_600_000))
        config = sidecar_config(sock_dir, clusters={"main": {"bootstrap.servers": bootstrap}},
                                default_route={"topic": "{stream}"},
                                lanes={"registry.topic": registry})
        async with running_sidecar(config) as sidecar:
            await trio.to_thread.run_sync(send_both, sidecar.addresses.socket)

    with short_tmpdir() as sock_dir:
        trio.run(main, sock_dir)
    df = _reader(spark, spark_broker, subscribe=f"{stream},{stream}.lane.fx",
                 includeHeaders="true")
    rows = sorted((row["topic"], bytes(row["value"]),
                   [(h["key"], bytes(h["value"])) for h in row["headers"]])
                  for row in df.select("topic", "value", "headers").collect())
    assert rows == [(stream, b"main", []),
                    (f"{stream}.lane.fx", b"in-lane", [("databus-lane", b"fx")])]
