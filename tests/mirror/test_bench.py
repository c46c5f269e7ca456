"""`databus bench mirror` runs end to end (tiny sizes: this checks it works, not speed)."""

import subprocess
import sys

from databus.broker.process import _child_env


def test_bench_mirror_runs():
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", "bench", "mirror",
         "--records", "2000", "--rate", "500", "--seconds", "1", "--partitions", "2"],
        capture_output=True, text=True, env=_child_env(), timeout=180, check=False)
    assert result.returncode == 0, result.stderr
    assert "mirror A -> B, exactly-once, backlog" in result.stdout and "2,000" in result.stdout
    assert "mirror A -> B, at-least-once, backlog" in result.stdout
    assert "paced 500/s" in result.stdout


def test_bench_mirror_kernel_runs_and_compares_the_two_copies():
    # --kernel exits non-zero when the two paths build different batches
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "bench", "mirror", "--kernel", "--records", "5000"],
        capture_output=True, text=True, env=_child_env(), timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "record by record" in result.stdout and "columnar" in result.stdout
