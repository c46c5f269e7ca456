"""Fixtures of the Spark tests: ONE local Spark session for the whole run (a JVM and its
Python workers cost seconds to start; a later query costs about one) and one broker
subprocess.  Spark's environment (the venv's python for its workers, loopback only) must be
set before the JVM starts, so it is set here, before the session is built.

The pure-Python tests in this directory (test_options.py, test_planning.py) need neither
and run wherever pyspark is missing.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest


def _spark_missing() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no `java` on PATH and no JAVA_HOME: Spark needs a JVM (Java 17+)"
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the spark extra is not installed ({exc}): pip install -e '.[spark]'"
    return None


@pytest.fixture(scope="session")
def spark():
    reason = _spark_missing()
    if reason:
        pytest.skip(reason)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    import databus_spark
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("databus-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    databus_spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    """A ``databus broker`` subprocess shared by the Spark tests (each uses its own topics)."""
    from databus.broker.process import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("spark-broker")) as running:
        yield running
