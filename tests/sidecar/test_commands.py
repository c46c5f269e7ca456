"""`databus sidecar` as a process: refusals with clear messages, loopback TCP ingress,
flags over the file, SIGTERM drains and exits 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import yaml

from databus import Client
from tests.helpers.ports import taken_port


def databus(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "databus.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw,
    )


def write(path, data) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_refusals_are_one_clear_line(tmp_path, sock_dir):
    no_cluster = write(tmp_path / "a.yaml", {"sidecar": {"socket": f"{sock_dir}/a.sock"}})
    out, _ = databus("sidecar", "-c", no_cluster).communicate(timeout=60)
    assert "no upstream cluster configured" in out

    bad = write(tmp_path / "b.yaml", {
        "sidecar": {"socket": f"{sock_dir}/b.sock", "metrics_listen": None},
        "clusters": {"k": {"bootstrap.servers": "127.0.0.1:1"}},
        "streams": {"s": {"partitioner": "nope"}},
    })
    process = databus("sidecar", "-c", bad)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "cannot start: unknown partitioner 'nope' (available:" in out
    assert "Traceback" not in out

    invalid = write(tmp_path / "c.yaml", {"producer": {"linger.ms": "soon"}})
    process = databus("up", "-c", invalid)
    out, _ = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "invalid configuration" in out and "linger.ms" in out


def test_sidecar_process_with_tcp_ingress_and_sigterm(tmp_path, sock_dir, mock_cluster):
    config = write(tmp_path / "s.yaml", {
        "sidecar": {"socket": f"{sock_dir}/file.sock", "metrics_listen": None},
        "clusters": {"mock": {"bootstrap.servers": mock_cluster.bootstrap}},
        "streams": {"s": {"topic": "cmd-tcp"}},
    })
    process = databus("sidecar", "-c", config, "--tcp-listen", "127.0.0.1:0",
                      "--socket", f"{sock_dir}/flag.sock")
    try:
        lines = []
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"tcp 127\.0\.0\.1:(\d+)", line)
            port = int(match.group(1)) if match else None
        assert port, "".join(lines)
        assert os.path.exists(f"{sock_dir}/flag.sock")  # the flag won over the file
        with Client(address=("127.0.0.1", port)) as client:
            delivery = client.send("s", b"over tcp").result(30)
        assert delivery.topic == "cmd-tcp"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert not os.path.exists(f"{sock_dir}/flag.sock")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def fails_with(args, cwd, line: str) -> None:
    process = databus(*args, cwd=cwd)
    out, _ = process.communicate(timeout=60)
    assert (process.returncode, out) == (1, line + "\n")


def test_start_up_failures_are_one_line_and_write_nothing(tmp_path, sock_dir):
    """A socket path that cannot be made, a port in use (the sidecar's or the broker's):
    one line naming it, exit 1, and no broker data directory made before it was known."""
    config = write(tmp_path / "up.yaml", {
        "sidecar": {"socket": f"{sock_dir}/up.sock", "metrics_listen": "127.0.0.1:0"},
        "broker": {"data_dir": "data", "listen": "127.0.0.1:0"},
    })
    up = ["up", "-c", config]
    (tmp_path / "a-file").write_text("")
    taken, port = taken_port()
    try:
        fails_with([*up, "--socket", f"{tmp_path}/a-file/up.sock"], tmp_path,
                   f"databus up: cannot create directory for the app socket {tmp_path}/a-file "
                   "(sidecar.socket): a file of that name exists")
        fails_with([*up, "--metrics-listen", f"127.0.0.1:{port}"], tmp_path,
                   f"databus up: cannot listen on 127.0.0.1:{port} (sidecar.metrics_listen): "
                   "address already in use")
        fails_with([*up, "--tcp-listen", f"127.0.0.1:{port}"], tmp_path,
                   f"databus up: cannot listen on 127.0.0.1:{port} (sidecar.tcp_listen): "
                   "address already in use")
        fails_with([*up, "--kafka-listen", f"127.0.0.1:{port}"], tmp_path,
                   "databus up: cannot start the built-in broker: cannot listen on "
                   f"127.0.0.1:{port}: address already in use")
        assert not (tmp_path / "data").exists()
        fails_with([*up, "--data-dir", f"{tmp_path}/a-file/data"], tmp_path,
                   "databus up: cannot start the built-in broker: cannot create data "
                   f"directory {tmp_path}/a-file/data: not a directory")
        sidecar = write(tmp_path / "sidecar.yaml", {
            "sidecar": {"socket": f"{sock_dir}/s.sock", "metrics_listen": f"127.0.0.1:{port}"},
            "clusters": {"k": {"bootstrap.servers": "127.0.0.1:1"}},
        })
        fails_with(["sidecar", "-c", sidecar], tmp_path,
                   f"databus sidecar: cannot listen on 127.0.0.1:{port} "
                   "(sidecar.metrics_listen): address already in use")
    finally:
        taken.close()
    assert not os.path.exists(f"{sock_dir}/up.sock")  # bound, then removed on the way out


def test_bad_yaml_is_one_line_naming_the_file_and_the_place(tmp_path):
    malformed = tmp_path / "malformed.yaml"
    malformed.write_text("sidecar:\n  socket: [unclosed\n")
    fails_with(["up", "-c", str(malformed)], tmp_path,
               f"databus up: invalid configuration: {malformed}: invalid YAML at line 3, "
               "column 1: while parsing a flow sequence, expected ',' or ']', but got "
               "'<stream end>'")
    invalid = write(tmp_path / "invalid.yaml", {"sidecar": {"metrics_listen": "nowhere"}})
    fails_with(["sidecar", "-c", invalid], tmp_path,
               f"databus sidecar: invalid configuration: {invalid}: sidecar.metrics_listen: "
               "metrics_listen must be HOST:PORT, got 'nowhere': no port")
    # Found in the working directory (no -c): named all the same.
    (tmp_path / "sidecar.yaml").write_text("streams:\n  s: {topic: t\n")
    process = databus("up", cwd=tmp_path)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 1 and len(out.splitlines()) == 1, out
    assert out.startswith("databus up: invalid configuration: sidecar.yaml: invalid YAML at "
                          "line 3, column 1: ")


def test_a_bad_acks_names_every_accepted_spelling(tmp_path):
    invalid = write(tmp_path / "acks.yaml", {"producer": {"acks": 7}})
    fails_with(["up", "-c", invalid], tmp_path,
               f"databus up: invalid configuration: {invalid}: producer: invalid value for "
               "'acks' (got 7): acks must be all, -1, 0 or 1 (all and -1 are the same)")
    # Every spelling the message names is accepted.
    from databus.client.config import ProducerConfig
    assert [ProducerConfig.from_kafka({"acks": a, "enable.idempotence": False}).acks
            for a in ("all", "ALL", "-1", -1, "0", 0, "1", 1)] == [-1, -1, -1, -1, 0, 0, 1, 1]
