"""Streaming reads in a real local Spark: exactly-once Parquet output across restarts while
records keep arriving, maxOffsetsPerTrigger per micro-batch, partitions added later."""

from __future__ import annotations

import json
import threading
import time

from .kafka_data import add_partitions, create_topic, produce


def _stream(spark, broker, **options):
    reader = spark.readStream.format("databus").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _run_available_now(df, out, checkpoint):
    query = (df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert not query.isActive, "the AvailableNow query did not finish within 120 s"
    return [p["numInputRows"] for p in query.recentProgress]


def _run_until_some_rows_then_stop(df, out, checkpoint):
    query = (df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while not any(p["numInputRows"] for p in query.recentProgress):
            assert query.exception() is None
            assert time.monotonic() < deadline, "no micro-batch with rows within 120 s"
            time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None


def test_restarts_while_records_arrive_write_each_record_once(spark, spark_broker, tmp_path):
    topic = "spark-stream-restarts"
    create_topic(spark_broker.bootstrap, topic, 2)
    chunk, max_chunks = 40, 200
    # Records keep arriving until the restarts are done, however long Spark takes on a busy
    # machine (a fixed few seconds of sends could end before the continuous run started, and
    # it would then wait for rows that never come); bounded at max_chunks all the same.
    stop = threading.Event()
    produced = [0]

    def keep_producing():
        while not stop.is_set() and produced[0] < chunk * max_chunks:
            start = produced[0]
            produce(spark_broker.bootstrap, topic, [
                {"value": json.dumps({"id": i}).encode(), "partition": i % 2}
                for i in range(start, start + chunk)
            ])
            produced[0] = start + chunk
            time.sleep(0.4)

    producing = threading.Thread(target=keep_producing)
    producing.start()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = _stream(spark, spark_broker, subscribe=topic, startingOffsets="earliest",
                 maxOffsetsPerTrigger="100")
    try:
        _run_available_now(df, out, checkpoint)
        # a continuous run stopped from outside once it has written something
        _run_until_some_rows_then_stop(df, out, checkpoint)
        _run_available_now(df, out, checkpoint)
        _run_available_now(df, out, checkpoint)
    finally:
        stop.set()
        producing.join()
    total = produced[0]
    _run_available_now(df, out, checkpoint)  # catch up with the rest

    rows = spark.read.parquet(str(out)).collect()
    ids = sorted(json.loads(r["value"])["id"] for r in rows)
    assert ids == list(range(total))  # each record exactly once


def test_max_offsets_per_trigger_caps_batches_and_new_partitions_are_read(spark, spark_broker,
                                                                            tmp_path):
    topic = "spark-stream-limit"
    create_topic(spark_broker.bootstrap, topic, 3)
    produce(spark_broker.bootstrap, topic, [{"value": b"a", "partition": i % 3} for i in range(30)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = _stream(spark, spark_broker, subscribe=topic, startingOffsets="earliest",
                 maxOffsetsPerTrigger="8")
    sizes = [n for n in _run_available_now(df, out, checkpoint) if n]
    assert sizes == [6, 6, 6, 6, 6]  # lags of 10 on 3 partitions: floor(8/3) = 2 each

    add_partitions(spark_broker.bootstrap, topic, 4)
    produce(spark_broker.bootstrap, topic, [{"value": b"new", "partition": 3}] * 4)
    sizes = [n for n in _run_available_now(df, out, checkpoint) if n]
    assert sizes == [4]
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(
        [(p, o) for p in range(3) for o in range(10)] + [(3, o) for o in range(4)])


def test_stream_from_latest_reads_only_new_records(spark, spark_broker, tmp_path):
    topic = "spark-stream-latest"
    create_topic(spark_broker.bootstrap, topic, 1)
    produce(spark_broker.bootstrap, topic, [{"value": b"old"}] * 3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = _stream(spark, spark_broker, subscribe=topic)  # startingOffsets=latest by default
    _run_available_now(df, out, checkpoint)
    produce(spark_broker.bootstrap, topic, [{"value": b"new"}] * 2)
    _run_available_now(df, out, checkpoint)
    values = sorted(r["value"] for r in spark.read.parquet(str(out)).collect())
    assert values == ["new", "new"]
