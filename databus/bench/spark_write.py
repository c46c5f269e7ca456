"""``databus bench spark-write``: ``df.write.format("databus")`` plain (at least once, the
default) beside ``exactlyOnce=true`` (each task's rows in a Kafka transaction committed with
the job) in the same run, against the same broker.

Writes ``--records`` rows of ``--record-size``-byte values from ``spark.range`` (no source
I/O: what is timed is the sink) in ``--tasks`` tasks to a topic of ``--partitions``
partitions, alternating the two modes for ``--rounds`` rounds (best of each), after one
warm-up write of each; read_committed row counts checked at the end.
"""

from __future__ import annotations

import sys
import time

from .common import add_broker_options, broker_for, create_topic
from .spark import _session


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--records", type=int, default=500_000, help="rows per write")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per row")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--tasks", type=int, default=2, help="Spark tasks per write")
    parser.add_argument("--rounds", type=int, default=3, help="timed writes of each mode")
    parser.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")


def _committed(bootstrap: str, topic: str) -> int:
    """Rows a read_committed reader (librdkafka) sees in ``topic``."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                                         "isolation.level": "read_committed",
                                         "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in meta.partitions])
        count, done = 0, set()
        while len(done) < len(meta.partitions):
            msgs = consumer.consume(10_000, 10)
            if not msgs:
                raise RuntimeError("read_committed count timed out")
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        done.add(msg.partition())
                        continue
                    raise RuntimeError(msg.error())
                count += 1
        return count
    finally:
        consumer.close()


def run(args) -> int:
    import databus_spark

    from databus.cli_helpers.table import Column, print_table

    with broker_for(args) as (bootstrap, _cpu):
        topics = {mode: f"bench-spark-write-{mode}-{time.time_ns()}" for mode in ("plain", "eo")}
        for topic in topics.values():
            create_topic(bootstrap, topic, args.partitions)
        spark = _session(args.master)
        try:
            databus_spark.register(spark)
            df = spark.range(args.records, numPartitions=args.tasks).selectExpr(
                f"CAST(substring(repeat(CAST(id AS STRING), {args.record_size}), 1, "
                f"{args.record_size}) AS BINARY) AS value")

            def write(mode: str) -> float:
                writer = (df.write.format("databus").option("kafka.bootstrap.servers", bootstrap)
                          .option("topic", topics[mode]))
                if mode == "eo":
                    writer = writer.option("exactlyOnce", "true")
                start = time.perf_counter()
                writer.mode("append").save()
                return time.perf_counter() - start

            write("plain"), write("eo")  # warm-up: the JVM's and the Python workers' first job
            best = {"plain": float("inf"), "eo": float("inf")}
            for _ in range(args.rounds):
                for mode in best:
                    best[mode] = min(best[mode], write(mode))
        finally:
            spark.stop()
        expected = args.records * (args.rounds + 1)
        got = {mode: _committed(bootstrap, topic) for mode, topic in topics.items()}
    if any(n != expected for n in got.values()):
        print(f"read_committed row counts differ: {got}, expected {expected} each",
              file=sys.stderr)
        return 1
    rows = [
        ('write.format("databus") (at least once)', best["plain"], "1.00x"),
        ("  exactlyOnce=true (a transaction per task)", best["eo"],
         f"{best['plain'] / best['eo']:.2f}x"),
    ]
    print_table(
        [Column("run"), *(Column(h, justify="right") for h in
                          ("records", "seconds", "records/s", "MB/s", "vs plain"))],
        [(name, f"{args.records:,}", f"{s:.2f}", f"{args.records / s:,.0f}",
          f"{args.records * args.record_size / s / 1e6:.1f}", ratio) for name, s, ratio in rows],
        title=f"databus bench spark-write: {args.records:,} x {args.record_size} B, "
              f"{args.tasks} tasks -> {args.partitions} partitions, {args.master}, "
              f"best of {args.rounds}",
    )
    return 0
