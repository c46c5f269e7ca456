"""The "databus" PySpark data source (import name ``databus_spark``).

    import databus_spark
    databus_spark.register(spark)
    df = (spark.read.format("databus")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events").load())

The schema and options are those of Spark's Kafka source (docs/spark.md).  Needs the
``spark`` extra (pyspark >= 4.2, pyarrow).  Modules: options (parsing and checks) and
planning (offsets, rate limits, data loss) are pure Python; cluster does the I/O with
databus's client; arrow builds the record batches; source is the Spark side.
"""

from __future__ import annotations

from databus.protocol.kio_loading import load_kio_without_test_strategies

# Spark's Python workers import this package first: spare each of them hypothesis's import
# (databus/protocol/kio_loading.py says why).
load_kio_without_test_strategies()

FORMAT = "databus"


def register(spark) -> None:
    """Register the ``databus`` format with ``spark`` (a SparkSession)."""
    from .source import DatabusDataSource

    spark.dataSource.register(DatabusDataSource)


__all__ = ["FORMAT", "register"]
