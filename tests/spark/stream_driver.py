"""A Spark driver, run as its own process by test_write_kill.py (so it can be killed with
kill -9): a stream copying topic SOURCE to topic TARGET with the exactly-once databus
writer, from CHECKPOINT.  ``--available-now`` copies what is there and exits; otherwise it
runs micro-batches until killed.

    python stream_driver.py BOOTSTRAP SOURCE TARGET CHECKPOINT [--available-now]
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    bootstrap, source, target, checkpoint = argv[:4]
    available_now = "--available-now" in argv[4:]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    import databus_spark
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("databus-eo-driver")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    databus_spark.register(spark)
    writer = (spark.readStream.format("databus").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "500").load()
              .selectExpr("key", "value")
              .writeStream.format("databus").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", target).option("exactlyOnce", "true")
              .option("checkpointLocation", checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="300 milliseconds")
    query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        print(query.exception(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
