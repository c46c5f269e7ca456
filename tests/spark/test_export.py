"""``databus spark export`` end to end: topics named as the mirror names them
(``region-a.orders``) -> Parquet partitioned by topic and date, exactly once across runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date

import msgpack

from databus.cli import main

from .kafka_data import create_topic, produce

DAY1 = 1_764_028_800_000  # 2025-11-25T00:00:00Z
DAY2 = DAY1 + 86_400_000


def _orders(start, n, partitions):
    return [{"value": json.dumps({"id": i, "amount": i * 1.5,
                                  "at": DAY1 + (i % 2) * 86_400_000 + i}).encode(),
             "partition": i % partitions} for i in range(start, start + n)]


def test_export_over_mirrored_topics(spark, spark_broker, tmp_path, capsys):
    boot = spark_broker.bootstrap
    for topic, partitions in (("region-a.orders", 2), ("region-a.payments", 1),
                              ("region-b.orders", 1)):
        create_topic(boot, topic, partitions)
    produce(boot, "region-a.orders", _orders(0, 40, 2))
    produce(boot, "region-a.payments", _orders(100, 10, 1))
    produce(boot, "region-b.orders", _orders(200, 5, 1))  # another region: not exported
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    argv = ["spark", "export", "--bootstrap-server", boot, "--topic-pattern", r"region-a\..*",
            "--path", str(out), "--checkpoint", str(checkpoint), "--event-time", "at",
            "--max-offsets-per-trigger", "30", "--available-now"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "batch 0: " in printed and "rows/s, lag " in printed

    produce(boot, "region-a.orders", _orders(40, 20, 2))  # arrives between runs
    assert main(argv) == 0

    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r["topic"], r["id"], r["amount"], r["date"]) for r in rows)
    want = sorted(
        [("region-a.orders", i, i * 1.5, date(2025, 11, 25 + i % 2)) for i in range(60)]
        + [("region-a.payments", i, i * 1.5, date(2025, 11, 25 + i % 2)) for i in range(100, 110)]
    )
    assert got == want  # each record once, region-b left out, dated by the event time
    assert {p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("_")} == {
        "topic=region-a.orders", "topic=region-a.payments"}
    assert {p.name for p in (out / "topic=region-a.orders").iterdir()} == {
        "date=2025-11-25", "date=2025-11-26"}


def test_export_command_msgpack_with_declared_schema(spark, spark_broker, tmp_path):
    """The real command in its own process (its own Spark), msgpack values, a declared
    schema; a value that does not decode keeps its row (with null fields)."""
    boot = spark_broker.bootstrap
    topic = "region-a.events"
    create_topic(boot, topic, 1)
    records = [{"value": msgpack.packb({"id": i, "name": f"n{i}"}), "timestamp": DAY2 + i}
               for i in range(12)]
    records.append({"value": b"\xc1 not msgpack", "timestamp": DAY2})
    produce(boot, topic, records)
    out = tmp_path / "out"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-m", "databus.cli", "spark", "export", "--bootstrap-server", boot,
         "--topic", topic, "--format", "msgpack", "--schema", "id long, name string",
         "--path", str(out), "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
         "--master", "local[1]", "--conf", "spark.ui.enabled=false"],
        check=False, capture_output=True, text=True, env=env, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch 0: 13 rows" in done.stdout
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r["id"], r["name"]) for r in rows if r["id"] is not None) == [
        (i, f"n{i}") for i in range(12)]
    bad = [r for r in rows if r["id"] is None]
    assert len(bad) == 1 and bad[0]["_offset"] == 12
    assert {r["date"] for r in rows} == {date(2025, 11, 26)}
