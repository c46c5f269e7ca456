"""The stream reader's methods called directly, as Spark's driver-side process calls them,
against a real broker but without a JVM: offsets, admission control, AvailableNow, new
partitions, and what read() yields for the planned ranges."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from databus_spark.options import parse_source_options
from databus_spark.source import DatabusStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from .kafka_data import add_partitions, create_topic, produce


def _reader(broker, **options):
    opts = parse_source_options(
        {"kafka.bootstrap.servers": broker.bootstrap, **options}, streaming=True
    )
    return DatabusStreamReader(opts)


def _offsets(reader, start, end):
    """Offsets read by a micro-batch, through the reader's partitions() and read()."""
    out = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            d = batch.to_pydict()
            out += list(zip(d["partition"], d["offset"]))
    return sorted(out)


def test_admission_control_and_new_partitions(spark_broker):
    topic = "stream-methods"
    create_topic(spark_broker.bootstrap, topic, 3)
    produce(spark_broker.bootstrap, topic,
            [{"value": b"v", "partition": i % 3} for i in range(30)])
    reader = _reader(spark_broker, subscribe=topic, startingOffsets="earliest",
                     maxOffsetsPerTrigger="8")
    assert reader.getDefaultReadLimit().max_rows == 8
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0, "2": 0}}

    seen, sizes = [], []
    while True:
        end = reader.latestOffset(start, ReadMaxRows(8))
        if end == start:
            break
        got = _offsets(reader, start, end)
        sizes.append(len(got))
        seen += got
        start = end
    assert sizes == [6, 6, 6, 6, 6]  # lags of 10 each: floor(8/3) = 2 per partition
    assert sorted(seen) == [(p, o) for p in range(3) for o in range(10)]
    assert reader.reportLatestOffset() == {topic: {"0": 10, "1": 10, "2": 10}}

    # a partition added while the query runs is read from its earliest offset
    add_partitions(spark_broker.bootstrap, topic, 4)
    produce(spark_broker.bootstrap, topic, [{"value": b"n", "partition": 3}] * 2)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 10, "1": 10, "2": 10, "3": 2}}
    assert _offsets(reader, start, end) == [(3, 0), (3, 1)]
    assert reader.partitions(end, end) == []


def test_available_now_stops_at_what_was_there(spark_broker):
    topic = "stream-available-now"
    create_topic(spark_broker.bootstrap, topic, 1)
    produce(spark_broker.bootstrap, topic, [{"value": b"a"}] * 5)
    reader = _reader(spark_broker, subscribe=topic, startingOffsets="earliest")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    produce(spark_broker.bootstrap, topic, [{"value": b"late"}] * 3)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 5}}
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_starting_latest_and_timestamps(spark_broker):
    topic = "stream-start"
    create_topic(spark_broker.bootstrap, topic, 2)
    produce(spark_broker.bootstrap, topic,
            [{"value": b"x", "partition": i % 2, "timestamp": 1000 + i} for i in range(10)])
    assert _reader(spark_broker, subscribe=topic).initialOffset() == {topic: {"0": 5, "1": 5}}
    # timestamps 1000, 1002, ... on partition 0 and 1001, 1003, ... on 1: first >= 1005
    reader = _reader(spark_broker, subscribe=topic, startingTimestamp="1005")
    assert reader.initialOffset() == {topic: {"0": 3, "1": 2}}
    reader = _reader(spark_broker, subscribe=topic, startingTimestamp="5000")
    with pytest.raises(ValueError, match="no record of stream-start-0 has a timestamp >= 5000"):
        reader.initialOffset()
    reader = _reader(spark_broker, subscribe=topic, startingTimestamp="5000",
                     startingOffsetsByTimestampStrategy="latest")
    assert reader.initialOffset() == {topic: {"0": 5, "1": 5}}


def test_topic_created_after_the_query_started_is_read_from_earliest(spark_broker):
    topic = "stream-created-later"
    reader = _reader(spark_broker, subscribe=topic)  # startingOffsets=latest
    start = reader.initialOffset()
    assert start == {}
    assert reader.latestOffset(start, ReadAllAvailable()) == {}
    create_topic(spark_broker.bootstrap, topic, 2)
    produce(spark_broker.bootstrap, topic, [{"value": b"v", "partition": i % 2} for i in range(5)])
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 3, "1": 2}}
    assert _offsets(reader, start, end) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
