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
