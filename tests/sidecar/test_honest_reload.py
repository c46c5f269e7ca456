"""What a reload says: the changes by name, once, and a restart warning only for a setting
that really changed (command-line flags are not changes); `databus up --check-config`.
The diff itself is plain code, tested directly; the log lines come from a real `databus up`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from databus import Client
from databus.config import parse_config, with_overrides
from databus.sidecar.config_diff import diff_configs
from tests.helpers.processes import UP, start_databus, wait_for_log
from tests.helpers.wait import wait_for

BASE = {
    "producer": {"linger.ms": 5, "acks": "all"},
    "streams": {"orders": {"topic": "orders"}, "clicks": {"topic": "clicks", "acks": 1}},
    "broker": {"data_dir": "data", "listen": "127.0.0.1:0", "options": {"num.partitions": 2}},
}


def config(**changes):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in changes.items():
        data[key] = value
    return parse_config(data, Path("/tmp"))


# -- the diff --------------------------------------------------------------------------------


def test_streams_are_named_and_producer_keys_shown():
    new = config(streams={"orders": {"topic": "orders-v2"}, "payments": {"topic": "pay"}},
                 producer={"linger.ms": 20, "acks": "all", "compression.type": "lz4"})
    diff = diff_configs(config(), new)
    assert diff.applied == [
        "streams added: payments",
        "streams removed: clicks",
        "stream orders changed: topic 'orders' -> 'orders-v2'",
        "producer defaults changed: compression.type='lz4' added, linger.ms 5 -> 20",
    ]
    assert diff.restart == []


def test_sinks_are_a_change():
    """A reload that only adds, changes or removes a sink is a change (adding one once read
    as "no change", and the sink never started)."""
    sink = {"plugin": "parquet", "topics": "orders", "config": {"path": "/tmp/x"}}
    with_sink = config(sinks={"export": sink})
    assert diff_configs(config(), with_sink).applied == ["sinks changed: export added"]
    moved = config(sinks={"export": {**sink, "topics": "clicks"}})
    assert diff_configs(with_sink, moved).applied == ["sinks changed: export changed"]
    assert diff_configs(with_sink, config()).applied == ["sinks changed: export removed"]
    assert not diff_configs(with_sink, config(sinks={"export": sink}))


def test_only_real_restart_settings_warn_and_flags_are_no_change():
    old = with_overrides(config(), socket="/tmp/x/cli.sock", metrics_listen="127.0.0.1:0")
    same_file_again = with_overrides(config(), socket="/tmp/x/cli.sock",
                                     metrics_listen="127.0.0.1:0")
    assert not diff_configs(old, same_file_again)  # nothing at all: no line, no warning
    moved = with_overrides(config(broker={**BASE["broker"], "options": {"num.partitions": 6}},
                                  sidecar={"buffer.memory": 1 << 20}),
                           socket="/tmp/x/cli.sock", metrics_listen="127.0.0.1:0")
    diff = diff_configs(old, moved)
    assert diff.applied == []
    assert diff.restart == ["sidecar.buffer_memory 33554432 -> 1048576",
                            "broker.options.num.partitions 2 -> 6"]


# -- databus up ------------------------------------------------------------------------------


def write_config(path: Path, data: dict) -> None:
    """Replace the file in one rename, so the file watch never reads it half-written."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(data))
    os.replace(tmp, path)


def up_argv(sock: str) -> list[str]:
    return ["-c", "sidecar.yaml", "--socket", sock, "--metrics-listen", "127.0.0.1:0",
            "--kafka-listen", "127.0.0.1:0"]


def test_a_reload_says_what_changed_once(tmp_path, sock_dir):
    sock = os.path.join(sock_dir, "r.sock")
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["sidecar"] = {"socket": "/tmp/databus/file.sock", "reload_poll_ms": 100}
    (tmp_path / "sidecar.yaml").write_text(yaml.safe_dump(data))
    log_path = tmp_path / "up.log"
    process = start_databus(["--log-level", "DEBUG", "up", *up_argv(sock)], tmp_path, log_path)
    try:
        def text() -> str:
            return log_path.read_text(errors="replace")

        wait_for_log(process, log_path, UP, "databus up started")
        data["streams"]["payments"] = {"topic": "payments"}
        write_config(tmp_path / "sidecar.yaml", data)
        process.send_signal(signal.SIGHUP)  # both triggers fire for the one edit
        wait_for(lambda: "reload applied" in text(), "the reload")
        wait_for(lambda: "reload: no change" in text(), "the second trigger's reload")
        applied = re.findall(r"reload applied: (.*)", text())
        assert applied == ["streams added: payments"]
        warnings = [line for line in text().splitlines() if " WARNING " in line]
        assert warnings == []  # --socket / --metrics-listen differ from the file: no change

        with Client(sock) as client:  # the new stream is live
            assert client.send("payments", b"p").result(30).topic == "payments"

        data["broker"]["options"]["num.partitions"] = 4
        write_config(tmp_path / "sidecar.yaml", data)
        wait_for(lambda: len(re.findall("reload applied", text())) == 2, "the second reload")
        warnings = [line.split(" WARNING ", 1)[1] for line in text().splitlines()
                    if " WARNING " in line]
        assert warnings == ["databus.sidecar: reload: broker.options.num.partitions 2 -> 4: "
                            "takes effect only after a restart"]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def test_check_config_prints_the_diff_and_applies_nothing(tmp_path, sock_dir):
    sock = os.path.join(sock_dir, "c.sock")
    (tmp_path / "sidecar.yaml").write_text(yaml.safe_dump(BASE))
    new = yaml.safe_load(yaml.safe_dump(BASE))
    new["streams"]["orders"]["topic"] = "orders-v2"
    new["broker"]["options"]["num.partitions"] = 6
    new["sidecar"] = {"socket": "/tmp/databus/ignored.sock"}  # the flag wins, as when running
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(new))
    (tmp_path / "bad.yaml").write_text("streams: [1\n")

    def check(path: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "databus.cli", "up", *up_argv(sock), "--check-config", path],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)

    result = check("new.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "new.yaml: valid; against sidecar.yaml:",
        "  reload applies: stream orders changed: topic 'orders' -> 'orders-v2'",
        "  needs a restart: broker.options.num.partitions 2 -> 6",
    ]
    assert not os.path.exists(sock) and not (tmp_path / "data").exists()  # nothing started
    assert check("sidecar.yaml").stdout.splitlines()[1:] == ["  no change"]
    bad = check("bad.yaml")
    assert bad.returncode == 2 and "bad.yaml: invalid YAML" in bad.stderr
