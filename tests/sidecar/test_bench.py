"""``databus bench sidecar`` runs end to end (tiny sizes: this checks it works, not speed)."""

import subprocess
import sys


def test_bench_sidecar_runs_every_path_with_keys(broker):
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "bench", "sidecar", "--bootstrap",
         broker.bootstrap, "--messages", "5000", "--rates", "2000", "--seconds", "0.5",
         "--keys", "50"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # stdout is a pipe: plain columns, one row per line starting with its path
    lines = result.stdout.splitlines()
    for path in ("SDK → sidecar → broker", "frames → sidecar → broker",
                 "confluent-kafka → broker"):
        row = next((line for line in lines if line.startswith(path)), None)
        assert row is not None, result.stdout
        assert row.split()[-1] == "0", row  # the errors column, the last one
    assert "50 keys" in result.stdout


def test_bench_consume_sdk_runs_beside_librdkafka(broker):
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "bench", "consume-sdk", "--bootstrap",
         broker.bootstrap, "--records", "3000", "--window", "500"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    for path in ("librdkafka consume() from the broker",
                 "SDK subscribe() + ack() through the sidecar"):
        row = next((line for line in lines if line.startswith(path)), None)
        assert row is not None and "3,000" in row, result.stdout
    assert "CPU per message through the sidecar" in result.stdout


def test_bench_sidecar_breakdown_finds_every_message_in_the_traces():
    """--breakdown: the broker and the sidecar it starts stamp each batch; every delivered
    message of the latency run is found there by partition and offset."""
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "bench", "sidecar", "--only", "sidecar",
         "--breakdown", "--messages", "2000", "--rates", "2000", "--seconds", "0.5",
         "--partitions", "2"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("where the time goes: SDK → sidecar → broker at 2,000/s "
            "(1,000 of 1,000 messages found in the traces)") in result.stdout, result.stdout
    for stage in ("the fsync round", "→ the sidecar has the answer",
                  "→ the app's callback (reports, SDK, GC)"):
        assert any(line.startswith(stage) for line in result.stdout.splitlines()), stage
