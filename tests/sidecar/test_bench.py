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
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines()
            if line.startswith("│")}
    for path in ("SDK → sidecar → broker", "frames → sidecar → broker",
                 "confluent-kafka → broker"):
        assert path in rows, result.stdout
        assert rows[path].split("│")[-2].strip() == "0", rows[path]  # the errors column
    assert "50 keys" in result.stdout
