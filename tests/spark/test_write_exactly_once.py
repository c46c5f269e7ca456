"""The exactly-once writer (``exactlyOnce=true``): each task's rows in a Kafka transaction
committed by Spark's job or micro-batch commit.  Read back with confluent-kafka (librdkafka)
at read_committed, and at read_uncommitted where the test must show that a transaction was
there (aborted records are in the log, invisible to read_committed readers).

The commit decision's record format is tested without a broker; the replay of a micro-batch
whose commit was cut short (the driver killed between its decision and its EndTxns) is
driven step by step through the writer's I/O module against a real broker; a real driver
killed with kill -9 and restarted from its checkpoint is test_write_kill.py's.
"""

from __future__ import annotations

import confluent_kafka
import pyarrow as pa
import pytest
from databus_spark import commit, produce
from databus_spark.options import OptionError, parse_sink_options

from databus.client import PreparedTransaction

from .kafka_data import create_topic
from .kafka_data import produce as send

# -- the decision record, pure ----------------------------------------------------------------


def _txns(group, n):
    return tuple(PreparedTransaction(commit.transactional_id(group, i), 1000 + i, i % 3)
                 for i in range(n))


def test_decision_round_trips_and_the_latest_wins():
    group = "databus-spark-q1"
    first = commit.encode(group, commit.Decision(4, _txns(group, 3)), "t", 2)
    assert list(first) == [("t", 0)] and first[("t", 0)][0] == 5
    assert commit.decode(group, first) == commit.Decision(4, _txns(group, 3))
    # a later batch written to another topic: its decision is the one read
    later = commit.encode(group, commit.Decision(7, _txns(group, 1)), "u", 1)
    assert commit.decode(group, {**first, **later}) == commit.Decision(7, _txns(group, 1))
    assert commit.decode(group, {}) is None


def test_a_big_decision_is_split_over_partitions_and_refused_when_it_cannot_fit():
    group = "g"
    many = _txns(group, 500)
    encoded = commit.encode(group, commit.Decision(0, many), "t", 8, max_bytes=2000)
    assert len(encoded) > 1
    assert all(len(m.encode()) <= 2000 for _, m in encoded.values())
    assert commit.decode(group, encoded).transactions == many
    # a chunk missing: the record is incomplete, said so rather than half used
    del encoded[("t", 1)]
    with pytest.raises(commit.DecisionError, match="incomplete"):
        commit.decode(group, encoded)
    with pytest.raises(commit.DecisionError, match="fewer tasks"):
        commit.encode(group, commit.Decision(0, many), "t", 1, max_bytes=2000)


@pytest.mark.parametrize("options, message", [
    ({"exactlyOnce": "yes"}, "option 'exactlyOnce' must be true or false"),
    ({"transactionalIdPrefix": "p"}, "'transactionalIdPrefix' needs exactlyOnce=true"),
    ({"exactlyOnce": "true", "transactionalIdPrefix": " "}, "'transactionalIdPrefix' is empty"),
    ({"kafka.transactional.id": "t"}, "each task needs its own"),
])
def test_bad_exactly_once_options_fail_with_clear_messages(options, message):
    with pytest.raises(OptionError, match=message):
        parse_sink_options({"kafka.bootstrap.servers": "h:9092", **options})


def test_exactly_once_defaults_the_transaction_timeout_and_keeps_the_users():
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:9092", "exactlyOnce": "TRUE"})
    assert opts.exactly_once and opts.transactional_id_prefix == "databus-spark"
    assert opts.kafka["transaction.timeout.ms"] == "900000"
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:9092", "exactlyOnce": "true",
                               "kafka.transaction.timeout.ms": "30000"})
    assert opts.kafka["transaction.timeout.ms"] == "30000"
    assert not parse_sink_options({"kafka.bootstrap.servers": "h:9092"}).exactly_once


# -- the writer's I/O against a broker ---------------------------------------------------------


