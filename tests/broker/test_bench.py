"""The broker benchmarks run end to end (tiny sizes: this checks they work, not speed)."""

import subprocess
import sys


def test_bench_produce_and_consume_run_against_a_broker(broker):
    for bench in ("produce", "consume"):
        result = subprocess.run(
            [sys.executable, "-m", "databus.cli", "bench", bench, "--bootstrap",
             broker.bootstrap, "--records", "20000", "--partitions", "2",
             *(["--acks", "1", "all"] if bench == "produce" else ["--rounds", "1"])],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert "records/s" in result.stdout
        assert ("bare Produce" if bench == "produce" else "bare Fetch") in result.stdout
