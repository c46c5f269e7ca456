"""``databus bench parquet`` runs end to end (tiny sizes: this checks it works, not speed)."""

import subprocess
import sys


def test_bench_parquet_runs_against_a_broker(broker):
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "bench", "parquet", "--bootstrap",
         broker.bootstrap, "--records", "20000", "--flush-size", "3000"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "records/s" in result.stdout
    assert "sinks runtime + parquet" in result.stdout and "parquet sink alone" in result.stdout


def test_bench_index_runs_against_a_broker(broker):
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", "bench", "index",
         "--bootstrap", broker.bootstrap, "--records", "2000", "--users", "100",
         "--queries", "20"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for row in ("build: sinks runtime + index", "build: index sink alone",
                "log_id=… (limit 1): lookup + fetch", "user_id=… (limit 10): lookup + fetch",
                "one-shot databus.index.query()"):
        assert row in result.stdout, result.stdout


def test_bench_iceberg_runs_against_a_broker(broker):
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", "bench", "iceberg",
         "--bootstrap", broker.bootstrap, "--records", "20000", "--flush-size", "3000",
         "--commit-interval-ms", "500"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for row in ("sinks runtime + parquet", "sinks runtime + iceberg", "parquet sink alone",
                "iceberg sink alone"):
        assert row in result.stdout, result.stdout
    assert "x" in result.stdout.split("sinks runtime + iceberg")[1].splitlines()[0]
