"""The README's quick start, run as printed in a fresh directory.

`make run` is `databus up -c sidecar.yaml` (the Makefile says so; checked below); the test
runs that command on a copy of sidecar.yaml in an empty directory, with the ports and the
socket moved aside (tests listen on port 0), then the README's Python block (Client() finds
the socket through $DATABUS_SOCKET, as its comment says) and every line of its shell block
in order, with only `.venv/bin/databus` -> this interpreter and 127.0.0.1:9092 -> the
broker's real address substituted.  Every command must exit 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.processes import kafka_listener, start_up

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def quick_start_commands() -> list[str]:
    """The shell block of console-tool commands (the one that starts with databus)."""
    (block,) = [b for b in blocks("sh") if b.startswith(".venv/bin/databus")]
    return [line for line in block.splitlines() if line.strip()]


def test_make_run_is_databus_up_with_sidecar_yaml():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run: install\n\t\$\(BIN\)/databus up -c sidecar.yaml$", makefile, re.M)
    assert "make run" in blocks("sh")[0]


def test_quick_start_runs_as_printed(tmp_path, sock_dir):
    # as shipped, but the schema registry on a free port (8081 may be taken on this machine)
    (tmp_path / "sidecar.yaml").write_text((ROOT / "sidecar.yaml").read_text().replace(
        "schema.registry.listen: 127.0.0.1:8081", "schema.registry.listen: 127.0.0.1:0"))
    sock = os.path.join(sock_dir, "readme.sock")
    process, text = start_up(["-c", "sidecar.yaml", "--socket", sock, "--metrics-listen",
                              "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0"],
                             tmp_path, tmp_path / "up.log", ready=("Kafka listener",))
    bootstrap = kafka_listener(text)
    env = {**os.environ, "DATABUS_SOCKET": sock}
    try:
        (python_block,) = [b for b in blocks("python") if "Client()" in b]
        result = subprocess.run([sys.executable, "-c", python_block], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        assert re.fullmatch(r"Delivery\(topic='orders', partition=\d+, offset=0.*\)\n",
                            result.stdout), result.stdout

        outputs = []
        for line in quick_start_commands():
            command = line.replace(".venv/bin/databus", f"{sys.executable} -m databus.cli")
            command = command.replace("127.0.0.1:9092", bootstrap)
            result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, timeout=120, check=False)
            assert result.returncode == 0, (line, result.stdout, result.stderr)
            outputs.append(result.stdout)
        consumed, described = outputs[2], outputs[3]
        assert sorted(consumed.splitlines()) == ["k1\thello", "k2\tworld"]
        assert "my-group" in described and "clicks" in described
        assert "100000 records sent" in outputs[5]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