def read_values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """Every value of ``topic`` a reader at ``isolation`` sees (to the end of each partition:
    the last stable offset at read_committed)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "reference", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": isolation,
    })
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in meta.partitions])
        out, done = [], set()
        while len(done) < len(meta.partitions):
            msg = consumer.poll(10)
            assert msg is not None, "reference consumer timed out"
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            out.append(msg.value())
        return out
    finally:
        consumer.close()


def _batches(values):
    return [pa.record_batch([pa.array(values, pa.binary())], names=["value"])]


def test_a_replayed_micro_batch_whose_commit_was_cut_short_is_written_once(spark_broker):
    bootstrap, topic, group = spark_broker.bootstrap, "spark-eo-replay", "databus-spark-qreplay"
    create_topic(bootstrap, topic, 2)
    kafka = {"bootstrap.servers": bootstrap, "transaction.timeout.ms": "60000"}
    rows = [[b"a0", b"a1"], [b"b0", b"b1", b"b2"]]

    def run_tasks(batch_id, label=b""):
        return [produce.write_task(bootstrap, kafka, _batches([label + v for v in vs]), topic,
                                   transactional_id=commit.transactional_id(group, task),
                                   marker_group=group, batch_id=batch_id)
                for task, vs in enumerate(rows)]

    # batch 0 commits normally
    assert produce.commit_micro_batch(bootstrap, kafka, group, 0, run_tasks(0)) == 2
    # batch 1: the tasks prepare; the driver records the decision, commits the first task's
    # transaction and dies before the second's
    results = run_tasks(1, b"1-")
    # prepared, not committed: invisible to read_committed readers
    assert sorted(read_values(bootstrap, topic)) == [b"a0", b"a1", b"b0", b"b1", b"b2"]
    decision = commit.Decision(1, tuple(r.prepared for r in results))
    _record_and_commit_first(bootstrap, kafka, group, topic, decision)
    seen = sorted(read_values(bootstrap, topic, "read_uncommitted"))
    assert seen.count(b"1-a0") == 1 and seen.count(b"1-b0") == 1  # both in the log
    # the restarted query replays batch 1: its tasks find the decision and write nothing...
    replay = run_tasks(1, b"1-")
    assert all(r.skipped and r.prepared is None for r in replay)
    # ...and its commit finishes the recorded transactions
    assert produce.commit_micro_batch(bootstrap, kafka, group, 1, replay) == 2
    committed = sorted(read_values(bootstrap, topic))
    assert committed == sorted([b"a0", b"a1", b"b0", b"b1", b"b2",
                                b"1-a0", b"1-a1", b"1-b0", b"1-b1", b"1-b2"])
    # batch 2 after the replay: the tasks write again (the same transactional ids, new epochs)
    assert produce.commit_micro_batch(bootstrap, kafka, group, 2, run_tasks(2, b"2-")) == 2
    assert len(read_values(bootstrap, topic)) == 15


def test_a_replay_without_a_decision_aborts_what_the_crashed_run_left_open(spark_broker):
    bootstrap, topic, group = spark_broker.bootstrap, "spark-eo-undecided", "databus-spark-qopen"
    create_topic(bootstrap, topic, 1)
    kafka = {"bootstrap.servers": bootstrap, "transaction.timeout.ms": "60000"}

    def task(batch_id):
        return produce.write_task(bootstrap, kafka, _batches([b"x", b"y"]), topic,
                                  transactional_id=commit.transactional_id(group, 0),
                                  marker_group=group, batch_id=batch_id)

    task(0)  # prepared; the driver dies before its commit records anything
    replay = task(0)  # the same transactional id: the first attempt's transaction is aborted
    assert not replay.skipped
    assert produce.commit_micro_batch(bootstrap, kafka, group, 0, [replay]) == 1
    assert sorted(read_values(bootstrap, topic)) == [b"x", b"y"]
    assert sorted(read_values(bootstrap, topic, "read_uncommitted")) == [b"x", b"x", b"y", b"y"]


def test_fencing_a_failed_tasks_id_releases_the_readers_it_held_back(spark_broker):
    # a task Spark killed leaves no commit message: the job's abort fences its id
    bootstrap, topic, group = spark_broker.bootstrap, "spark-eo-fence", "databus-spark-jfence"
    create_topic(bootstrap, topic, 1)
    kafka = {"bootstrap.servers": bootstrap, "transaction.timeout.ms": "60000"}
    produce.write_task(bootstrap, kafka, _batches([b"lost"]), topic,
                       transactional_id=commit.transactional_id(group, 3))
    send(bootstrap, topic, [{"value": b"after"}])
    assert read_values(bootstrap, topic) == []  # held back by the open transaction
    produce.fence(bootstrap, kafka, [commit.transactional_id(group, 3)])
    assert read_values(bootstrap, topic) == [b"after"]


def _record_and_commit_first(bootstrap, kafka, group, topic, decision):
    import trio

    from databus.client import Admin, Cluster, ProducerConfig, complete_transactions

    async def run():
        async with Admin(bootstrap) as admin:
            await admin.alter_group_offsets(group, commit.encode(group, decision, topic, 2))
        config = ProducerConfig.from_kafka({})
        cluster = Cluster(bootstrap, config)
        async with cluster.running():
            await complete_transactions(cluster, config, decision.transactions[:1], True)

    trio.run(run)


# -- in Spark ----------------------------------------------------------------------------------


def _writer(df, broker, **options):
    writer = (df.write.format("databus").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("exactlyOnce", "true"))
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer


def test_batch_write_commits_with_the_job_and_a_failed_job_leaves_nothing(spark, spark_broker):
    topic = "spark-eo-batch"
    create_topic(spark_broker.bootstrap, topic, 2)
    df = spark.range(60).selectExpr("CAST(id AS STRING) AS value").repartition(3)
    _writer(df, spark_broker, topic=topic).mode("append").save()
    assert sorted(int(v) for v in read_values(spark_broker.bootstrap, topic)) == list(range(60))

    # a job whose last task fails after it sent rows (a null topic in its last row): the job
    # aborts, and read_committed readers see none of its rows though they are in the log
    failing = spark.range(100, 130, numPartitions=3).selectExpr(
        f"IF(id = 129, NULL, '{topic}') AS topic", "CAST(id AS STRING) AS value",
        "CAST(id % 2 AS INT) AS partition")
    with pytest.raises(Exception, match="null 'topic'"):
        _writer(failing, spark_broker).mode("append").save()
    assert sorted(int(v) for v in read_values(spark_broker.bootstrap, topic)) == list(range(60))
    uncommitted = {int(v) for v in read_values(spark_broker.bootstrap, topic, "read_uncommitted")}
    assert uncommitted & set(range(100, 120)), "the failed job's first tasks wrote nothing"
    assert uncommitted & set(range(120, 129)), "the failing task wrote nothing before it failed"
    # and the failed task's transaction is not left open (it would hold read_committed
    # readers of its partitions back until its timeout): a later job's rows are visible
    later = spark.range(200, 210).selectExpr("CAST(id AS STRING) AS value",
                                             "CAST(id % 2 AS INT) AS partition")
    _writer(later, spark_broker, topic=topic).mode("append").save()
    assert sorted(int(v) for v in read_values(spark_broker.bootstrap, topic)) == (
        list(range(60)) + list(range(200, 210)))


def test_stream_write_commits_each_micro_batch_once(spark, spark_broker, tmp_path):
    source, target = "spark-eo-stream-in", "spark-eo-stream-out"
    create_topic(spark_broker.bootstrap, source, 2)
    create_topic(spark_broker.bootstrap, target, 2)
    send(spark_broker.bootstrap, source, [{"value": str(i).encode(), "partition": i % 2}
                                          for i in range(50)])
    query = (spark.readStream.format("databus")
             .option("kafka.bootstrap.servers", spark_broker.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "20").load()
             .selectExpr("value")
             .writeStream.format("databus")
             .option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", target)
             .option("exactlyOnce", "true")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None and not query.isActive
    assert sorted(int(v) for v in read_values(spark_broker.bootstrap, target)) == list(range(50))
