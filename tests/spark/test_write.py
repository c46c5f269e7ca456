"""Writing with the databus sink (Kafka sink's columns and `topic` option), read back with
confluent-kafka and with the databus source."""

from __future__ import annotations

import pytest

from .kafka_data import create_topic, produce, read_all


def _writer(df, broker, **options):
    writer = df.write.format("databus").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer


def test_batch_write_then_read_back(spark, spark_broker):
    topic = "spark-write-batch"
    create_topic(spark_broker.bootstrap, topic, 2)
    rows = [
        (f"k{i}" if i % 3 else None, f"value {i}".encode() if i % 5 else None, topic, i % 2,
         [("h", f"{i}".encode()), ("n", None)] if i % 2 else [])
        for i in range(40)
    ]
    df = spark.createDataFrame(rows, "key string, value binary, topic string, partition int, "
                                     "headers array<struct<key:string,value:binary>>")
    _writer(df, spark_broker).mode("append").save()

    got = read_all(spark_broker.bootstrap, topic)
    assert sorted((repr(r[0]), repr(r[1]), r[3], r[7]) for r in got) == sorted(
        (repr(k.encode() if k else None), repr(v), p, h) for k, v, _t, p, h in rows
    )
    # and through the source: the round trip keeps every column
    back = (spark.read.format("databus").option("kafka.bootstrap.servers", spark_broker.bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load())
    assert back.count() == 40
    assert back.filter("value IS NULL").count() == 8
    assert back.filter("size(headers) = 2").count() == 20


def test_topic_option_overrides_the_column(spark, spark_broker):
    topic = "spark-write-option"
    create_topic(spark_broker.bootstrap, topic, 1)
    df = spark.createDataFrame([("elsewhere", "a"), ("elsewhere", "b")], "topic string, value string")
    _writer(df, spark_broker, topic=topic).mode("append").save()
    assert sorted(r[1] for r in read_all(spark_broker.bootstrap, topic)) == [b"a", b"b"]


def test_stream_write_copies_a_topic(spark, spark_broker, tmp_path):
    source, target = "spark-write-stream-in", "spark-write-stream-out"
    create_topic(spark_broker.bootstrap, source, 2)
    create_topic(spark_broker.bootstrap, target, 1)
    produce(spark_broker.bootstrap, source,
            [{"key": b"k", "value": f"{i}".encode(), "partition": i % 2} for i in range(25)])
    query = (spark.readStream.format("databus")
             .option("kafka.bootstrap.servers", spark_broker.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load()
             .selectExpr("key", "value")
             .writeStream.format("databus")
             .option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None and not query.isActive
    got = read_all(spark_broker.bootstrap, target)
    assert sorted(int(r[1]) for r in got) == list(range(25))
    assert {r[0] for r in got} == {b"k"}


@pytest.mark.parametrize("schema, rows, options, message", [
    ("key string", [("a",)], {"topic": "t"}, "needs a 'value' column"),
    ("value string", [("a",)], {}, "needs a 'topic' column, or set the option 'topic'"),
    ("value int", [(1,)], {"topic": "t"}, "column 'value' must be binary or string, got int"),
    ("value string", [("a",)], {"topic": "t", "subscribe": "t"}, "unknown option 'subscribe'"),
])
def test_bad_writes_fail_with_clear_messages(spark, spark_broker, schema, rows, options, message):
    df = spark.createDataFrame(rows, schema)
    with pytest.raises(Exception) as info:
        _writer(df, spark_broker, **options).mode("append").save()
    assert message in str(info.value)
