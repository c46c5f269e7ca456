"""``databus bench spark``: a batch read through the ``databus`` data source, aggregated in
Spark, beside Spark scanning the same rows from Parquet in the same run.

Fills a topic with ``--records`` values of ``--record-size`` bytes (librdkafka, as ``databus
bench produce``), then in a local Spark (``--master``, default ``local[2]``) times
``count(*), sum(length(value)), max(offset)`` over ``spark.read.format("databus")`` (every
record fetched by our client in the executors and handed over as Arrow batches), writes the
same rows to Parquet once, and times the same aggregation over the Parquet files.  Best of
``--rounds``.  The broker runs on the same machine and competes for its cores.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from .common import add_broker_options, broker_for, create_topic, produce_records


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--records", type=int, default=2_000_000, help="records to read")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--compression", default="none", help="compression.type of the fill")
    parser.add_argument("--rounds", type=int, default=3, help="timed reads of each kind")
    parser.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")


def _session(master: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("databus-bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _best(rounds: int, action) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(rounds):
        start = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - start)
    return best, result


def run(args) -> int:
    import databus_spark
    from pyspark.sql import functions as F

    from databus.cli_helpers.table import Column, print_table

    with broker_for(args) as (bootstrap, _cpu), tempfile.TemporaryDirectory(
        prefix="databus-bench-spark-"
    ) as tmp:
        topic = f"bench-spark-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        fill = produce_records(bootstrap, topic, args.records, args.record_size,
                               compression=args.compression)
        spark = _session(args.master)
        try:
            databus_spark.register(spark)
            source = (spark.read.format("databus").option("kafka.bootstrap.servers", bootstrap)
                      .option("subscribe", topic).load())
            agg = [F.count("*").alias("rows"), F.sum(F.length("value")).alias("bytes"),
                   F.max("offset").alias("last")]
            source.agg(*agg).collect()  # warm-up: the JVM's and the Python workers' first job
            read_s, read = _best(args.rounds, lambda: source.agg(*agg).collect()[0])
            path = os.path.join(tmp, "parquet")
            source.write.parquet(path)
            parquet = spark.read.parquet(path)
            parquet.agg(*agg).collect()
            scan_s, scan = _best(args.rounds, lambda: parquet.agg(*agg).collect()[0])
        finally:
            spark.stop()
    if read["rows"] != args.records or scan["rows"] != args.records:
        print(f"row counts differ: databus {read['rows']}, parquet {scan['rows']}, "
              f"produced {args.records}", file=sys.stderr)
        return 1
    rows = [
        ("fill (librdkafka, acks=1)", fill, ""),
        ('spark.read.format("databus") -> agg', read_s, f"{scan_s / read_s:.2f}x"),
        ("spark.read.parquet -> agg (same rows)", scan_s, "1.00x"),
    ]
    print_table(
        [Column("run"), *(Column(h, justify="right") for h in
                          ("records", "seconds", "records/s", "MB/s", "vs Parquet"))],
        [(name, f"{args.records:,}", f"{s:.2f}", f"{args.records / s:,.0f}",
          f"{args.records * args.record_size / s / 1e6:.1f}", ratio) for name, s, ratio in rows],
        title=f"databus bench spark: {args.records:,} x {args.record_size} B, "
              f"{args.partitions} partitions, compression {args.compression}, {args.master}, "
              f"best of {args.rounds}",
    )
    return 0
